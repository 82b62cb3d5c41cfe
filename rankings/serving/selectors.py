"""The read path's questions, in one place for the API and the pages: top-N, rank, ranks and
neighbours from Redis, names from the catalogue, sales per period from PostgreSQL.

A read never touches raw sales; only the sales charts read buckets. Each costs a bounded number of
Redis round trips (O(log n + limit) work there) and at most one catalogue query. Each question is
answered in its own module: boards (rankings/serving/boards.py), a product's standing
(products.py), categories (categories.py), the catalogue's products (catalogue_reads.py), sales per
period (sales_periods.py); all read boards through board_reader.py and answer with the types of
answers.py.
"""

from rankings.engine.instants import instant
from rankings.serving.answers import (
    FRESH_SECONDS,
    Board,
    CategoriesPage,
    CategoryRank,
    Neighbors,
    NotFound,
    NotKept,
    ProductDetail,
    Rank,
    RankedProduct,
    Ranks,
    Unavailable,
    UnitsPerPeriod,
    money,
    split_refused,
)
from rankings.serving.boards import board_top, boards_top_many
from rankings.serving.catalogue_reads import PRODUCT_CATEGORIES_READ, product_detail
from rankings.serving.categories import (
    ALL_NAME,
    categories_names,
    categories_page,
    categories_tree,
    category_children,
    category_name,
    top_categories,
)
from rankings.serving.products import product_neighbors, product_rank, product_ranks
from rankings.serving.sales_periods import chart_bucket_seconds, units_per_period

__all__ = [
    "ALL_NAME",
    "FRESH_SECONDS",
    "PRODUCT_CATEGORIES_READ",
    "Board",
    "CategoriesPage",
    "CategoryRank",
    "Neighbors",
    "NotFound",
    "NotKept",
    "ProductDetail",
    "Rank",
    "RankedProduct",
    "Ranks",
    "Unavailable",
    "UnitsPerPeriod",
    "board_top",
    "boards_top_many",
    "categories_names",
    "categories_page",
    "categories_tree",
    "category_children",
    "category_name",
    "chart_bucket_seconds",
    "instant",
    "money",
    "product_detail",
    "product_neighbors",
    "product_rank",
    "product_ranks",
    "split_refused",
    "top_categories",
    "units_per_period",
]

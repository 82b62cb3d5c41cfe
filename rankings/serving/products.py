"""A product's standing: its rank on a board, its ranks in each of its categories, its neighbours."""

import dataclasses
from collections.abc import Sequence

from rankings.conf import ENGAGEMENT_METRICS
from rankings.engine import store
from rankings.engine.instants import instant
from rankings.serving import board_reader
from rankings.serving.answers import (
    CategoryRank,
    Neighbors,
    NotFound,
    Rank,
    Ranks,
    Unavailable,
    figures,
    percentile,
    reading,
    served,
)
from rankings.serving.boards import items_of
from rankings.serving.catalogue_reads import (
    PRODUCT_CATEGORIES_READ,
    PRODUCT_ID,
    catalogue_product,
    categories_last_read,
    product_category_slugs,
    product_names,
)
from rankings.serving.categories import categories_tree, category_name
from rankings.serving.layouts import layout_of
from rankings.serving.rank_then import ranks_then


@reading
def product_rank(*, product_id: str, category: str, window: str, metric: str) -> Rank:
    category_name(category)
    return served(
        ("rank", product_id, category, window, metric),
        lambda: _product_rank(product_id=product_id, category=category, window=window, metric=metric),
    )


def _product_rank(*, product_id: str, category: str, window: str, metric: str) -> Rank:
    if not PRODUCT_ID.fullmatch(product_id):
        raise NotFound(f"unknown product '{product_id}'")
    version = store.served_version()
    layout = layout_of(version)
    found = board_reader.member_rank(
        version, layout, category=category, window=window, metric=metric, product_id=product_id
    )
    if found.rank is None:
        # Only an unranked product needs the catalogue to tell "not ranked" from "no such
        # product": a ranked one has sales, and a product with sales cannot be deleted.
        catalogue_product(product_id)
    rank = found.rank + 1 if found.rank is not None else None
    sales = None
    if metric in ENGAGEMENT_METRICS:  # its sales, read beside
        (beside,) = board_reader.sales_beside(version, layout, window, metric, [(category, [product_id])])
        sales = beside.get(product_id)
    units, revenue, *engagement = figures(metric, found.score, found.other, sales)
    return Rank(
        product_id,
        category,
        window,
        metric,
        instant(found.as_of),
        rank,
        units,
        revenue,
        found.total,
        percentile(rank, found.total),
        False,
        *engagement,
    )


@reading
def product_ranks(*, product_id: str, window: str, metric: str, every_level: bool = False) -> Ranks:
    """The product's rank in each of its first PRODUCT_CATEGORIES_READ catalogue categories by slug,
    in one Redis round trip; with `every_level`, in them and their ancestors in the tree that
    counts (each once), the first PRODUCT_CATEGORIES_READ of those. `more` says some were left out."""
    categories: Sequence[str] | None
    if catalogue_product(product_id) is None:
        categories = categories_last_read(product_id)
        if categories is None:
            raise Unavailable("the catalogue is unavailable and this product's categories are unknown")
    else:
        categories = product_category_slugs(product_id)
    if every_level:
        categories = categories_tree().expand(categories)
    more, categories = len(categories) > PRODUCT_CATEGORIES_READ, list(categories[:PRODUCT_CATEGORIES_READ])
    ranks = served(
        ("ranks", product_id, window, metric, tuple(categories)),
        lambda: _product_ranks(product_id=product_id, window=window, metric=metric, categories=categories),
        boards=bool(categories),  # a product in no category reads no board
    )
    return dataclasses.replace(ranks, more=more) if more else ranks


def _product_ranks(*, product_id: str, window: str, metric: str, categories: list[str]) -> Ranks:
    version = store.served_version()
    layout = layout_of(version)
    found = board_reader.members_ranks(
        version, layout, categories=categories, window=window, metric=metric, product_id=product_id
    )
    known = [f.as_of for f in found if f.as_of]
    sales = board_reader.sales_beside(
        version, layout, window, metric, [(c, [product_id]) for c in categories]
    )
    ranks = []
    for category, f, beside in zip(categories, found, sales, strict=True):
        rank = f.rank + 1 if f.rank is not None else None
        units, revenue, *engagement = figures(metric, f.score, f.other, beside.get(product_id))
        ranks.append(
            CategoryRank(category, rank, units, revenue, f.total, percentile(rank, f.total), *engagement)
        )
    return Ranks(
        product_id=product_id,
        window=window,
        metric=metric,
        # One board of unknown instant (its shard lost in Redis, or behind what this process read)
        # makes the whole answer unknown: served stale, not fresh with that board's rank wrong.
        as_of=instant(min(known)) if known and len(known) == len(found) else None,
        ranks=tuple(ranks),
    )


@reading
def product_neighbors(*, product_id: str, category: str, window: str, metric: str, n: int) -> Neighbors:
    """The n products ranked just above and just below the product, and the product itself."""
    category_name(category)
    return served(
        ("neighbors", product_id, category, window, metric, n),
        lambda: _product_neighbors(
            product_id=product_id, category=category, window=window, metric=metric, n=n
        ),
    )


def _product_neighbors(*, product_id: str, category: str, window: str, metric: str, n: int) -> Neighbors:
    if not PRODUCT_ID.fullmatch(product_id):
        raise NotFound(f"unknown product '{product_id}'")
    version = store.served_version()
    layout = layout_of(version)
    found, start, board, names = board_reader.neighbors(
        version, layout, category=category, window=window, metric=metric, product_id=product_id, n=n
    )
    if board is None:
        # As for a rank: only an unranked product needs the catalogue ("not ranked" or "no such
        # product"); a ranked one has sales, and a product with sales cannot be deleted.
        catalogue_product(product_id)
        return Neighbors(product_id, category, window, metric, instant(found.as_of), None, ())
    assert found.rank is not None  # a product with a slice around it has a rank
    as_of = instant(board.as_of)
    (sales,) = board_reader.sales_beside(
        version, layout, window, metric, [(category, [pid for pid, _, _ in board.rows])]
    )
    then = ranks_then(category=category, window=window, metric=metric, as_of=as_of)
    named = names or {}
    unnamed = [pid for pid, _, _ in board.rows if pid not in named]
    if unnamed:  # those Redis's copies lack, if the read asked them, else all
        named = named | product_names(unnamed, copy_read=names is not None)
    items = items_of(board.rows, start + 1, metric, named, then=then, sales=sales)
    return Neighbors(product_id, category, window, metric, as_of, found.rank + 1, items)

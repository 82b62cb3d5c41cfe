from django.contrib import admin
from django.urls import path, register_converter
from drf_spectacular.views import SpectacularSwaggerSplitView

from rankings.serving import (
    alerts_api,
    api,
    catalogue_api,
    categories_api,
    engagement_api,
    moves_api,
    moves_pages,
    pages,
    paths,
    schema_api,
)

register_converter(paths.CategorySlug, "category")
register_converter(paths.ProductId, "product")
register_converter(paths.AlertId, "alert")

urlpatterns = [
    # The read API first, the most asked for first: a URL is matched against each pattern in
    # turn, and a read is answered in little more time than it takes to try them all.
    path("v1/categories/<category:slug>/top", api.BoardTopApi.as_view(), name="board-top"),
    path("v1/products/<product:product_id>/rank", api.ProductRankApi.as_view(), name="product-rank"),
    path("v1/products/<product:product_id>/ranks", api.ProductRanksApi.as_view(), name="product-ranks"),
    path(
        "v1/products/<product:product_id>/neighbors",
        api.ProductNeighborsApi.as_view(),
        name="product-neighbors",
    ),
    path("v1/categories/<category:slug>/thresholds", api.ThresholdsApi.as_view(), name="board-thresholds"),
    path("v1/categories/<category:slug>/movers", moves_api.BoardMoversApi.as_view(), name="board-movers"),
    path("v1/categories/<category:slug>/new", moves_api.BoardNewApi.as_view(), name="board-new"),
    path(
        "v1/products/<product:product_id>/history",
        moves_api.ProductHistoryApi.as_view(),
        name="product-history",
    ),
    path("v1/categories", categories_api.CategoryListApi.as_view(), name="categories"),
    path("v1/status", api.StatusApi.as_view(), name="status"),
    path("v1/sales", api.SalesIngestApi.as_view(), name="sales-ingest"),
    path("v1/engagements", engagement_api.EngagementsIngestApi.as_view(), name="engagements-ingest"),
    path("v1/catalogue/products", catalogue_api.ProductsPushApi.as_view(), name="catalogue-products"),
    path("v1/catalogue/categories", catalogue_api.CategoriesPushApi.as_view(), name="catalogue-categories"),
    path("v1/alerts", alerts_api.AlertsApi.as_view(), name="alerts"),
    path("v1/alerts/<alert:alert_id>", alerts_api.AlertApi.as_view(), name="alert"),
    path("v1/schema", schema_api.SchemaApi.as_view(), name="schema"),
    # The split view serves its start-up script as a file of its own (?script):
    # the Content-Security-Policy refuses inline scripts.
    path("v1/docs", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
    path("", pages.home, name="home"),
    path("c/<category:slug>/", pages.category, name="category"),
    path("c/<category:slug>/categories/", pages.subcategories, name="subcategories"),
    path("c/<category:slug>/movers/", moves_pages.movers, name="movers"),
    path("c/<category:slug>/new/", moves_pages.new_releases, name="new-releases"),
    path("p/<product:product_id>/", pages.product, name="product"),
    path("admin/", admin.site.urls),
]

# Under /v1/ every error is JSON, even for a URL that matches no route.
handler404 = "rankings.serving.api.not_found"
handler500 = "rankings.serving.api.server_error"

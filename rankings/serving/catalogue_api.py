"""POST /v1/catalogue/products and /v1/catalogue/categories: the shop's catalogue pushed in bulk,
taken as POST /v1/sales takes sales (a token, a batch, each bad item rejected by its index)."""

from drf_spectacular.utils import extend_schema_view, inline_serializer
from rest_framework import serializers

from catalogue.tree_import import TreeImportError
from rankings.ingest.catalogue import (
    CATALOGUE_BATCH_MOST,
    CategoryItemSerializer,
    ProductItemSerializer,
    categories_push,
    products_push,
)
from rankings.serving.api import BatchApi, EventBatchField, ServiceUnavailable, ingest_schema

_PushReply = inline_serializer(
    "CataloguePushReply",
    {
        "created": serializers.IntegerField(),
        "updated": serializers.IntegerField(
            help_text="items naming a product or category the catalogue had, changed or not"
        ),
        "rejected": inline_serializer(
            "CatalogueRejection",
            {"index": serializers.IntegerField(), "error": serializers.CharField()},
            many=True,
        ),
    },
)


class ProductsPushRequest(serializers.Serializer):
    products = EventBatchField(child=ProductItemSerializer(), limit=CATALOGUE_BATCH_MOST)


class CategoriesPushRequest(serializers.Serializer):
    categories = EventBatchField(child=CategoryItemSerializer(), limit=CATALOGUE_BATCH_MOST)


class CatalogueApi(BatchApi):
    def most(self) -> int:
        return CATALOGUE_BATCH_MOST


@extend_schema_view(
    post=ingest_schema(
        operation_id="catalogue_products",
        request=ProductsPushRequest,
        limit=CATALOGUE_BATCH_MOST,
        items="products",
        reply=_PushReply,
    )
)
class ProductsPushApi(CatalogueApi):
    """Create or update products (names, prices, categories, releases); valid items are stored
    even when others are rejected."""

    permission = "catalogue.change_product"
    items = "products"

    def take(self, items: list) -> dict:
        return products_push(products=items).as_dict()


@extend_schema_view(
    post=ingest_schema(
        operation_id="catalogue_categories",
        request=CategoriesPushRequest,
        limit=CATALOGUE_BATCH_MOST,
        items="categories",
        reply=_PushReply,
    )
)
class CategoriesPushApi(CatalogueApi):
    """Create, rename and move categories as import_categories does (a move counts once a rebuild
    with it is switched to); valid items are stored even when others are rejected."""

    permission = "catalogue.change_category"
    items = "categories"

    def take(self, items: list) -> dict:
        try:
            return categories_push(categories=items).as_dict()
        except TreeImportError as refused:  # the database refused the write: a race, sent again
            raise ServiceUnavailable(f"nothing was stored ({refused}); send the request again") from refused

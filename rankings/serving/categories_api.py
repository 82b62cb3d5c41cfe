"""The list of categories under /v1/: by name, `all` first, by offset to MAX_DEPTH and by cursor past it."""

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.response import Response

from rankings.serving import selectors
from rankings.serving.api import _READ_ERRORS, _THROTTLED, MAX_DEPTH, ReadApi, _Error, _params
from rankings.serving.categories import CATEGORY_COUNT_SECONDS


class CategoryListParams(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=100)
    offset = serializers.IntegerField(min_value=0, max_value=MAX_DEPTH, default=0)
    after = serializers.SlugField(
        max_length=50, required=False, help_text="the page that follows this category (a reply's next)"
    )


class CategoryItemReply(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    url = serializers.URLField()
    # DRF's serializer metaclass takes declared fields off the class, so this field never shadows
    # Field.parent (the serializer a field is bound to); the stubs type the class attribute as that.
    parent = serializers.CharField(  # type: ignore[assignment]
        allow_null=True, help_text="the category above it in the tree the boards count with; null at the top"
    )
    path = serializers.ListField(
        child=serializers.CharField(), help_text="slugs from the top of the tree down to the category itself"
    )

    class Meta:
        ref_name = "CategoryItem"


class CategoryListReply(serializers.Serializer):
    """A page of categories; each item's url is where its best sellers are read."""

    total = serializers.IntegerField(help_text=f"counted at most every {CATEGORY_COUNT_SECONDS:g} s")
    next = serializers.CharField(
        allow_null=True, help_text="pass as after= for the page that follows; null on the last page"
    )
    items = CategoryItemReply(many=True)

    def to_representation(self, instance: selectors.CategoriesPage) -> dict:
        request = self.context["request"]
        tree = selectors.categories_tree()
        return {
            "total": instance.total,
            "next": instance.next,
            "items": [
                {
                    "slug": slug,
                    "name": name,
                    "url": request.build_absolute_uri(f"/v1/categories/{slug}/top"),
                    "parent": tree.parents.get(slug),
                    "path": tree.path(slug),
                }
                for slug, name in instance.items
            ],
        }

    class Meta:
        ref_name = "CategoryList"


class CategoryListApi(ReadApi):
    """The categories, `limit` from `offset` or after the category `after`, with `all` (the board of
    every sale) first; past MAX_DEPTH, a list is read by cursor."""

    @extend_schema(
        operation_id="categories_list",
        parameters=[CategoryListParams],
        responses={
            200: CategoryListReply,
            304: _READ_ERRORS[304],
            400: _Error,
            404: OpenApiResponse(_Error, description="no category has the slug given as after"),
            429: _THROTTLED,
        },
    )
    def get(self, request):
        try:
            page = selectors.categories_page(**_params(CategoryListParams, request))
        except selectors.NotFound as unknown:  # no category has the slug given as after
            raise exceptions.NotFound(str(unknown)) from unknown
        return Response(CategoryListReply(page, context={"request": request}).data)

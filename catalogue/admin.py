"""Editing the catalogue: categories and products, with placeholders from sale events easy to find."""

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch, ProtectedError
from django.db.models.expressions import RawSQL
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from .admin_lists import LargeTableAdmin
from .models import (
    CATEGORY_IN_USE,
    MAX_TREE_DEPTH,
    RESERVED_SLUG,
    Category,
    Product,
    categories_deletion_refused,
    name_validator,
)
from .money import cents_text

PLACEHOLDER_HELP = "Created from a sale event for an unknown id: complete it, then untick."

# What a list row counts or names of a category's products or a product's categories, at most: a
# category may hold millions of products, and each row of a page reads no more than this.
ROW_FAN_OUT = 1_000
PRODUCT_CATEGORIES_SHOWN = 20

# A category's ancestors, fetched with it by joins (the tree is at most MAX_TREE_DEPTH levels deep).
ANCESTORS = "__".join(["parent"] * (MAX_TREE_DEPTH - 1))


def _placeholder_marker(is_placeholder: bool) -> str:
    if not is_placeholder:
        return ""
    return format_html(
        '<span title="{}" style="color:#ba2121;font-weight:bold">needs completing</span>', PLACEHOLDER_HELP
    )


class PlaceholderFilter(admin.SimpleListFilter):
    title = "completeness"
    parameter_name = "placeholder"

    def lookups(self, request, model_admin):
        return [("yes", "placeholders (need completing)"), ("no", "complete")]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(is_placeholder=self.value() == "yes")
        return queryset


class CategoryFilter(admin.SimpleListFilter):
    """Products of one category, named by slug in the URL (?category=toys, as the category list's
    product counts link): the category list is far too long to offer as a filter."""

    title = "category"
    parameter_name = "category"

    def lookups(self, request, model_admin):
        slug = request.GET.get(self.parameter_name)
        return [(slug, slug)] if slug else []

    def has_output(self):
        return True

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(categories__slug=self.value())
        return queryset


class CategoryForm(forms.ModelForm):
    class Meta:
        model = Category
        fields = ["slug", "name", "parent", "is_placeholder"]
        help_texts = {"is_placeholder": PLACEHOLDER_HELP}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["name"].validators.append(name_validator)
        # Cycles and depth are checked by Category.clean (and by the database); a category is
        # never accepted as its own parent (the autocomplete offers only what it searches).
        parents = Category.objects.exclude(slug=RESERVED_SLUG)
        if self.instance.pk is not None:
            parents = parents.exclude(pk=self.instance.pk)
        self.fields["parent"].queryset = parents

    def clean_slug(self):
        slug = self.cleaned_data["slug"]
        if slug == RESERVED_SLUG:
            raise forms.ValidationError(f"'{RESERVED_SLUG}' is reserved for the board of every sale.")
        return slug


class RefusedDeletes:
    """Sales may have named the category or product since the delete page was shown: the model's
    guard then refuses (ProtectedError), and the admin answers 403 with its reason."""

    def delete_model(self, request, obj):
        try:
            super().delete_model(request, obj)  # type: ignore[misc]
        except ProtectedError as error:
            raise PermissionDenied(error.args[0]) from None

    def delete_queryset(self, request, queryset):
        try:
            super().delete_queryset(request, queryset)  # type: ignore[misc]
        except ProtectedError as error:
            raise PermissionDenied(error.args[0]) from None


@admin.register(Category)
class CategoryAdmin(RefusedDeletes, LargeTableAdmin):
    form = CategoryForm
    list_display = ["name", "slug", "place_in_tree", "placeholder", "product_count"]
    list_filter = [PlaceholderFilter, ("parent", admin.EmptyFieldListFilter)]
    list_select_related = [ANCESTORS]
    search_fields = ["slug", "name"]
    # The category_by_name index walked in order: slug makes the order total, so the list needs no
    # sort of its own.
    ordering = ["name", "slug"]
    autocomplete_fields = ["parent"]
    prepopulated_fields = {"slug": ["name"]}

    def get_queryset(self, request):
        # Each row's products counted no further than ROW_FAN_OUT, for the page's rows only.
        capped = RawSQL(
            "SELECT count(*) FROM (SELECT 1 FROM catalogue_product_categories link"
            " WHERE link.category_id = catalogue_category.id LIMIT %s) AS capped",
            [ROW_FAN_OUT + 1],
        )
        return super().get_queryset(request).annotate(product_count=capped)

    @admin.display(description="place in the tree")
    def place_in_tree(self, obj):
        path, current = [], obj
        while current is not None:
            path.append(current.slug)
            current = current.parent
        return " › ".join(reversed(path))

    def get_readonly_fields(self, request, obj=None):
        # Sales name categories by slug: renaming one would split its rankings in two.
        return ["slug"] if obj else []

    def get_prepopulated_fields(self, request, obj=None):
        return {} if obj else self.prepopulated_fields

    @admin.display(description="", ordering="is_placeholder")
    def placeholder(self, obj):
        return _placeholder_marker(obj.is_placeholder)

    def get_deleted_objects(self, objs, request):
        """A category with sales, or that a ranking version's tree names, shows as protected, as a
        PROTECT relation would: the delete page (single or bulk) says why and refuses the POST."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        refused = categories_deletion_refused([category.slug for category in objs])
        protected = list(protected) + [
            f"{category.slug}: {CATEGORY_IN_USE if category.has_sales else refused[category.slug]}"
            for category in objs
            if category.has_sales or category.slug in refused
        ]
        return deleted, counts, perms_needed, protected

    @admin.display(description="products")
    def product_count(self, obj):
        url = reverse("admin:catalogue_product_changelist") + "?" + urlencode({"category": obj.slug})
        count = f"more than {ROW_FAN_OUT:,}" if obj.product_count > ROW_FAN_OUT else obj.product_count
        return format_html('<a href="{}">{}</a>', url, count)


@admin.register(Product)
class ProductAdmin(RefusedDeletes, LargeTableAdmin):
    list_display = ["product_id", "name", "placeholder", "price", "category_list"]
    list_filter = [PlaceholderFilter, CategoryFilter]
    search_fields = ["=product_id", "name"]
    autocomplete_fields = ["categories"]
    fields = ["product_id", "name", "price_cents", "released_at", "categories", "is_placeholder"]
    list_per_page = 50

    def get_queryset(self, request):
        # A row names its first categories only: a product may be filed under thousands.
        shown = Category.objects.order_by("slug")[: PRODUCT_CATEGORIES_SHOWN + 1]
        return (
            super()
            .get_queryset(request)
            .prefetch_related(Prefetch("categories", queryset=shown, to_attr="first_categories"))
        )

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "is_placeholder":
            kwargs["help_text"] = PLACEHOLDER_HELP
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "name":
            field.validators.append(name_validator)
        return field

    def get_readonly_fields(self, request, obj=None):
        # Sales refer to the product id: changing it would orphan them.
        return ["product_id"] if obj else []

    @admin.display(description="", ordering="is_placeholder")
    def placeholder(self, obj):
        return _placeholder_marker(obj.is_placeholder)

    @admin.display(description="price", ordering="price_cents")
    def price(self, obj):
        return cents_text(obj.price_cents)

    @admin.display(description="categories")
    def category_list(self, obj):
        shown = [c.slug for c in obj.first_categories]
        more = ", …" if len(shown) > PRODUCT_CATEGORIES_SHOWN else ""
        return ", ".join(shown[:PRODUCT_CATEGORIES_SHOWN]) + more

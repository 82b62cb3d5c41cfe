"""Editing the catalogue: categories and products, with placeholders from sale events easy to find."""

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count, ProtectedError
from django.utils.html import format_html

from .models import (
    CATEGORY_IN_USE,
    RESERVED_SLUG,
    Category,
    Product,
    categories_deletion_refused,
    category_paths,
)
from .money import cents_text

PLACEHOLDER_HELP = "Created from a sale event for an unknown id: complete it, then untick."


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


class CategoryForm(forms.ModelForm):
    class Meta:
        model = Category
        fields = ["slug", "name", "parent", "is_placeholder"]
        help_texts = {"is_placeholder": PLACEHOLDER_HELP}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Cycles and depth are checked by Category.clean (and by the database); a category is
        # never offered as its own parent.
        parents = Category.objects.exclude(slug=RESERVED_SLUG)
        if self.instance.pk is not None:
            parents = parents.exclude(pk=self.instance.pk)
        self.fields["parent"].queryset = parents

    def clean_slug(self):
        slug = self.cleaned_data["slug"]
        if slug == RESERVED_SLUG:
            raise forms.ValidationError(f"'{RESERVED_SLUG}' is reserved for the board of every sale.")
        return slug


@admin.register(Category)
class CategoryAdmin(admin.ModelAdmin):
    form = CategoryForm
    list_display = ["name", "slug", "place_in_tree", "placeholder", "product_count"]
    list_filter = [PlaceholderFilter, ("parent", admin.EmptyFieldListFilter)]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(product_count=Count("products"))

    def changelist_view(self, request, extra_context=None):
        # Every category's path in one query, for the breadcrumbs column.
        self._paths = category_paths()
        return super().changelist_view(request, extra_context)

    @admin.display(description="place in the tree")
    def place_in_tree(self, obj):
        path = getattr(self, "_paths", {}).get(obj.slug, [obj.slug])
        return " › ".join(path)

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

    def delete_model(self, request, obj):
        # Sales may have named the category since the page was shown; the model guard then refuses.
        try:
            super().delete_model(request, obj)
        except ProtectedError as error:
            raise PermissionDenied(error.args[0]) from None

    def delete_queryset(self, request, queryset):
        try:
            super().delete_queryset(request, queryset)
        except ProtectedError as error:
            raise PermissionDenied(error.args[0]) from None

    @admin.display(description="products", ordering="product_count")
    def product_count(self, obj):
        return obj.product_count


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["product_id", "name", "placeholder", "price", "category_list"]
    list_filter = [PlaceholderFilter, "categories"]
    search_fields = ["=product_id", "name"]
    filter_horizontal = ["categories"]
    fields = ["product_id", "name", "price_cents", "released_at", "categories", "is_placeholder"]
    list_per_page = 50

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("categories")

    def get_readonly_fields(self, request, obj=None):
        # Sales refer to the product id: changing it would orphan them.
        return ["product_id"] if obj else []

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "is_placeholder":
            kwargs["help_text"] = PLACEHOLDER_HELP
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    @admin.display(description="", ordering="is_placeholder")
    def placeholder(self, obj):
        return _placeholder_marker(obj.is_placeholder)

    @admin.display(description="price", ordering="price_cents")
    def price(self, obj):
        return cents_text(obj.price_cents)

    @admin.display(description="categories")
    def category_list(self, obj):
        return ", ".join(c.slug for c in obj.categories.all())

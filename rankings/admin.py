"""The admin's view of the write path: raw sales and ingest calls, read-only for everyone."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from .models import IngestLog, Sale


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows that are facts, not settings: nobody adds, changes or deletes them here, superusers included."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class KindFilter(admin.SimpleListFilter):
    title = "kind"
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [("sale", "sales"), ("return", "returns")]

    def queryset(self, request, queryset):
        if self.value() == "sale":
            return queryset.filter(return_of__isnull=True)
        if self.value() == "return":
            return queryset.filter(return_of__isnull=False)
        return queryset


def _money(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"


@admin.register(Sale)
class SaleAdmin(ReadOnlyAdmin):
    """Raw sales are the source of truth, kept forever; corrections come as returns, not edits."""

    list_display = [
        "event_id",
        "ts",
        "product_link",
        "category_list",
        "qty",
        "amount",
        "return_of",
        "received_at",
    ]
    list_select_related = ["product"]
    # Exact or prefix matches only, so that each search uses an index on a table of millions.
    search_fields = ["^event_id", "=product__product_id", "=return_of"]
    search_help_text = "An event id (or its beginning), a product id, or the id of a returned sale."
    date_hierarchy = "ts"
    list_filter = [KindFilter]
    ordering = ["-ts", "-id"]
    # A full count(*) of every sale for "N total" would cost more than the page itself.
    show_full_result_count = False
    list_per_page = 100
    fields = [
        "event_id",
        "ts",
        "product_link",
        "category_list",
        "qty",
        "amount",
        "return_of",
        "counted_at",
        "received_at",
        "digest",
    ]

    @admin.display(description="product", ordering="product_id")
    def product_link(self, obj):
        url = reverse("admin:catalogue_product_change", args=[obj.product.pk])
        return format_html('<a href="{}">{}</a> {}', url, obj.product_id, obj.product.name)

    @admin.display(description="categories")
    def category_list(self, obj):
        return ", ".join(obj.categories)

    @admin.display(description="amount", ordering="amount_cents")
    def amount(self, obj):
        return _money(-obj.amount_cents if obj.qty < 0 else obj.amount_cents)


@admin.register(IngestLog)
class IngestLogAdmin(ReadOnlyAdmin):
    list_display = ["at", "source", "accepted", "duplicates", "rejected"]
    list_filter = ["source"]
    date_hierarchy = "at"
    ordering = ["-at"]
    show_full_result_count = False

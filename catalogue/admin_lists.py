"""Admin lists over tables of millions of rows: counted no further than a cap, paged no deeper."""

from typing import cast

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property

# Rows an admin list counts at most (and so the deepest page it offers): an exact count(*) of ten
# million products or sales costs seconds, and a page past this is an OFFSET that reads every row
# before it. Search or filter to reach a row further down. The same bound as the read API's lists.
COUNT_CAP = 10_000


class CappedCountPaginator(Paginator):
    """Counts at most COUNT_CAP + 1 rows (in no particular order, which needs no sort); the pages
    past the cap do not exist, and the list says "more than 10,000" (templates/admin/pagination.html)."""

    cap = COUNT_CAP

    @cached_property
    def count(self) -> int:
        # The keys only: a list's annotations (a row's capped product count) cost per row counted.
        # An admin list pages a queryset (the stubs' Paginator takes any sized sequence).
        rows = cast(QuerySet, self.object_list)
        return rows.order_by().values("pk")[: self.cap + 1].count()

    @property
    def count_capped(self) -> bool:
        return self.count > self.cap

    @property
    def cap_text(self) -> str:
        return f"{self.cap:,}"


class LargeTableAdmin(admin.ModelAdmin):
    """A list that stays cheap at millions of rows: a capped count, no second count of the whole
    table, and date filters by range (?ts__gte=…&ts__lt=…, or a year, month and day) instead of a
    date hierarchy, whose links are a SELECT DISTINCT over every row."""

    paginator = CappedCountPaginator
    show_full_result_count = False
    # The date field whose year, month, day and range lookups the list accepts in its URL.
    date_lookups_field: str | None = None

    def lookup_allowed(self, lookup, value, request=None):
        field = self.date_lookups_field
        parts = ("year", "month", "day", "gte", "lt", "date")
        if field and lookup in {f"{field}__{part}" for part in parts}:
            return True
        return super().lookup_allowed(lookup, value, request)

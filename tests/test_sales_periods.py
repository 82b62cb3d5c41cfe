"""The sales charts' read (rankings/serving/sales_periods.py): a product's chart reads that product's
buckets of the board of every sale, through the buckets' index by product, which holds that board's
buckets only (ALL_BOARDS)."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from rankings.engine.shards import ALL, ActiveVersion, Layout
from rankings.engine.split import part_names
from rankings.models import ALL_BOARDS, Bucket
from rankings.serving import sales_periods

pytestmark = pytest.mark.django_db

HOUR = 3600
DAYS = 32
FIRST = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def test_the_board_of_every_sale_is_all_and_its_parts_and_no_category():
    """Slugs that begin as `all` does, or sort beside its parts, are categories of their own."""
    parts = part_names(ALL, 12)
    others = ["allergy", "all-stars", "all_x", "al", "alm", "a", "toys", "zz"]
    Bucket.objects.bulk_create(
        [Bucket(size=HOUR, start=0, category=c, product_id="p", shard=0, units=1, revenue_cents=1) for c in [ALL, *parts, *others]]
    )  # fmt: skip
    assert set(Bucket.objects.filter(ALL_BOARDS).values_list("category", flat=True)) == {ALL, *parts}


def _indexes_scanned(sql: str) -> set[str]:
    """The indexes PostgreSQL's plan of `sql` scans, and "seq" for a scan of a table itself."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        plan = cursor.fetchone()[0][0]["Plan"]
    found, nodes = set(), [plan]
    while nodes:
        node = nodes.pop()
        if "Index Name" in node:
            found.add(node["Index Name"])
        elif node["Node Type"] == "Seq Scan":
            found.add("seq")
        nodes.extend(node.get("Plans", []))
    return found


@pytest.mark.parametrize("parts", [0, 3])
def test_a_product_s_chart_reads_its_own_buckets_of_the_board_of_every_sale(monkeypatch, parts):
    """200 products sold every hour of 32 days, each in `all` (or its parts) and two categories: a
    product's daily chart goes through the index by product to its own 768 hours, never through the
    others' 153,600 of the board of every sale or the categories' 307,200."""
    layout = Layout(shards=1 + parts, pinned=part_names(ALL, parts) if parts else ())
    monkeypatch.setattr(sales_periods, "active", lambda: ActiveVersion(1, 0, layout))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO rankings_bucket (size, start, category, product_id, shard, units, revenue_cents)"
            " SELECT %s, %s + h * %s, c, 'p' || p, 0, 1 + p, 100"
            " FROM generate_series(0, %s - 1) AS h, generate_series(0, 199) AS p,"
            " unnest(ARRAY[CASE WHEN %s = 0 THEN 'all' ELSE 'all#' || (p %% %s) END, 'toys', 'games-' || (p %% 7)]) AS c",
            [HOUR, int(FIRST.timestamp()), HOUR, DAYS * 24, parts, max(parts, 1)],
        )
        cursor.execute("ANALYZE rankings_bucket")
    with CaptureQueriesContext(connection) as queries:
        chart = sales_periods.units_per_period(period=86400, first=FIRST, count=DAYS, product_id="p7")
    assert [units for _, units in chart.periods] == [24 * 8] * DAYS
    (read,) = [query["sql"] for query in queries.captured_queries if "rankings_bucket" in query["sql"]]
    assert _indexes_scanned(read) == {"bucket_product_all"}

"""What a rebuild's hourly history costs, and how it grows with categories and days.

Categories of 5 products, as the scale benchmark's (bench_scale.py), each product sold once a day
at an hour of its own over the last N days: the sales are written with SQL, then
rankings/engine/history.py `history_record` records a version's snapshot of every hour from the
earliest sale to the clock, as a rebuild does. Each cell: seconds, hours recorded, boards (snapshot
rows), ranks (product ids in them), and the bytes the snapshot table grew by (heap, TOAST and
indexes, from an empty table). The growth table crosses CATEGORIES with DAYS; the largest cell is the
scale benchmark's 20,000 categories.

    python -m bench --only history          (BENCH_HISTORY_CATEGORIES, BENCH_HISTORY_DAYS to resize,
                                             e.g. BENCH_HISTORY_CATEGORIES=2000,20000 BENCH_HISTORY_DAYS=2,7,14)
"""

import datetime as dt
import os
import time

from bench import harness

HOUR = 3600
PRODUCTS_PER_CATEGORY = 5
CATEGORIES = [int(n) for n in os.environ.get("BENCH_HISTORY_CATEGORIES", "2000,20000").split(",")]
DAYS = [int(n) for n in os.environ.get("BENCH_HISTORY_DAYS", "2,7").split(",")]

_PRODUCTS_SQL = """
INSERT INTO catalogue_product (product_id, name, price_cents, is_placeholder)
SELECT 'q' || g, 'Product ' || g, 199 * (1 + g %% 5), false FROM generate_series(0, %(n)s - 1) AS g
"""
# Product q<5c+p> of category h<c> sells once a day d (0 = the last 24 hours), at an hour of its own.
_SALES_SQL = """
INSERT INTO rankings_sale (event_id, ts, product_id, categories, qty, amount_cents, counted_at, received_at, digest)
SELECT 'h' || c || '-' || p || '-' || d, t, 'q' || (5 * c + p), ARRAY['h' || c], q, q * 199 * (1 + p), t, t, ''
FROM generate_series(0, %(categories)s - 1) AS c
CROSS JOIN generate_series(0, 4) AS p
CROSS JOIN generate_series(0, %(days)s - 1) AS d
CROSS JOIN LATERAL (SELECT 1 + (c + p + d) %% 3 AS q,
                           to_timestamp(%(clock)s - 3600 * (24 * d + (c * 7 + p * 13 + d * 17) %% 24) - 600) AS t) AS s
"""


def _seed(categories: int, days: int, clock: int) -> None:
    """An empty shop, then `categories` × 5 products each sold once a day over `days` days before `clock`."""
    from django.db import connection

    from rankings.engine.partitions import sale_partitions_ensure

    harness.reset()
    first = dt.datetime.fromtimestamp(clock - days * 24 * HOUR, dt.UTC)
    sale_partitions_ensure([first + dt.timedelta(days=d) for d in range(days + 1)])
    with connection.cursor() as cursor:
        cursor.execute(_PRODUCTS_SQL, {"n": PRODUCTS_PER_CATEGORY * categories})
        cursor.execute(_SALES_SQL, {"categories": categories, "days": days, "clock": clock})
        cursor.execute("ANALYZE rankings_sale")


def _record(categories: int, days: int) -> tuple[float, int, int, int, int]:
    """(seconds, hours, boards, ranks, bytes added to the snapshot table) of one history."""
    from django.db import connection

    from rankings.engine.history import history_delete, history_record
    from rankings.engine.shards import active
    from rankings.engine.tree import EMPTY

    clock = int(time.time()) // HOUR * HOUR
    _seed(categories, days, clock)
    version, _, layout = active()
    version += 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size('rankings_snapshot')")
        (before,) = cursor.fetchone()
        recorded = history_record(
            version=version, tree=EMPTY, layout=layout, clock=dt.datetime.fromtimestamp(clock, dt.UTC)
        )
        cursor.execute("SELECT pg_total_relation_size('rankings_snapshot')")
        (after,) = cursor.fetchone()
    history_delete(version)
    return recorded.seconds, recorded.hours, recorded.boards, recorded.products, after - before


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    for categories in CATEGORIES:
        for days in DAYS:
            print(f"history: {categories:,} categories, {days} days of sales…", flush=True)
            seconds = []
            for _ in range(runs):
                figures = _record(categories, days)
                seconds.append(figures[0])
            _, hours, boards, ranks, size = figures
            table.add(
                f"a rebuild's hourly history, {categories:,} categories × {days} days",
                f"{harness.median(seconds):,.1f} s, {hours} hours, {boards:,} boards, {size / 2**20:,.0f} MiB",
                f"{ranks:,} ranks; {harness.median(seconds) / categories / hours * 1e6:,.0f} µs a category-hour",
                "",
                f"{PRODUCTS_PER_CATEGORY * categories * days:,} sales",
            )
    harness.reset()
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

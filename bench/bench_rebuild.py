"""Rebuilding every board from raw sales into a new version (rankings_rebuild), from 200,000 to 10,000,000 sales.

BENCH_REBUILD_SIZES (say "200000,1000000") runs some sizes only. Each figure
is set against a floor measured on the same data in the same run: one plain
scan of the raw sales by PostgreSQL (SELECT sum(qty)), which any rebuild must
at least make.

The sales have the demo's shape (rankings.operations.demo): product i is in
category i mod 50 and one other, as the demo's catalogue has it, 40% of the sales are in the hot
category, products are skewed within a category, 20% of the sales count in the
product's two categories, over 14 days, written in time order as a shop's sales
arrive (sale g of n at g / n of the 14 days, less a random fraction of one
such step). They are written straight into the raw-sales table with one
INSERT … SELECT: pushing ten million events through the API first would
measure ingestion, not the rebuild. In random time order, each of the
history's spans of hours scans every page of the others' (the history's read
of 10,000,000 such sales took 7.3 to 7.9 s, against 6.5 to 6.8 s in time
order). The table is then vacuumed, as autovacuum would after such an insert,
so that no run pays for setting its rows' hint bits. The shards are then
marked as having aggregated them, so the rebuild replays every one.
"""

import datetime as dt
import os
import time

from bench import harness

SIZES = tuple(
    int(size) for size in os.environ.get("BENCH_REBUILD_SIZES", "200000,1000000,2000000,10000000").split(",")
)

_GENERATE = """
INSERT INTO rankings_sale (event_id, ts, product_id, categories, qty, amount_cents, return_of, counted_at,
                           received_at, digest)
SELECT 'gen-' || g, t, 'p' || p,
       CASE WHEN two THEN ARRAY['cat' || p %% %(categories)s, 'cat' || other]
            ELSE ARRAY['cat' || p %% %(categories)s] END,
       q, q * (199 + p %% 9800), NULL, t, now(), ''
FROM (
    SELECT g, t, p, (%(others)s::int[])[p + 1] AS other, two, q
    FROM (
        SELECT g,
               now() - (1 - (g - random()) / %(total)s) * interval '14 days' AS t,
               home + %(categories)s * floor(power(random(), 4) * %(per_category)s)::int AS p,
               random() < 0.2 AS two,
               1 + floor(power(random(), 3) * 3)::int AS q
        FROM (
            SELECT g, CASE WHEN random() < 0.4 THEN 0 ELSE 1 + floor(random() * (%(categories)s - 1))::int END AS home
            FROM generate_series(%(first)s, %(last)s) AS g
        ) AS homes
    ) AS drawn
) AS generated
"""
# The demo catalogue's seed: the sales' second categories are those it gives each product.
_SEED = 0


def _generate(total: int) -> None:
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from rankings.engine.partitions import sale_partitions_ensure
    from rankings.engine.shards import shard_count
    from rankings.models import ShardState
    from rankings.operations.demo import DemoShape, demo_catalogue

    harness.reset()
    call_command("seed_demo", "--sales", "0", "--seed", str(_SEED), "--no-progress", verbosity=0)
    # Written past the ingest, so the months' partitions are made here.
    sale_partitions_ensure([timezone.now() - dt.timedelta(days=14), timezone.now()])
    # Each product's other category, as the demo's catalogue has it (seed_demo's shape and seed).
    shape = DemoShape()
    catalogue = demo_catalogue(shape=shape, seed=_SEED)
    others = [int(catalogue[f"p{i}"][1][1].removeprefix("cat")) for i in range(shape.products)]
    drawn = {
        "categories": shape.categories,
        "per_category": shape.products // shape.categories,
        "others": others,
    }
    step = 1_000_000
    with connection.cursor() as cursor:
        for first in range(1, total + 1, step):
            cursor.execute(
                _GENERATE,
                {"first": first, "last": min(total, first + step - 1), "total": total, **drawn},
            )
            print(f"  generated {min(total, first + step - 1):,} sales", flush=True)
        cursor.execute("VACUUM (ANALYZE) rankings_sale")
    now = timezone.now()
    ShardState.objects.bulk_create([ShardState(shard=s, seq=0, as_of=now) for s in range(shard_count())])


def _floor(runs: int) -> float:
    """Seconds PostgreSQL takes to scan the raw sales once (median of `runs`)."""
    from django.db import connection

    seconds = []
    with connection.cursor() as cursor:
        for _ in range(runs):
            started = time.perf_counter()
            cursor.execute("SELECT sum(qty) FROM rankings_sale")
            cursor.fetchone()
            seconds.append(time.perf_counter() - started)
    return harness.median(seconds)


def _build() -> tuple[float, float]:
    """Rebuild every board into a new version, then delete it and its history: (seconds in all,
    seconds until its boards were in place and its history began, by the build's own progress)."""
    from rankings.engine import store
    from rankings.engine.history import history_delete
    from rankings.operations.backfill import PROGRESS_HISTORY, version_build

    started = time.perf_counter()
    boards = []

    def progress(fraction: float, message: str) -> None:
        if fraction >= PROGRESS_HISTORY and not boards:
            boards.append(time.perf_counter() - started)

    version = version_build(progress=progress)
    seconds = time.perf_counter() - started
    store.version_delete(version.number)
    history_delete(version.number)  # so every run writes its snapshots beside no other run's
    return seconds, boards[0]


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    for total in SIZES:
        print(f"rebuild: {total:,} raw sales…", flush=True)
        _generate(total)
        floor = _floor(runs)
        builds = [_build() for _ in range(runs)]
        s, boards = harness.median([s for s, _ in builds]), harness.median([b for _, b in builds])
        table.add(
            f"rebuild every board from {total:,} raw sales",
            f"{s:.2f} s = {total / s:,.0f} sales/s",
            f"floor, one scan of the raw sales: {floor:.3f} s",
            f"{s / floor:.1f}x",
            "goal ≥ 1,000,000 sales/s; 200k in ≤ 0.5 s",
        )
        # A rebuild records its version's hourly history after its boards: the boards alone are
        # what a rebuild did before it did so.
        table.add(
            f"  of which its boards, until its history begins, {total:,} raw sales",
            f"{boards:.2f} s = {total / boards:,.0f} sales/s",
            f"floor, one scan of the raw sales: {floor:.3f} s",
            f"{boards / floor:.1f}x",
            "the rest is the hourly history of every board",
        )
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

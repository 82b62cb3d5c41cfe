"""What moves: the cost of one hour's snapshots, and /movers and /new read throughput against /top.

Snapshot cost: the demo data ticked once, then what a rebuild adds to record its version's hourly
history from the sales (rankings/engine/history.py), then one hour's snapshots of every shard taken as a tick
takes them (rankings/engine/snapshots.py `take`): time and bytes stored. The same at 1,000
categories (synthetic hour buckets: 100 products per category sold in 10 hours of the last week).
Reads: wrk against gunicorn as in bench_read, /top, /movers and /new of the demo's hot category in
the same run, the movers compared with a snapshot taken 24 hours before.
"""

import datetime as dt
import time

from bench import harness
from bench.bench_read import _median_run

HOUR = 3600
CATEGORIES_AT_SCALE = 1000
PRODUCTS_PER_CATEGORY = 100
HOURS_SOLD = 10


def _snapshot_bytes(at: dt.datetime) -> tuple[int, int]:
    """(boards, bytes as stored: compressed, TOAST included) of the snapshots of hour `at`."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), coalesce(sum(pg_column_size(products)), 0) FROM rankings_snapshot WHERE at = %s",
            [at],
        )
        return cursor.fetchone()


def _take_hour(at: int) -> tuple[float, int, int]:
    """Take hour `at`'s snapshots on every shard as a tick does: (seconds, boards, bytes)."""
    from rankings.engine import snapshots
    from rankings.engine.shards import active

    version, _, layout = active()
    started = time.perf_counter()
    for shard in range(layout.shards):
        snapshots.take(shard=shard, layout=layout, version=version, hours=[at])
    elapsed = time.perf_counter() - started
    boards, size = _snapshot_bytes(snapshots.instant(at))
    return elapsed, boards, size


def _demo(runs: int) -> tuple[float, int, int, int]:
    from django.utils import timezone

    from bench.bench_engine import _seed_demo
    from rankings.engine.tick import tick

    harness.reset()
    _seed_demo()
    now = timezone.now().replace(microsecond=0)
    tick(now=now)
    hour = int(now.timestamp()) // HOUR * HOUR
    seconds = harness.median([_take_hour(hour)[0] for _ in range(runs)])
    _, boards, size = _take_hour(hour)
    _take_hour(hour - 24 * HOUR)  # what /movers compares with
    return seconds, boards, size, hour


def _history() -> tuple[float, int, int, int, int]:
    """What a rebuild adds to record its version's hourly history from the demo's sales, as a version
    of its own: (seconds, hours, boards, product ids, bytes stored)."""
    from django.db import connection

    from rankings.engine.history import engine_clock, history_delete, history_record
    from rankings.engine.shards import active
    from rankings.engine.tree import EMPTY

    version = 1 + active().number
    history_delete(version)
    recorded = history_record(version=version, tree=EMPTY, layout=active().layout, clock=engine_clock())
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_column_size(products)), 0) FROM rankings_snapshot WHERE version = %s",
            [version],
        )
        (size,) = cursor.fetchone()
    history_delete(version)
    return recorded.seconds, recorded.hours, recorded.boards, recorded.products, size


def _at_scale(runs: int) -> tuple[float, int, int]:
    """1,000 categories of synthetic hour buckets, on the active layout's shards."""
    from django.db import connection

    from rankings.engine.shards import active

    harness.reset()
    layout = active().layout
    hour = int(time.time()) // HOUR * HOUR
    categories = [f"cat{i}" for i in range(CATEGORIES_AT_SCALE)]
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO rankings_bucket (size, start, category, product_id, shard, units, revenue_cents)
            SELECT 3600, %(hour)s - 3600 * ((c * 7 + p * 13 + h * 17) %% 168), cat.slug, 'p' || (c * 37 + p),
                   cat.shard, 1 + (p * h) %% 9, 100 * (1 + (p * h) %% 9)
            FROM unnest(%(slugs)s::text[], %(shards)s::int[]) WITH ORDINALITY AS cat(slug, shard, c)
            CROSS JOIN generate_series(1, %(products)s) AS p CROSS JOIN generate_series(1, %(hours)s) AS h
            ON CONFLICT DO NOTHING
            """,
            {
                "hour": hour,
                "slugs": categories,
                "shards": [layout.shard_of(c) for c in categories],
                "products": PRODUCTS_PER_CATEGORY,
                "hours": HOURS_SOLD,
            },
        )
    seconds = harness.median([_take_hour(hour)[0] for _ in range(runs)])
    _, boards, size = _take_hour(hour)
    return seconds, boards, size


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    print("moves: demo data, one hour's snapshots, then wrk on /top, /movers, /new…", flush=True)
    seconds, boards, size, _ = _demo(runs)
    table.add(
        "snapshots of one hour, demo data",
        f"{seconds * 1000:,.0f} ms, {boards} boards, {size / 1024:,.0f} KiB",
        f"{size / max(boards, 1):,.0f} bytes a board (first {_depth()} ranks, compressed)",
        "",
        "",
    )
    seconds, hours, boards, products, size = _history()
    table.add(
        "a rebuild's hourly history, demo data",
        f"{seconds:,.1f} s, {hours} hours, {boards:,} boards, {size / 2**20:,.0f} MiB",
        f"{products:,} ranks (first {_depth()} of each board of 1d and 7d, 4 metrics)",
        "",
        "grows with hours × boards × products per board",
    )
    with harness.services(worker=False) as url:
        reads = {
            "top": _median_run(f"{url}/v1/categories/cat0/top", runs),
            "movers": _median_run(f"{url}/v1/categories/cat0/movers", runs),
            "new": _median_run(f"{url}/v1/categories/cat0/new", runs),
        }
    top_rate = reads["top"][0]
    for key, label in (("movers", "/movers (first 1,000 ranks)"), ("new", "/new (board filtered)")):
        rate, p50, p99 = reads[key]
        table.add(
            label,
            f"{rate:,.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms",
            f"/top in the same run {top_rate:,.0f} req/s (p99 {reads['top'][2]:.1f} ms)",
            f"{rate / top_rate:.2f}x",
            "goal ≥ 0.8x of /top",
        )
    seconds, boards, size = _at_scale(runs)
    table.add(
        f"snapshots of one hour, {CATEGORIES_AT_SCALE:,} categories",
        f"{seconds * 1000:,.0f} ms, {boards} boards, {size / 1024:,.0f} KiB",
        f"{PRODUCTS_PER_CATEGORY} products a category, sold in {HOURS_SOLD} hours of the week",
        "",
        "",
    )
    return table


def _depth() -> int:
    from rankings.conf import rankings_settings

    return rankings_settings.SNAPSHOT_DEPTH


if __name__ == "__main__":
    harness.setup()
    print(run().render())

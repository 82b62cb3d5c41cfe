"""Resharding on demo data (200,000 sales over 14 days, 50 categories, 40% in cat0): how long a rebuild
into another layout takes, and how long its switch-over holds every shard's lock (ticks wait, reads and
ingest do not), for 4 → 16 → 4 shards and for pinning the hot category.
"""

import time

from bench import harness

DEMO_SALES = 200_000


def _shop() -> int:
    """The demo shop on 4 shards, every sale ticked; returns how many buckets the switch re-keys."""
    from django.core.management import call_command
    from django.db import connection

    from rankings.engine.tick import tick
    from rankings.models import Bucket

    harness.reset()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE rankings_rankingversion")
    call_command(
        "seed_demo",
        "--seed",
        "1",
        "--sales",
        str(DEMO_SALES),
        "--no-engagement",
        "--no-progress",
        verbosity=0,
    )
    tick()
    return Bucket.objects.count()


def run(table: harness.Table | None = None, runs: int = 1) -> harness.Table:
    from rankings.engine.shards import Layout
    from rankings.operations.backfill import version_build, version_switch

    table = table or harness.Table()
    print(f"reshard: {DEMO_SALES:,} demo sales…", flush=True)
    buckets = _shop()
    for layout in (Layout(16), Layout(4), Layout(5, ("cat0",))):
        started = time.perf_counter()
        version = version_build(layout=layout)
        built = time.perf_counter() - started
        started = time.perf_counter()
        version_switch(number=version.number)
        switched = time.perf_counter() - started
        table.add(
            f"reshard to {layout.describe()} ({buckets:,} buckets)",
            f"build {built:.1f} s, switch {switched:.1f} s",
            note="the switch holds every shard's lock: ticks wait, reads and ingest go on",
        )
    return table

"""What one scrape of /metrics costs at the scale benchmark's 20,000 categories, its queues full.

A shop of 20,000 categories of 5 products each sells every product once through the ingest
(batches of 5,000) and ticks, so that every category has its boards; then as many sales again are
ingested and left pending, so that the scrape counts the queue up to its bound (PENDING_COUNTED,
the worst case). Figures: milliseconds to make the text of one scrape (every statement and Redis
round trip, the text written by prometheus-client), and of its PostgreSQL and Redis parts.

    python -m bench --only metrics       (BENCH_METRICS_CATEGORIES to resize)
"""

import os
import time

from bench import harness

CATEGORIES = int(os.environ.get("BENCH_METRICS_CATEGORIES", "20000"))
PRODUCTS_PER_CATEGORY = 5
BATCH = 5000
SCRAPES = 20


def _sell(round_: int) -> None:
    """Each product of each category sold once, through the ingest."""
    from django.utils import timezone

    from rankings.ingest.sales import sales_ingest

    now = timezone.now()
    events = [
        {
            "id": f"m{round_}-{c}-{p}",
            "ts": now.isoformat(),
            "productId": f"m{c * PRODUCTS_PER_CATEGORY + p}",
            "categories": [f"m{c}"],
            "qty": 1 + p,
        }
        for c in range(CATEGORIES)
        for p in range(PRODUCTS_PER_CATEGORY)
    ]
    for first in range(0, len(events), BATCH):
        result = sales_ingest(events=events[first : first + BATCH], source="bench")
        assert not result.rejected, result.rejected[:3]


def _timed(read, runs: int) -> float:
    """The median milliseconds of `read()`."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        read()
        times.append((time.perf_counter() - started) * 1000)
    return harness.median(times)


def run(table: harness.Table, runs: int = 3) -> None:
    from prometheus_client.exposition import generate_latest

    from rankings.engine import store
    from rankings.engine.tick import tick
    from rankings.operations import metrics
    from rankings.serving import metrics_api

    print(
        f"metrics: {CATEGORIES:,} categories of {PRODUCTS_PER_CATEGORY} products, sold, ticked, sold again…"
    )
    harness.reset()
    _sell(0)
    tick()
    _sell(1)  # left pending: the scrape counts the queue up to its bound
    figures = metrics.metrics_read()
    scrape = generate_latest(metrics_api._registry)
    families = {line.split()[2] for line in scrape.decode().splitlines() if line.startswith("# TYPE")}
    note = (
        f"{CATEGORIES:,} categories, {figures.pending['sale']:,} sales pending counted, {len(scrape):,} bytes"
    )
    database = metrics.Figures()
    table.add(
        "metrics: one scrape (ms)",
        f"{_timed(lambda: generate_latest(metrics_api._registry), SCRAPES):.1f}",
        note=note,
    )
    table.add(
        "metrics: its PostgreSQL part (ms)",
        f"{_timed(lambda: metrics._database_read(database), SCRAPES):.1f}",
    )
    table.add(
        "metrics: its Redis part (ms)",
        f"{_timed(lambda: (metrics.boards_age(), store.memory_used()), SCRAPES):.1f}",
    )
    table.add("metrics: families", str(len(families)))

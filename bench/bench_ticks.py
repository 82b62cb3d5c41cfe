"""Tick throughput with the tick fanned out over Celery workers: sales/s through the whole tick.

A backlog of demo sales (seed_demo's shape: 40% in the hot category, 20% in two
categories) waits in the queue; the beat's tick is sent once, over two tick
queues, and timed from the sending until every tick task has logged its row,
so the figure covers the broker, the claims, the folds into buckets and the
writes to Redis. Once with one worker consuming both queues (the two groups of
shards one after the other), once with two workers, one queue each (side by
side). Each worker is one process (pool solo).

The Redis is the environment's: REDIS_URL, and with REDIS_CLUSTER=true a node
of a cluster (then CELERY_BROKER_URL names a plain Redis for the broker).
"""

import os
import tempfile
import time

from bench import harness
from tests import processes

SALES = 100_000
QUEUES = 2
# A tick task is cut off after 60 s; a backlog this size takes well under that.
DONE_SECONDS = 120  # seconds


def _redis() -> str:
    return (
        "Redis Cluster"
        if os.environ.get("REDIS_CLUSTER", "").lower() in ("1", "true", "yes")
        else "single Redis"
    )


def _backlog() -> tuple[int, list[int]]:
    """A fresh shop with SALES demo sales pending: (sales, queue rows of each group of shards)."""
    from django.core.management import call_command
    from django.db.models import Count

    from rankings import tasks
    from rankings.engine.shards import shard_count
    from rankings.models import PendingSale, Sale

    harness.reset()
    call_command("seed_demo", "--seed", "1", "--sales", str(SALES), "--no-progress", verbosity=0)
    rows = dict(PendingSale.objects.values_list("shard").annotate(n=Count("*")))
    groups = tasks.tick_groups(shard_count(), [f"group {n}" for n in range(QUEUES)])
    return Sale.objects.count(), [sum(rows.get(s, 0) for s in shards) for _, shards in groups]


def _timed_tick(queues: list[str], watch: list[processes.Process]) -> tuple[float, list[float]]:
    """Send the beat's tick and wait for every group's task: (seconds, each task's own seconds)."""
    from django.conf import settings
    from django.test import override_settings

    from rankings import tasks
    from rankings.models import PendingSale, TickLog

    with override_settings(
        RANKINGS={**settings.RANKINGS, "TICK_QUEUES": queues, "TICK_EXPIRES_SECONDS": 600}
    ):
        started = time.perf_counter()
        tasks.tick()
        processes.wait_until(
            lambda: TickLog.objects.count() >= len(queues),
            timeout=DONE_SECONDS,
            what="every group's tick",
            watch=watch,
        )
        elapsed = time.perf_counter() - started
    assert not PendingSale.objects.exists(), "a tick left sales pending"
    return elapsed, sorted(t.duration_ms / 1000 for t in TickLog.objects.all())


def _runs(workers: int, runs: int) -> dict:
    """Median throughput with `workers` workers sharing the tick queues, and what each run did."""
    from django.conf import settings

    from salesrank_site.settings import tick_queue_names

    queues = tick_queue_names(settings.RANKINGS["KEY_PREFIX"], QUEUES)
    # One worker takes every queue; two take one each.
    assignment = [queues] if workers == 1 else [[q] for q in queues]
    env = {**os.environ, **harness.environment(), "RANKINGS_TICK_QUEUES": str(QUEUES)}
    quiet = ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    rates, runs_tasks, rows = [], [], []
    with tempfile.TemporaryDirectory(prefix="salesrank-bench-ticks-") as logs:
        started = [
            processes.celery_worker(logs, env, name=f"ticks{n}", queues=q, args=quiet, wait=False)
            for n, q in enumerate(assignment)
        ]
        processes.wait_all_ready(started)
        try:
            for _ in range(runs):
                sales, rows = _backlog()
                elapsed, durations = _timed_tick(queues, started)
                rates.append(sales / elapsed)
                runs_tasks.append(durations)
                print(
                    f"    {workers} worker(s): {sales:,} sales in {elapsed:.2f} s, tasks {durations}",
                    flush=True,
                )
        finally:
            processes.stop_all(started)
    return {"rate": harness.median(rates), "tasks": runs_tasks[len(runs_tasks) // 2], "rows": rows}


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    redis = _redis()
    print(f"ticks: {SALES:,} demo sales through the tick, 1 then 2 workers, {redis}…", flush=True)
    one = _runs(1, runs)
    two = _runs(2, runs)
    rows = two["rows"]
    table.add(
        f"tick throughput, 1 worker on {QUEUES} tick queues, {redis}",
        f"{one['rate']:,.0f} sales/s",
        note=f"{SALES:,} demo sales pending; group ticks of {', '.join(f'{d:.1f}' for d in one['tasks'])} s in turn",
    )
    table.add(
        f"tick throughput, 2 workers, 1 tick queue each, {redis}",
        f"{two['rate']:,.0f} sales/s",
        f"{one['rate']:,.0f} sales/s with 1 worker",
        f"{two['rate'] / one['rate']:.2f}x",
        f"group ticks of {', '.join(f'{d:.1f}' for d in two['tasks'])} s side by side; the groups hold "
        f"{' and '.join(f'{r:,}' for r in rows)} queue rows (ceiling {sum(rows) / max(rows):.2f}x)",
    )
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

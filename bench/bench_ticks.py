"""Tick throughput with the tick fanned out over Celery workers: sales/s through the whole tick.

A backlog of demo sales (seed_demo's shape: 40% in the hot category, 20% in two
categories) waits in the queue; the beat's tick is sent once, over two tick
queues, and timed from the sending until every tick task has logged its row,
so the figure covers the broker, the claims, the folds into buckets and the
writes to Redis. Two set-ups, each on tick queues of its own: one worker
consuming both queues (the two groups of shards one after the other), and two
workers, one queue each (side by side). Each worker is one process (pool
solo). Their runs alternate, so that a change in the machine's load meets both.

The boards are measured on the environment's Redis (REDIS_URL, and with
REDIS_CLUSTER=true a node of a cluster), then on a Redis Cluster the benchmark
starts (three primaries, three replicas on loopback ports), with the broker
and the Django cache on the plain Redis in both.
"""

import io
import os
import tempfile
import time

from bench import harness
from rankings.conf import rankings_settings
from tests import processes

SALES = 100_000
WARM_UP_SALES = 1000
QUEUES = 2
# A tick task is cut off after 60 s; a backlog this size takes well under that.
DONE_SECONDS = 120  # seconds


def _redis() -> str:
    return (
        "Redis Cluster"
        if os.environ.get("REDIS_CLUSTER", "").lower() in ("1", "true", "yes")
        else "single Redis"
    )


def _backlog(sales: int = SALES) -> tuple[int, list[int]]:
    """A fresh shop with `sales` demo sales pending: (sales, queue rows of each group of shards)."""
    from django.core.management import call_command
    from django.db.models import Count

    from rankings import tasks
    from rankings.engine.shards import shard_count
    from rankings.models import PendingSale, Sale

    harness.reset()
    call_command(
        "seed_demo",
        "--seed",
        "1",
        "--sales",
        str(sales),
        "--no-engagement",
        "--no-progress",
        stdout=io.StringIO(),
    )
    rows = dict(PendingSale.objects.values_list("shard").annotate(n=Count("*")))
    groups = tasks.tick_groups(shard_count(), [f"group {n}" for n in range(QUEUES)])
    return Sale.objects.count(), [sum(rows.get(s, 0) for s in shards) for _, shards in groups]


def _timed_tick(queues: list[str], watch: list[processes.Process]) -> dict:
    """Send the beat's tick and wait for every group's task: the seconds it took, each task's own
    seconds, and the cores the machine kept busy meanwhile."""
    from django.conf import settings
    from django.test import override_settings

    from rankings import tasks
    from rankings.models import PendingSale, TickLog

    with override_settings(
        RANKINGS={**settings.RANKINGS, "TICK_QUEUES": queues, "TICK_EXPIRES_SECONDS": 600}
    ):
        cpu, own = harness.cpu_jiffies(), harness.process_cpu(watch)
        started = time.perf_counter()
        tasks.tick()
        processes.wait_until(
            lambda: TickLog.objects.count() >= len(queues),
            timeout=DONE_SECONDS,
            what="every group's tick",
            watch=watch,
        )
        elapsed = time.perf_counter() - started
        busy, total = (after - before for after, before in zip(harness.cpu_jiffies(), cpu, strict=True))
        own = harness.process_cpu(watch) - own
    assert not PendingSale.objects.exists(), "a tick left sales pending"
    return {
        "seconds": elapsed,
        "tasks": sorted(round(t.duration_ms / 1000, 1) for t in TickLog.objects.all()),
        "busy cores": round(busy / total * os.cpu_count(), 2),
        "worker cpu s": round(own, 1),
    }


def _setups(logs: str) -> tuple[dict[int, list[str]], list[processes.Process]]:
    """Tick queues for each number of workers, and the workers consuming them (not yet ready)."""

    from salesrank_site.settings import tick_queue_names

    env = {**os.environ, **harness.environment(), "RANKINGS_TICK_QUEUES": str(QUEUES)}
    quiet = ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    prefix = rankings_settings.KEY_PREFIX
    queues = {n: tick_queue_names(f"{prefix}:{n}-workers", QUEUES) for n in (1, 2)}
    # One worker takes both of its queues; two take one each.
    assignment = [("one", queues[1])] + [(f"two-{n}", [q]) for n, q in enumerate(queues[2])]
    workers = [
        processes.celery_worker(logs, env, name=name, queues=q, args=quiet, wait=False)
        for name, q in assignment
    ]
    return queues, workers


def _runs(runs: int) -> dict[int, dict]:
    """For 1 and 2 workers, the median run (by throughput)."""
    results = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="salesrank-bench-ticks-") as logs:
        queues, workers = _setups(logs)
        processes.wait_all_ready(workers)
        try:
            # Untimed: a worker's first tick also connects, loads its scripts and warms its caches.
            for n in (1, 2):
                _backlog(WARM_UP_SALES)
                _timed_tick(queues[n], workers)
            for _ in range(runs):
                for n in (1, 2):
                    sales, rows = _backlog()
                    result = {"rows": rows, "load": os.getloadavg()[0], **_timed_tick(queues[n], workers)}
                    result["rate"] = sales / result["seconds"]
                    results[n].append(result)
                    print(f"    {n} worker(s), {sales:,} sales: {result}", flush=True)
        finally:
            processes.stop_all(workers)
    return {n: sorted(rs, key=lambda r: r["rate"])[len(rs) // 2] for n, rs in results.items()}


def _seen(result: dict, how: str) -> str:
    """What a run's figure stands on: its tasks' own times and how busy the machine was."""
    return (
        f"group ticks of {' and '.join(f'{d:.1f} s' for d in result['tasks'])} {how}; "
        f"{result['busy cores']:.1f} of {os.cpu_count()} cores busy, load {result['load']:.1f}, "
        f"{result['worker cpu s']:.1f} CPU s in the workers themselves"
    )


def _add_rows(table: harness.Table, redis: str, one: dict, two: dict) -> None:
    table.add(
        f"tick throughput, 1 worker on {QUEUES} tick queues, {redis}",
        f"{one['rate']:,.0f} sales/s",
        note=f"{SALES:,} demo sales pending; {_seen(one, 'one after the other')}",
    )
    rows = two["rows"]
    table.add(
        f"tick throughput, 2 workers, 1 tick queue each, {redis}",
        f"{two['rate']:,.0f} sales/s",
        f"{one['rate']:,.0f} sales/s with 1 worker",
        f"{two['rate'] / one['rate']:.2f}x",
        f"{_seen(two, 'side by side')}; the groups hold {rows[0]:,} and {rows[1]:,} queue rows "
        f"(`all` counts every sale in one shard): at most {sum(one['tasks']) / max(one['tasks']):.2f}x "
        "by the 1 worker's group times",
    )


def _measure(table: harness.Table, runs: int) -> None:
    redis = _redis()
    print(f"ticks: {SALES:,} demo sales through the tick, 1 and 2 workers in turn, {redis}…", flush=True)
    _add_rows(table, redis, *_runs(runs).values())


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    """The environment's Redis, then (unless that is already one) a Redis Cluster of the benchmark's own."""
    table = table or harness.Table()
    _measure(table, runs)
    if _redis() != "Redis Cluster":
        with harness.boards_on_cluster():
            _measure(table, runs)
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

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

import io
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
    call_command("seed_demo", "--seed", "1", "--sales", str(SALES), "--no-progress", stdout=io.StringIO())
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
        cpu = _cpu_jiffies()
        started = time.perf_counter()
        tasks.tick()
        processes.wait_until(
            lambda: TickLog.objects.count() >= len(queues),
            timeout=DONE_SECONDS,
            what="every group's tick",
            watch=watch,
        )
        elapsed = time.perf_counter() - started
        busy, total = (after - before for after, before in zip(_cpu_jiffies(), cpu, strict=True))
    assert not PendingSale.objects.exists(), "a tick left sales pending"
    return {
        "seconds": elapsed,
        "tasks": sorted(round(t.duration_ms / 1000, 1) for t in TickLog.objects.all()),
        "busy cores": round(busy / total * os.cpu_count(), 2),
    }


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, *rest = (int(n) for n in stat.readline().split()[1:])
    return user + nice + system + sum(rest), user + nice + system + idle + iowait + sum(rest)


def _runs(workers: int, runs: int) -> dict:
    """The median run (by throughput) with `workers` workers sharing the tick queues."""
    from django.conf import settings

    from salesrank_site.settings import tick_queue_names

    queues = tick_queue_names(settings.RANKINGS["KEY_PREFIX"], QUEUES)
    # One worker takes every queue; two take one each.
    assignment = [queues] if workers == 1 else [[q] for q in queues]
    env = {**os.environ, **harness.environment(), "RANKINGS_TICK_QUEUES": str(QUEUES)}
    quiet = ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    results = []
    with tempfile.TemporaryDirectory(prefix="salesrank-bench-ticks-") as logs:
        started = [
            processes.celery_worker(logs, env, name=f"ticks{n}", queues=q, args=quiet, wait=False)
            for n, q in enumerate(assignment)
        ]
        processes.wait_all_ready(started)
        try:
            for _ in range(runs):
                sales, rows = _backlog()
                result = {
                    "rate": 0.0,
                    "rows": rows,
                    "load": os.getloadavg()[0],
                    **_timed_tick(queues, started),
                }
                result["rate"] = sales / result["seconds"]
                results.append(result)
                print(f"    {workers} worker(s), {sales:,} sales: {result}", flush=True)
        finally:
            processes.stop_all(started)
    return sorted(results, key=lambda r: r["rate"])[len(results) // 2]


def _seen(result: dict, how: str) -> str:
    """What a run's figure stands on: its tasks' own times and how busy the machine was."""
    return (
        f"group ticks of {' and '.join(f'{d:.1f} s' for d in result['tasks'])} {how}; "
        f"{result['busy cores']:.1f} of {os.cpu_count()} cores busy, load {result['load']:.1f}"
    )


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
        note=f"{SALES:,} demo sales pending; {_seen(one, 'one after the other')}",
    )
    rows = two["rows"]
    table.add(
        f"tick throughput, 2 workers, 1 tick queue each, {redis}",
        f"{two['rate']:,.0f} sales/s",
        f"{one['rate']:,.0f} sales/s with 1 worker",
        f"{two['rate'] / one['rate']:.2f}x",
        f"{_seen(two, 'side by side')}; the groups hold {rows[0]:,} and {rows[1]:,} queue rows "
        f"(`all` counts every sale in one shard: at most {sum(rows) / max(rows):.2f}x)",
    )
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

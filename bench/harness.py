"""What every benchmark needs: its own database and key prefix, clean state, real servers, a table.

Benchmarks run against a database, a Redis database and a key prefix of their own
(`salesrank_bench`, Redis database 4, `salesrank-bench`; BENCH_DATABASE,
BENCH_REDIS_DATABASE, BENCH_KEY_PREFIX and BENCH_PORT name others), so they never
touch the data of `make run`, and the millions of keys a large run can leave
behind never lengthen the key scans of `make run` or `make test` (database 0; on a Redis
Cluster, which has no other database, only the prefix keeps them apart).
Each figure is the median of several runs.
"""

import contextlib
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import environ

from rankings.serving import memory
from tests import processes

ROOT = Path(__file__).resolve().parent.parent
# Both may be set, so that two benchmark runs on one machine do not reset each other's data.
BENCH_DATABASE = os.environ.get("BENCH_DATABASE", "salesrank_bench")
BENCH_PREFIX = os.environ.get("BENCH_KEY_PREFIX", "salesrank-bench")
PORT = int(os.environ.get("BENCH_PORT", "8011"))
# Celery's broker takes the next one (salesrank_site.settings), so at most 14.
BENCH_REDIS_DATABASE = int(os.environ.get("BENCH_REDIS_DATABASE", "4"))
if not 0 <= BENCH_REDIS_DATABASE <= 14:
    raise SystemExit(
        f"BENCH_REDIS_DATABASE must be 0 to 14 (got {BENCH_REDIS_DATABASE}): the broker takes the next"
    )


def _redis_url() -> str:
    """The environment's Redis (REDIS_URL, and a developer's .env unless READ_DOT_ENV=0, read as the
    settings read them) with the benchmarks' database number in place of its own; a cluster's node
    as it is (a cluster has database 0 only)."""
    env = environ.Env()
    if env.bool("READ_DOT_ENV", default=True):
        environ.Env.read_env(ROOT / ".env", overwrite=False)
    url = urlsplit(env.str("REDIS_URL", default="redis://127.0.0.1:6379/0"))
    if env.bool("REDIS_CLUSTER", default=False):
        return urlunsplit(url)
    query = [(name, value) for name, value in parse_qsl(url.query) if name != "db"]
    if url.scheme == "unix":  # a socket's path is its own: the number goes in the query
        return f"unix://{url.netloc}{url.path}?{urlencode([*query, ('db', BENCH_REDIS_DATABASE)])}"
    return urlunsplit(url._replace(path=f"/{BENCH_REDIS_DATABASE}", query=urlencode(query)))


def environment() -> dict:
    """The environment of the benchmark's Django processes (set before django.setup())."""
    return {
        "DJANGO_SETTINGS_MODULE": "salesrank_site.settings",
        "DATABASE_URL": f"postgres:///{BENCH_DATABASE}",
        "RANKINGS_KEY_PREFIX": BENCH_PREFIX,
        "REDIS_URL": _redis_url(),
        "SECRET_KEY": os.environ.get("SECRET_KEY", "benchmark-only-key"),
        "LOG_LEVEL": "WARNING",
        # One load generator on one address: per-client throttling would answer 429 to nearly all of it.
        "THROTTLE_READS": "",
        "THROTTLE_INGEST": "",
        "THROTTLE_PAGES": "",
    }


def setup() -> None:
    os.environ.update(environment())
    import django

    django.setup()
    from django.core.management import call_command

    from rankings.operations.first_run import database_ensure

    database_ensure()
    call_command("migrate", verbosity=0)


def reset() -> None:
    """An empty shop: no sales, buckets, state, catalogue, and no Redis key of the prefix."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE rankings_sale, rankings_saleid, rankings_pendingsale, rankings_bucket, rankings_shardstate, rankings_batch,"
            " rankings_engagement, rankings_engagementid, rankings_pendingengagement,"
            " rankings_ticklog, rankings_ingestlog, rankings_snapshot, rankings_snapshotmark, rankings_snapshothour,"
            " rankings_metriccount, rankings_alert, rankings_alertfiring, rankings_alertattempt,"
            " catalogue_product_categories, catalogue_product, catalogue_category RESTART IDENTITY CASCADE"
        )
    keys_delete(f"{BENCH_PREFIX}:*")
    _broker_keys_delete()
    memory.forget_all()


def keys_delete(pattern: str) -> None:
    """Every key of the benchmarks' Redis that matches `pattern`."""
    from rankings.engine import store

    r = store.patient()
    keys = list(r.scan_iter(pattern, count=5000))
    for first in range(0, len(keys), 5000):  # a million categories leave millions of keys
        r.unlink(*keys[first : first + 5000])


def _broker_keys_delete() -> None:
    """The prefix's queues in the Celery broker's Redis database, and the bindings Celery keeps of
    them after its workers stop."""
    import redis
    from django.conf import settings

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    keys = [
        key for pattern in (f"*{BENCH_PREFIX}:*", f"*{BENCH_PREFIX}-*") for key in broker.scan_iter(pattern)
    ]
    if keys:
        broker.unlink(*keys)
    broker.close()


def median(values):
    return statistics.median(values)


def percentile(values, p: int) -> float:
    """The p-th percentile (1 to 99) of the values, interpolated between the two nearest."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, *rest = (int(n) for n in stat.readline().split()[1:])
    return user + nice + system + sum(rest), user + nice + system + idle + iowait + sum(rest)


def process_cpu(started: list[processes.Process]) -> float:
    """CPU seconds the processes have used so far (user and system), from /proc/<pid>/stat."""
    ticks = 0
    for process in started:
        with open(f"/proc/{process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def at_once(sends: list[Callable[[], object]]) -> float:
    """Seconds from the moment every one of `sends` starts, together, until the last is done. Each
    client makes what it sends before it is called: a client's own work (making its bodies, in threads
    that share one interpreter) is no part of the service's time."""
    start = threading.Barrier(len(sends) + 1)

    def run(send: Callable[[], object]) -> None:
        start.wait()
        send()

    with ThreadPoolExecutor(len(sends)) as pool:
        futures = [pool.submit(run, send) for send in sends]
        start.wait()
        started = time.perf_counter()
        for future in futures:
            future.result()
        return time.perf_counter() - started


@dataclass
class Row:
    benchmark: str
    figure: str
    baseline: str = ""
    ratio: str = ""
    note: str = ""


@dataclass
class Table:
    rows: list[Row] = field(default_factory=list)

    def add(self, benchmark, figure, baseline="", ratio="", note=""):
        row = Row(benchmark, figure, baseline, ratio, note)
        self.rows.append(row)
        print(
            f"  {benchmark}: {figure}" + (f"  (baseline {baseline}, ratio {ratio})" if baseline else ""),
            flush=True,
        )

    def render(self) -> str:
        headers = ("benchmark", "median", "baseline (same run)", "ratio", "note")
        cells = [headers] + [(r.benchmark, r.figure, r.baseline, r.ratio, r.note) for r in self.rows]
        widths = [max(len(str(c[i])) for c in cells) for i in range(len(headers))]
        lines = []
        for n, row in enumerate(cells):
            lines.append("| " + " | ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)) + " |")
            if n == 0:
                lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        return "\n".join(lines)


@contextlib.contextmanager
def boards_on_cluster(*, replicas: int = 1):
    """The boards on a Redis Cluster of their own (three primaries, each with `replicas` replicas) for
    this process and every process it starts; the Django cache and Celery's broker stay on the plain
    Redis."""
    with tempfile.TemporaryDirectory(prefix="salesrank-bench-cluster-") as logs:
        cluster = processes.redis_cluster(logs, replicas=replicas)
        try:
            with processes.boards_on(cluster.url, clustered=True):
                yield cluster
        finally:
            cluster.stop()


@contextlib.contextmanager
def services(*, web_workers: int = 2, tick_seconds: float | None = None, worker: bool = True):
    """gunicorn (and a Celery worker and beat) on the benchmark's database, ready, and stopped afterwards."""
    env = {**os.environ, **environment()}
    if tick_seconds is not None:
        env["RANKINGS_TICK_SECONDS"] = str(tick_seconds)
    with tempfile.TemporaryDirectory(prefix="salesrank-bench-") as logs:
        started = [processes.web(logs, env, workers=web_workers, port=PORT, wait=False)]
        if worker:
            started.append(processes.celery_worker(logs, env, wait=False))
            started.append(processes.celery_beat(logs, env, wait=False))
        try:
            processes.wait_all_ready(started)
            yield f"http://127.0.0.1:{PORT}"
        finally:
            processes.stop_all(started)


def ingest_token() -> str:
    """A token of a user allowed to post sales and engagement events, in the benchmark's database."""
    from rankings.operations.tokens import ingest_token_create

    return ingest_token_create(username="bench", permissions=["add_sale", "add_engagement"])


def redirections() -> int:
    """The MOVED and ASK replies the boards' Redis has sent since it started (every primary of a
    cluster): a client sent to the wrong node pays a round trip more."""
    from rankings.engine import store

    r = store.patient()
    nodes = [node.redis_connection for node in r.get_primaries()] if store.clustered() else [r]
    found = 0
    for node in nodes:
        stats = node.info("errorstats")
        found += sum(stats.get(f"errorstat_{kind}", {}).get("count", 0) for kind in ("MOVED", "ASK"))
    return found


def load_average() -> str:
    """The machine's load average over 1, 5 and 15 minutes, as the figures beside it were taken."""
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())

"""Lag from accept to visible in the other categories during a flash sale, with the hot category
hashed with the others and on a shard (and a worker) of its own.

The flash sale: 100,000 sales in one hour in cat0, replayed at 10x speed (278 sales/s), of
which a slice of SIMULATED_MINUTES is replayed; beside it, steady traffic of STEADY_RATE
sales/s spread over the 49 other categories of the demo catalogue. Both go through
POST /v1/sales of a gunicorn, ten batches a second, while the beat ticks every 2 s and
two Celery workers (one process each) consume the tick queues.

The lag is measured on probes: every PROBE_SECONDS one sale of a product only the probes sell,
in a random other category, timed from the moment POST /v1/sales answered to the first
GET /v1/products/<id>/rank whose units count it (asked every POLL_SECONDS, through the
same gunicorn: each web process's half-second answer cache is part of the lag).

The set-ups, same load:
  a) 4 hashed shards, 2 tick queues, a worker on each (cat0 and `all` share workers with others);
  b) cat0 pinned (rankings_rebuild --pin cat0 --activate): 4 hashed shards and cat0's, one tick
     queue per shard, one worker for cat0's queue and one for the four others;
  c) cat0 and `all` pinned: the board that counts every sale, flash included, goes with cat0.
The default queue (where the beat's tick is fanned out) is on the worker of ticks.0 in a), as in
the runbook's two-machine example, and on the others' worker in b) and c).

    make bench BENCH_ARGS="--only flash"
"""

import http.client
import io
import json
import os
import random
import tempfile
import threading
import time
from dataclasses import dataclass, field

from bench import harness
from rankings.conf import rankings_settings
from tests import processes

HOT = "cat0"
CATEGORIES = 50
PRODUCTS_PER_CATEGORY = 400  # the demo catalogue: product i is in category i mod 50
HOUR_SALES = 100_000
SPEED = 10
HOT_RATE = HOUR_SALES / 3600 * SPEED  # sales/s
STEADY_RATE = 30  # sales/s over the 49 other categories
SIMULATED_MINUTES = 20
REPLAY_SECONDS = SIMULATED_MINUTES * 60 / SPEED  # seconds
BATCHES_PER_SECOND = 10  # per stream of sales
PROBE_SECONDS = 0.25  # seconds between probe sales
POLL_SECONDS = 0.1  # seconds between two reads of each probe still unseen
# The boards start with some history, as a shop's do.
BACKGROUND_SALES = 20_000
# Long enough for the last probes to be ticked on a loaded machine; a probe unseen after it fails the run.
VISIBLE_SECONDS = 60  # seconds


@dataclass(frozen=True)
class Setup:
    label: str
    pins: tuple[str, ...]  # categories given a shard of their own, in this order
    queues: int  # RANKINGS_TICK_QUEUES: shard s is ticked on queue s mod queues
    workers: tuple[tuple[int, ...], ...]  # the tick queues of each worker
    # The worker that also consumes the default queue, where the beat's tick is fanned out.
    default_on: int


SETUPS = (
    Setup("a) cat0 hashed: 4 shards, 2 tick queues, a worker each", (), 2, ((0,), (1,)), default_on=0),
    Setup(
        "b) cat0 pinned: 4 hashed + cat0's shard, a worker for cat0's, one for the 4 others",
        (HOT,),
        5,
        ((4,), (0, 1, 2, 3)),
        default_on=1,
    ),
    Setup(
        "c) cat0 and all pinned: a worker for their 2 shards, one for the 4 others",
        (HOT, "all"),
        6,
        ((4, 5), (0, 1, 2, 3)),
        default_on=1,
    ),
)


def _product(category: int, rng: random.Random) -> str:
    """A product of the category, by Zipf popularity as in the demo; never the category's probe product."""
    rank = min(int(rng.paretovariate(1.0)), PRODUCTS_PER_CATEGORY - 1) - 1
    return f"p{category + CATEGORIES * rank}"


def _probe_product(category: int) -> str:
    """The category's last product, which only the probes sell."""
    return f"p{category + CATEGORIES * (PRODUCTS_PER_CATEGORY - 1)}"


def _event(tag: str, product: str, categories: list[str]) -> dict:
    return {
        "id": tag,
        "ts": int(time.time()),
        "productId": product,
        "categories": categories,
        "qty": 1,
        "amount": "19.99",
    }


class Client:
    """One keep-alive connection to the web server: posts sale batches and reads a product's units."""

    def __init__(self, url: str, token: str):
        host, port = url.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=30)
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}

    def post(self, events: list[dict]) -> None:
        self.connection.request("POST", "/v1/sales", json.dumps({"events": events}), self.headers)
        reply = self.connection.getresponse()
        body = reply.read()
        if reply.status != 200 or json.loads(body)["accepted"] != len(events):
            raise RuntimeError(f"POST /v1/sales: {reply.status} {body[:300]!r}")

    def units(self, product: str, category: str) -> int:
        self.connection.request("GET", f"/v1/products/{product}/rank?category={category}&window=1h")
        reply = self.connection.getresponse()
        body = reply.read()
        if reply.status != 200:
            raise RuntimeError(f"GET rank of {product} in {category}: {reply.status} {body[:300]!r}")
        return json.loads(body)["units"]


def _paced(rate: float, until: float, send, stop: threading.Event) -> int:
    """Call send(n) at `rate` calls a second until `until` (monotonic), catching up when late; the calls made."""
    started, n = time.monotonic(), 0
    while not stop.is_set():
        due = started + n / rate
        if due >= until:
            break
        time.sleep(max(0.0, due - time.monotonic()))
        send(n)
        n += 1
    return n


@dataclass
class Probes:
    """Probe sales sent and not yet seen, per category, and the lags of those seen."""

    client: Client
    baseline: dict[int, int]  # units of each probe product before the replay
    sent: dict[int, int] = field(default_factory=dict)
    waiting: dict[int, list[tuple[int, float]]] = field(default_factory=dict)  # (units, accepted at)
    lags: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, category: int, tag: str) -> None:
        self.client.post([_event(tag, _probe_product(category), [f"cat{category}"])])
        accepted = time.monotonic()
        with self.lock:
            self.sent[category] = self.sent.get(category, 0) + 1
            units = self.baseline[category] + self.sent[category]
            self.waiting.setdefault(category, []).append((units, accepted))

    def poll(self, reader: Client) -> None:
        """Read each category with a probe unseen; a probe is seen once its product's units count it."""
        with self.lock:
            categories = [c for c, w in self.waiting.items() if w]
        for category in categories:
            units = reader.units(_probe_product(category), f"cat{category}")
            seen = time.monotonic()
            with self.lock:
                pending = self.waiting[category]
                self.lags += [seen - accepted for wanted, accepted in pending if wanted <= units]
                self.waiting[category] = [(w, a) for w, a in pending if w > units]

    def unseen(self) -> int:
        with self.lock:
            return sum(len(w) for w in self.waiting.values())


def _streams(client_of, probes: Probes, tag: str, until: float, stop: threading.Event) -> dict:
    """The flash sale, the steady traffic and the probes, each paced on a connection of its own, until
    `until`: the functions to run, each returning how many sales it sent."""
    hot_client, steady_client = client_of(), client_of()
    rngs = {name: random.Random(f"{tag}-{name}") for name in ("hot", "steady", "probe")}

    def batch(rate: float, n: int) -> int:
        per = rate / BATCHES_PER_SECOND
        return round((n + 1) * per) - round(n * per)

    def hot(n: int) -> None:
        rng = rngs["hot"]
        hot_client.post(
            [_event(f"{tag}-hot-{n}-{i}", _product(0, rng), [HOT]) for i in range(batch(HOT_RATE, n))]
        )

    def steady(n: int) -> None:
        rng, events = rngs["steady"], []
        for i in range(batch(STEADY_RATE, n)):
            category = rng.randrange(1, CATEGORIES)
            events.append(_event(f"{tag}-steady-{n}-{i}", _product(category, rng), [f"cat{category}"]))
        if events:
            steady_client.post(events)

    def probe(n: int) -> None:
        probes.send(rngs["probe"].randrange(1, CATEGORIES), f"{tag}-probe-{n}")

    return {
        "hot": lambda: round(_paced(BATCHES_PER_SECOND, until, hot, stop) * HOT_RATE / BATCHES_PER_SECOND),
        "steady": lambda: round(
            _paced(BATCHES_PER_SECOND, until, steady, stop) * STEADY_RATE / BATCHES_PER_SECOND
        ),
        "probes": lambda: _paced(1 / PROBE_SECONDS, until, probe, stop),
    }


def _watch(probes: Probes, reader: Client, until: float, stop: threading.Event) -> int:
    """Poll the probes until the replay is over and every probe is seen; fails if one stays unseen."""
    deadline = until + VISIBLE_SECONDS
    while not stop.is_set() and (time.monotonic() < until or probes.unseen()):
        if time.monotonic() > deadline:
            raise processes.ProcessWaitFailed(
                f"{probes.unseen()} probe sales unseen {VISIBLE_SECONDS} s after the replay"
            )
        started = time.monotonic()
        probes.poll(reader)
        time.sleep(max(0.0, started + POLL_SECONDS - time.monotonic()))
    return len(probes.lags)


def _replay(url: str, token: str, tag: str) -> dict:
    """Run the streams and the probes' watch side by side: the sales each sent and the probes' lags."""
    from concurrent.futures import ThreadPoolExecutor

    def client_of() -> Client:
        return Client(url, token)

    reader = client_of()
    baseline = {c: reader.units(_probe_product(c), f"cat{c}") for c in range(1, CATEGORIES)}
    probes = Probes(client_of(), baseline)
    stop = threading.Event()
    until = time.monotonic() + REPLAY_SECONDS
    jobs = {
        **_streams(client_of, probes, tag, until, stop),
        "seen": lambda: _watch(probes, reader, until, stop),
    }

    def guarded(job):
        try:
            return job()
        except BaseException:
            stop.set()  # the others end too, and the error is raised below
            raise

    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {name: pool.submit(guarded, job) for name, job in jobs.items()}
        counts = {name: future.result() for name, future in futures.items()}
    return {**counts, "lags": probes.lags}


def _shop(setup: Setup):
    """The demo catalogue with some history, every sale ticked, laid out as the set-up says: the layout."""
    from django.core.management import call_command
    from django.db import connection

    from rankings.engine.shards import active
    from rankings.engine.tick import tick

    harness.reset()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE rankings_rankingversion")
    call_command(
        "seed_demo",
        "--seed",
        "1",
        "--sales",
        str(BACKGROUND_SALES),
        "--no-engagement",
        "--no-progress",
        stdout=io.StringIO(),
    )
    tick()
    if setup.pins:
        pins = [f"--pin={slug}" for slug in setup.pins]
        call_command("rankings_rebuild", *pins, "--activate", stdout=io.StringIO())
    layout = active().layout
    # The premise of the set-up: the pinned shards' queues are their worker's alone.
    if setup.pins:
        own = {layout.shard_of(slug) % setup.queues for slug in setup.pins}
        others = {s % setup.queues for s in range(layout.shards)} - own
        assert set(setup.workers[0]) == own and set(setup.workers[1]) == others, (layout, setup)
    return layout


def _services(logs: str, setup: Setup) -> list[processes.Process]:
    """gunicorn, the beat and one worker per group of tick queues, ready, with every shard ticked once."""
    from django.conf import settings
    from django.utils import timezone

    from rankings.engine.shards import shard_count
    from rankings.models import TickLog
    from salesrank_site.settings import tick_queue_names

    since = timezone.now()
    env = {**os.environ, **harness.environment(), "RANKINGS_TICK_QUEUES": str(setup.queues)}
    names = tick_queue_names(rankings_settings.KEY_PREFIX, setup.queues)
    quiet = ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    consumed = [[names[q] for q in queues] for queues in setup.workers]
    consumed[setup.default_on].append(settings.CELERY_TASK_DEFAULT_QUEUE)
    started = [
        processes.celery_worker(logs, env, name=f"ticks-{n}", queues=queues, args=quiet, wait=False)
        for n, queues in enumerate(consumed)
    ]
    started.append(processes.web(logs, env, port=harness.PORT, wait=False))
    started.append(processes.celery_beat(logs, env, wait=False))
    processes.wait_all_ready(started)
    shards = set(range(shard_count()))

    def every_shard_ticked() -> bool:
        rows = TickLog.objects.filter(started_at__gte=since).values_list("shards", flat=True)
        ticked = {s for row in rows for s in row}
        return ticked >= shards

    try:
        processes.wait_until(
            every_shard_ticked, timeout=processes.READY_SECONDS, what="a tick of every shard", watch=started
        )
    except BaseException:
        processes.stop_all(started)
        raise
    return started


def _tick_times(since, hot_shards: set[int]) -> dict[str, tuple[int, float, float]]:
    """(ticks, median, max seconds) of the ticks since `since` that worked a hot shard, and of the others."""
    from rankings.models import TickLog

    found = {"hot": [], "others": []}
    for shards, ms in TickLog.objects.filter(started_at__gte=since).values_list("shards", "duration_ms"):
        found["hot" if hot_shards & set(shards) else "others"].append(ms / 1000)
    return {k: (len(v), harness.median(v) if v else 0.0, max(v, default=0.0)) for k, v in found.items()}


def _measure(setup: Setup) -> dict:
    """One replay on the set-up: the probes' lags, the sales sent, how busy the machine and workers were."""
    from django.utils import timezone

    from rankings.engine.shards import ALL

    layout = _shop(setup)
    print(f"  {setup.label}: {layout.describe()}, {setup.queues} tick queues…", flush=True)
    with tempfile.TemporaryDirectory(prefix="salesrank-bench-flash-") as logs:
        started = _services(logs, setup)
        try:
            since, cpu, own = (
                timezone.now(),
                harness.cpu_jiffies(),
                [harness.process_cpu([w]) for w in started[:2]],
            )
            result = _replay(
                f"http://127.0.0.1:{harness.PORT}", harness.ingest_token(), f"flash-{time.time_ns()}"
            )
            busy, total = (after - before for after, before in zip(harness.cpu_jiffies(), cpu, strict=True))
            own = [harness.process_cpu([w]) - before for w, before in zip(started[:2], own, strict=True)]
        finally:
            processes.stop_all(started)
    seconds = REPLAY_SECONDS
    result.update(
        busy_cores=busy / total * os.cpu_count(),
        load=os.getloadavg()[0],
        worker_cores=[c / seconds for c in own],
        ticks=_tick_times(since, {layout.shard_of(HOT), layout.shard_of(ALL)}),
    )
    print(f"    {_summary(result)}", flush=True)
    return result


def _summary(result: dict) -> str:
    lags = result["lags"]
    names = {"hot": "with cat0's or all's shard", "others": "of the other shards only"}
    ticks = [
        f"{count} tick tasks {names[group]}, median {median:.2f} s, max {longest:.2f} s"
        for group, (count, median, longest) in result["ticks"].items()
        if count
    ]
    return (
        f"{len(lags)} probes, p50 {harness.percentile(lags, 50):.2f} s, p99 {harness.percentile(lags, 99):.2f} s, "
        f"max {max(lags):.2f} s; sent {result['hot'] / REPLAY_SECONDS:.0f} hot + "
        f"{result['steady'] / REPLAY_SECONDS:.0f} steady sales/s; {result['busy_cores']:.2f} of "
        f"{os.cpu_count()} cores busy, load {result['load']:.1f}; the tick workers used "
        + " and ".join(f"{c:.2f}" for c in result["worker_cores"])
        + " of a core; "
        + "; ".join(ticks)
    )


def run(table: harness.Table | None = None, runs: int = 1) -> harness.Table:
    """One replay per set-up (`runs` is not used: a replay is long, and its figure is a percentile of
    hundreds of probes)."""
    table = table or harness.Table()
    print(
        f"flash: {HOUR_SALES:,} sales/hour in {HOT} at {SPEED}x ({HOT_RATE:.0f} sales/s) for {SIMULATED_MINUTES} "
        f"simulated minutes ({REPLAY_SECONDS:.0f} s), {STEADY_RATE} sales/s in the 49 others…",
        flush=True,
    )
    results = [(setup, _measure(setup)) for setup in SETUPS]
    first = results[0][1]["lags"]
    for setup, result in results:
        lags = result["lags"]
        p50, p99 = harness.percentile(lags, 50), harness.percentile(lags, 99)
        baseline = harness.percentile(first, 99)
        table.add(
            f"flash-sale lag, other categories, {setup.label}",
            f"p50 {p50:.2f} s, p99 {p99:.2f} s",
            *((f"p99 {baseline:.2f} s in a)", f"{p99 / baseline:.2f}x") if lags is not first else ()),
            note=f"{_summary(result)}; p50 ratio {p50 / harness.percentile(first, 50):.2f}x",
        )
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

"""Engagement at click rate: how fast views get in, how soon they show, and what coalescing saves.

(a) ingest: POST /v1/engagements in batches of 10,000 (one client, then four at once), against
    PostgreSQL's own binary COPY of the same rows into the same table (rankings_engagement),
    measured in the same run; medians of `runs`. Views are live clicks (stamped within the last
    two seconds) and carry no id, as most views do not; one more figure sends them with ids
    (de-duplicated).
(b) lag accept→visible, p50/p99: two clients post 20,000 views/s between them while a third posts
    2,000 sales/s, for PACED_SECONDS, through gunicorn with the worker and beat running. Each view
    batch carries a probe: a product of its own in a category of its own, viewed more often than
    the one before, timed from the moment POST answered to the first /top?metric=views listing it.
(c) Redis writes per tick with and without coalescing: ticks of 40,000 views (two seconds at
    20,000 views/s), 80% of them in the hot category cat0 with the demo's skew of products;
    without coalescing each view is one ZINCRBY on each board it counts in.

    make bench BENCH_ARGS="--only engage"
"""

import datetime as dt
import functools
import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse
import uuid

from bench import harness
from rankings.engine.windows import configured_windows
from rankings.serving import memory

BATCH = 10_000  # events per POST: the API's largest batch
HTTP_BATCHES = 10  # per run of one client; each of four clients sends a quarter as many
INGEST_GOAL = 50_000  # events/s
COPY_GOAL = 0.4  # of the COPY floor

VIEW_RATE = 20_000  # views/s, from VIEW_CLIENTS clients
VIEW_CLIENTS = 2
VIEW_BATCH = 2_000
SALE_RATE = 2_000  # sales/s, from one client
SALE_BATCH = 200
PACED_SECONDS = 20
LAG_GOAL = 3  # seconds, the p99

TICK_VIEWS = 40_000  # views per tick: two seconds at 20,000 views/s
TICKS = 5
HOT_SHARE = 0.8

CATEGORIES = 50
PRODUCTS = 20_000


def _product(rng: random.Random, category: int) -> str:
    """A product of the category, by the demo's Zipf popularity (product i is in category i mod 50)."""
    rank = min(int(rng.paretovariate(1.0)), PRODUCTS // CATEGORIES) - 1
    return f"p{category + CATEGORIES * rank}"


def _views(count: int, rng: random.Random, *, ids: str | None = None, now: float | None = None) -> list[dict]:
    """`count` views (a tenth of them wishes) stamped within the last two seconds, as live clicks
    arrive, HOT_SHARE in cat0, the rest spread."""
    now = now or time.time()
    events = []
    for i in range(count):
        category = 0 if rng.random() < HOT_SHARE else rng.randrange(1, CATEGORIES)
        event = {
            "ts": int(now) - rng.randrange(2),
            "productId": _product(rng, category),
            "categories": [f"cat{category}"],
            "kind": "wish" if rng.random() < 0.1 else "view",
        }
        if ids is not None:
            event["id"] = f"{ids}-{i}"
        events.append(event)
    return events


class _Client:
    def __init__(self, url: str, token: str):
        parts = urllib.parse.urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}

    def post(self, path: str, body: bytes, count: int) -> None:
        self.connection.request("POST", path, body, self.headers)
        reply = self.connection.getresponse()
        answer = reply.read()
        if reply.status != 200 or json.loads(answer)["accepted"] != count:
            raise RuntimeError(f"POST {path}: {reply.status} {answer[:300]!r}")

    def top(self, category: str) -> list[str]:
        self.connection.request("GET", f"/v1/categories/{category}/top?window=1h&metric=views&limit=100")
        reply = self.connection.getresponse()
        body = json.loads(reply.read())
        return [item["productId"] for item in body.get("items", [])]


# --- (a) ingest ------------------------------------------------------------------------------


def _bodies(batches: int, rng: random.Random, ids: bool = False) -> list[bytes]:
    """`batches` request bodies of BATCH views each, with ids of their own or none."""
    return [
        json.dumps({"events": _views(BATCH, rng, ids=uuid.uuid4().hex if ids else None)}).encode()
        for _ in range(batches)
    ]


def _send(url: str, token: str, bodies: list[bytes]) -> None:
    """POST the bodies one after another, on one connection."""
    client = _Client(url, token)
    for body in bodies:
        client.post("/v1/engagements", body, BATCH)


def _post_batches(url: str, token: str, batches: int, rng: random.Random, ids: bool = False) -> float:
    """Seconds to POST `batches` batches of BATCH views, one after another, on one connection."""
    bodies = _bodies(batches, rng, ids)
    started = time.perf_counter()
    _send(url, token, bodies)
    return time.perf_counter() - started


def _clients_rate(url: str, token: str, clients: int, batches: int, rng: random.Random) -> float:
    """Events/s of `clients` clients each POSTing `batches` batches at once, from the moment they start
    together (their bodies made before)."""
    bodies = [_bodies(batches, rng) for _ in range(clients)]
    seconds = harness.at_once([functools.partial(_send, url, token, mine) for mine in bodies])
    return clients * batches * BATCH / seconds


# The floor's rows: a view as the raw table holds it, in binary, its arrival stamped by the table's
# default as the ingest's is (bench_ladder copies them a batch at a time).
FLOOR_COPY = "COPY rankings_engagement (ts, product_id, kind, categories) FROM STDIN (FORMAT BINARY)"
FLOOR_COPY_TYPES = ["timestamptz", "varchar", "varchar", "varchar[]"]


def _copy_floor(rng: random.Random, rows: int = 200_000) -> float:
    """Rows/s of PostgreSQL's binary COPY of views into rankings_engagement itself (rolled back)."""
    from django.db import connection, transaction

    from rankings.engine.partitions import engagement_partitions_ensure

    now = time.time()
    events = _views(rows, rng, now=now)
    instants = [dt.datetime.fromtimestamp(e["ts"], tz=dt.UTC) for e in events]
    engagement_partitions_ensure(instants)

    class _RolledBack(Exception):
        pass

    try:
        with transaction.atomic(), connection.cursor() as cursor:
            started = time.perf_counter()
            with cursor.copy(FLOOR_COPY) as copy:
                copy.set_types(FLOOR_COPY_TYPES)
                for event, at in zip(events, instants, strict=True):
                    copy.write_row((at, event["productId"], event["kind"], event["categories"]))
            rate = rows / (time.perf_counter() - started)
            raise _RolledBack
    except _RolledBack:
        pass
    return rate


def ingest(table: harness.Table, runs: int) -> None:
    rng = random.Random(0)
    with harness.services(worker=False, web_workers=4) as url:
        token = harness.ingest_token()
        one = (
            BATCH
            * HTTP_BATCHES
            / statistics.median([_post_batches(url, token, HTTP_BATCHES, rng) for _ in range(runs)])
        )
        four = statistics.median([_clients_rate(url, token, 4, HTTP_BATCHES // 4, rng) for _ in range(runs)])
        with_ids = (
            BATCH
            * HTTP_BATCHES
            / statistics.median([_post_batches(url, token, HTTP_BATCHES, rng, ids=True) for _ in range(runs)])
        )
    copy_rate = statistics.median([_copy_floor(rng) for _ in range(runs)])
    floor = f"COPY into rankings_engagement {copy_rate:,.0f} rows/s"
    for what, rate in (
        ("POST /v1/engagements, batches of 10,000, one client", one),
        ("POST /v1/engagements, batches of 10,000, four clients", four),
        ("POST /v1/engagements, batches of 10,000 with ids, one client", with_ids),
    ):
        table.add(
            what,
            f"{rate:,.0f} events/s",
            floor,
            f"{rate / copy_rate:.2f}x",
            note=f"goal ≥ {INGEST_GOAL:,} events/s and ≥ {COPY_GOAL}x COPY",
        )


# --- (b) lag -----------------------------------------------------------------------------------


class _Watcher(threading.Thread):
    """Polls the probes' board and notes when each probe product first shows on it."""

    def __init__(self, url: str, category: str):
        super().__init__(daemon=True)
        self.url, self.category = url, category
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self):
        client = _Client(self.url, "")
        while not self.stop.is_set():
            shown = client.top(self.category)
            now = time.monotonic()
            for product in shown:
                self.seen.setdefault(product, now)
            time.sleep(0.02)


def _paced(url: str, token: str, tag: str) -> tuple[list[float], float, float]:
    """Views and sales at their rates for PACED_SECONDS: (each probe's lag, views/s and sales/s posted)."""
    category = f"{tag}-probes"
    watcher = _Watcher(url, category)
    watcher.start()
    sent: dict[str, float] = {}
    counts = {"views": 0, "sales": 0}
    lock = threading.Lock()
    started = time.monotonic()

    def views(c: int) -> None:
        client, rng = _Client(url, token), random.Random(f"{tag}-{c}")
        interval = VIEW_BATCH * VIEW_CLIENTS / VIEW_RATE
        n = 0
        while time.monotonic() - started < PACED_SECONDS:
            n += 1
            probe = f"probe-{tag}-{c}-{n}"
            weight = n * VIEW_CLIENTS + c  # each probe viewed more often than the last: it leads the board
            events = (
                _views(VIEW_BATCH - weight, rng)
                + [{"ts": int(time.time()), "productId": probe, "categories": [category], "kind": "view"}]
                * weight
            )
            client.post("/v1/engagements", json.dumps({"events": events}).encode(), len(events))
            with lock:
                sent[probe] = time.monotonic()
                counts["views"] += len(events)
            time.sleep(max(0.0, started + n * interval - time.monotonic()))

    def sales() -> None:
        client, rng = _Client(url, token), random.Random(f"{tag}-sales")
        interval = SALE_BATCH / SALE_RATE
        n = 0
        while time.monotonic() - started < PACED_SECONDS:
            n += 1
            now = int(time.time())
            events = []
            for i in range(SALE_BATCH):
                category = rng.randrange(CATEGORIES)
                events.append(
                    {
                        "id": f"{tag}-sale-{n}-{i}",
                        "ts": now,
                        "productId": _product(rng, category),
                        "categories": [f"cat{category}"],
                        "qty": 1,
                        "amount": "9.99",
                    }
                )
            client.post("/v1/sales", json.dumps({"events": events}).encode(), SALE_BATCH)
            with lock:
                counts["sales"] += SALE_BATCH
            time.sleep(max(0.0, started + n * interval - time.monotonic()))

    threads = [threading.Thread(target=views, args=(c,)) for c in range(VIEW_CLIENTS)]
    threads.append(threading.Thread(target=sales))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not set(sent) <= set(watcher.seen):
        time.sleep(0.05)
    watcher.stop.set()
    watcher.join()
    lags = [watcher.seen[p] - t for p, t in sent.items() if p in watcher.seen]
    if len(lags) < len(sent):
        raise RuntimeError(f"{len(sent) - len(lags)} of {len(sent)} probes never showed")
    return lags, counts["views"] / elapsed, counts["sales"] / elapsed


def lag(table: harness.Table, runs: int) -> None:

    p50s, p99s, views, sales = [], [], [], []
    with harness.services() as url:
        token = harness.ingest_token()
        for run in range(runs):
            lags, view_rate, sale_rate = _paced(url, token, f"engage{run}-{int(time.time())}")
            p50s.append(harness.percentile(lags, 50))
            p99s.append(harness.percentile(lags, 99))
            views.append(view_rate)
            sales.append(sale_rate)
            memory.forget_all()
    note = (
        f"posted {harness.median(views):,.0f} views/s and {harness.median(sales):,.0f} sales/s; "
        "ticks woken on commit, beat every 2 s"
    )
    table.add(
        f"lag accept→visible in /top?metric=views at {VIEW_RATE:,} views/s + {SALE_RATE:,} sales/s, p50",
        f"{harness.median(p50s):.2f} s",
        note=note,
    )
    table.add(
        f"lag accept→visible in /top?metric=views at {VIEW_RATE:,} views/s + {SALE_RATE:,} sales/s, p99",
        f"{harness.median(p99s):.2f} s",
        note=f"goal ≤ {LAG_GOAL} s",
    )


# --- (c) coalescing ----------------------------------------------------------------------------


def _coalescing_run(rng: random.Random) -> tuple[int, int]:
    """TICKS ticks of TICK_VIEWS views each: (board writes without coalescing, board writes made)."""
    from django.utils import timezone

    from rankings.engine.tick import tick
    from rankings.ingest.engagement import engagements_ingest

    harness.reset()
    from django.core.management import call_command

    call_command("seed_demo", "--sales", "0", "--no-progress", verbosity=0)
    now = timezone.now()
    tick(now=now)
    windows = len(configured_windows())
    plain = writes = 0
    for _ in range(TICKS):
        now += dt.timedelta(seconds=2)
        events = _views(TICK_VIEWS, rng, now=now.timestamp())
        for start in range(0, TICK_VIEWS, BATCH):
            engagements_ingest(events=events[start : start + BATCH], source="engage-bench", now=now)
        # each view counts on its category's board and all's, in every window holding it (all four)
        plain += TICK_VIEWS * 2 * windows
        writes += tick(now=now).redis_writes
    return plain, writes


def coalescing(table: harness.Table, runs: int) -> None:
    rng = random.Random(1)
    results = [_coalescing_run(rng) for _ in range(runs)]
    plain, writes = results[-1]
    table.add(
        f"Redis writes per tick, {TICK_VIEWS:,} views, {HOT_SHARE:.0%} in one hot category",
        f"{writes / TICKS:,.0f} writes/tick",
        f"{plain / TICKS:,.0f} uncoalesced",
        f"{harness.median([p / w for p, w in results]):.1f}x fewer",
        note="one ZINCRBY per board member per batch instead of one per view and board",
    )


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    from django.core.management import call_command

    harness.reset()
    call_command("seed_demo", "--sales", "0", "--no-progress", verbosity=0)
    print("engage: ingest…", flush=True)
    ingest(table, runs)
    print("engage: coalescing…", flush=True)
    coalescing(table, runs)
    harness.reset()
    call_command("seed_demo", "--sales", "0", "--no-progress", verbosity=0)
    print("engage: lag…", flush=True)
    lag(table, runs)
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

"""The engine, measured on demo data: end-to-end lag, coalescing, rebuilds, Redis memory.

(a) end to end through real servers: POST /v1/sales → Celery tick → visible in
    /top; the lag p50/p99 at 2,000 and 20,000 events/s, and the sustained rate;
    the first tick over the demo's backlog.
(b) board writes per tick with and without coalescing, on the demo data and a
    flash sale (100,000 sales in one hour, one category, 20 products: the burst where coalescing pays).
(c) rebuilding every board from raw sales: see bench_rebuild.
(d) Redis memory per board member against a plain sorted set of the same members.
"""

import datetime as dt
import http.client
import json
import threading
import time
import urllib.parse

from bench import harness
from rankings.engine.windows import configured_windows
from rankings.serving.memory import forget_all

# (events/s, events per POST, clients): a large shop's peak, five times an average of 400 sales/s;
# and ten times that, from two clients (one alone does not post it on this machine).
PACED = [(2000, 200, 1), (20_000, 1000, 2)]
PACED_GOALS = {2000: 1, 20_000: 2}  # seconds, the lag's p99
PACED_SECONDS = 20
FLOOD_SECONDS = 15
FLOOD_BATCH = 1000


def _seed_demo(sales: int = 200_000) -> None:
    from django.core.management import call_command

    call_command(
        "seed_demo", "--seed", "1", "--sales", str(sales), "--no-engagement", "--no-progress", verbosity=0
    )


def _uncoalesced_writes(now: dt.datetime) -> int:
    """Board writes if every sale were applied on its own: one per board it counts in."""
    from django.db import connection

    terms = []
    params = []
    for w in configured_windows().values():
        first, _ = w.bounds(int(now.timestamp()))
        terms.append("(CASE WHEN counted_at >= to_timestamp(%s) THEN 1 ELSE 0 END)")
        params.append(first)
    sql = f"""
        SELECT coalesce(sum((cardinality(categories) + 1) * ({" + ".join(terms)})
                             * (CASE WHEN amount_cents <> 0 THEN 2 ELSE 1 END)), 0)
        FROM rankings_sale
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.fetchone()[0])


def _demo_tick() -> tuple[int, int, float]:
    """The demo data ticked in batches of 1,000: (uncoalesced writes, board writes, sales/s)."""
    from django.test import override_settings
    from django.utils import timezone

    from rankings.engine.tick import tick

    harness.reset()
    _seed_demo()
    now = timezone.now()
    with override_settings(RANKINGS={**_rankings(), "BATCH_SIZE": 1000}):
        started = time.perf_counter()
        report = tick(now=now)
        rate = report.sales / (time.perf_counter() - started)
    return _uncoalesced_writes(now), report.redis_writes, rate


def _flash_ticks() -> tuple[int, int]:
    """100,000 sales of 20 products in one category over an hour, a tick per 1,000:
    (uncoalesced writes, board writes)."""
    from django.utils import timezone

    from rankings.engine.tick import tick
    from rankings.ingest.sales import sales_ingest

    harness.reset()
    writes = 0
    start = timezone.now()
    for batch in range(100):
        events = [
            {
                "id": f"flash-{batch}-{i}",
                "ts": (start - dt.timedelta(seconds=3599 - (batch * 1000 + i) * 3599 // 100_000)).isoformat(),
                "productId": f"flash{i % 20}",
                "categories": ["flash"],
                "qty": 1,
                "amount": "9.99",
            }
            for i in range(1000)
        ]
        sales_ingest(events=events, now=start)
        writes += tick(now=start).redis_writes
    return _uncoalesced_writes(start), writes


def coalescing(table: harness.Table, runs: int) -> None:
    demo, flash = [], []
    for run in range(runs):
        demo.append(_demo_tick())
        if run == 0:
            memory(table)
        flash.append(_flash_ticks())
    table.add(
        "(b) board writes, demo 200,000 sales, batches of 1,000",
        f"{demo[-1][1]:,} writes",
        f"{demo[-1][0]:,} uncoalesced",
        f"{harness.median([plain / writes for plain, writes, _ in demo]):.2f}x fewer",
        "in-memory reference: 2.3% fewer (one 7d board)",
    )
    table.add(
        "(b) board writes, flash sale 100,000 sales, ticks of 1,000",
        f"{flash[-1][1]:,} writes",
        f"{flash[-1][0]:,} uncoalesced",
        f"{harness.median([plain / writes for plain, writes in flash]):.0f}x fewer",
        "in-memory reference: 50x at batches of 1,000",
    )
    table.add(
        "first tick over the demo data (claim, fold, apply)",
        f"{harness.median([rate for _, _, rate in demo]):,.0f} sales/s",
    )


def _rankings():
    from django.conf import settings

    return settings.RANKINGS


def memory(table: harness.Table) -> None:
    """Bytes per member of the boards, against a plain sorted set with the same members and scores."""
    from rankings.engine import store

    r = store.patient()
    version = store.served_version(fresh=True)
    boards = [k for k in r.scan_iter(f"{harness.BENCH_PREFIX}:v{version}:*:b:*", count=5000)]
    blobs = [k for k in r.scan_iter(f"{harness.BENCH_PREFIX}:v{version}:*:t:*", count=5000)]
    members = sum(r.zcard(k) for k in boards)
    board_bytes = sum(r.memory_usage(k, samples=0) or 0 for k in boards)
    blob_bytes = sum(r.memory_usage(k, samples=0) or 0 for k in blobs)
    plain_bytes = 0
    for i, key in enumerate(boards):
        rows = r.zrange(key, 0, -1, withscores=True)
        plain = f"{harness.BENCH_PREFIX}:plain:{i}"
        r.zadd(plain, {m: abs(s) for m, s in rows})
        plain_bytes += r.memory_usage(plain, samples=0) or 0
        r.unlink(plain)
    table.add(
        "(d) Redis memory per board member",
        f"{board_bytes / members:.0f} B",
        f"{plain_bytes / members:.0f} B plain sorted set",
        f"{board_bytes / plain_bytes:.2f}x",
        f"{members:,} members in {len(boards)} boards; top-100 blobs add {blob_bytes / members:.0f} B/member",
    )


class _Poster:
    """One HTTP client posting batches of sales, each with a probe whose visibility is timed."""

    def __init__(self, url: str, token: str, category: str):
        self.parts = urllib.parse.urlsplit(url)
        self.token = token
        self.category = category
        self.sent: dict[str, float] = {}
        self.events = 0
        self.conn = http.client.HTTPConnection(self.parts.hostname, self.parts.port, timeout=30)

    def post(self, tag: str, count: int, probe_qty: int) -> None:
        now = int(time.time())
        events = [
            {
                "id": f"{tag}-{i}",
                "ts": now,
                "productId": f"p{(i * 7919) % 20000}",
                "categories": [f"cat{i % 50}"],
                "qty": 1,
                "amount": "4.99",
            }
            for i in range(count - 1)
        ]
        probe = f"probe-{tag}"
        events.append(
            {"id": probe, "ts": now, "productId": probe, "categories": [self.category], "qty": probe_qty}
        )
        body = json.dumps({"events": events})
        self.conn.request(
            "POST",
            "/v1/sales",
            body=body,
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
        )
        reply = self.conn.getresponse()
        data = reply.read()
        if reply.status != 200:
            raise RuntimeError(f"POST /v1/sales answered {reply.status}: {data[:200]!r}")
        self.sent[probe] = time.monotonic()
        self.events += count


class _Watcher(threading.Thread):
    """Polls the probe board and notes when each probe first leads it."""

    def __init__(self, url: str, category: str):
        super().__init__(daemon=True)
        self.parts = urllib.parse.urlsplit(url)
        self.category = category
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self):
        conn = http.client.HTTPConnection(self.parts.hostname, self.parts.port, timeout=30)
        while not self.stop.is_set():
            conn.request("GET", f"/v1/categories/{self.category}/top?window=1h&limit=100")
            reply = conn.getresponse()
            body = json.loads(reply.read())
            now = time.monotonic()
            for item in body.get("items", []):
                self.seen.setdefault(item["productId"], now)
            time.sleep(0.02)


def _paced(url: str, token: str, tag: str, rate: int, batch: int, clients: int) -> tuple[list[float], float]:
    """`clients` clients post `rate` events/s between them in batches of `batch` for PACED_SECONDS;
    (each probe's lag, the rate achieved)."""
    category = f"{tag}-{int(time.time())}"
    posters = [_Poster(url, token, category) for _ in range(clients)]
    watcher = _Watcher(url, category)
    watcher.start()
    interval = batch * clients / rate
    started = time.monotonic()

    def post(c: int, poster: _Poster) -> None:
        n = 0
        while time.monotonic() - started < PACED_SECONDS:
            n += 1
            poster.post(f"{tag}-{c}-{n}-{category}", batch, probe_qty=n * clients + c)
            pause = started + n * interval - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    threads = [threading.Thread(target=post, args=(c, p)) for c, p in enumerate(posters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    achieved = sum(p.events for p in posters) / (time.monotonic() - started)
    sent = {probe: at for p in posters for probe, at in p.sent.items()}
    _await(watcher, sent)
    return [watcher.seen[p] - t for p, t in sent.items() if p in watcher.seen], achieved


def end_to_end(table: harness.Table, runs: int) -> None:
    """Lag from accept to visible at 2,000 and 20,000 events/s, and the sustained rate from one client."""

    lags: dict[int, tuple[list[float], list[float], list[float]]] = {rate: ([], [], []) for rate, *_ in PACED}
    rates = []
    with harness.services() as url:
        token = harness.ingest_token()
        for run in range(runs):
            for rate, batch, clients in PACED:
                seen, achieved = _paced(url, token, f"paced{rate}-{run}", rate, batch, clients)
                lags[rate][0].append(harness.percentile(seen, 50))
                lags[rate][1].append(harness.percentile(seen, 99))
                lags[rate][2].append(achieved)

            category = f"flood{run}-{int(time.time())}"
            poster = _Poster(url, token, category)
            watcher = _Watcher(url, category)
            watcher.start()
            started = time.monotonic()
            n = 0
            while time.monotonic() - started < FLOOD_SECONDS:
                n += 1
                poster.post(f"flood{run}-{n}-{category}", FLOOD_BATCH, probe_qty=n)
            last = f"probe-flood{run}-{n}-{category}"
            _await(watcher, poster.sent, last=last)
            rates.append(poster.events / (watcher.seen.get(last, time.monotonic()) - started))
            forget_all()
    for rate, *_ in PACED:
        p50, p99, achieved = lags[rate]
        note = f"posted {harness.median(achieved):,.0f} events/s; ticks woken on commit, beat every 2 s"
        table.add(
            f"(a) lag accept→visible in /top at {rate:,} events/s, p50",
            f"{harness.median(p50):.2f} s",
            note=note,
        )
        table.add(
            f"(a) lag accept→visible in /top at {rate:,} events/s, p99",
            f"{harness.median(p99):.2f} s",
            note=f"goal ≤ {PACED_GOALS[rate]} s",
        )
    table.add(
        "(a) sustained events/s, POST (batches of 1,000, one client) to visible",
        f"{harness.median(rates):,.0f} events/s",
    )


def backlog(table: harness.Table, runs: int) -> None:
    """The first tick over the 200,000 demo sales, with the default batch sizes (a backlog grows them)."""
    from django.utils import timezone

    from rankings.engine.tick import tick

    rates, seconds = [], []
    for _ in range(runs):
        harness.reset()
        _seed_demo()
        started = time.perf_counter()
        report = tick(now=timezone.now())
        seconds.append(time.perf_counter() - started)
        rates.append(report.sales / seconds[-1])
    table.add(
        "first tick over a backlog: the 200,000 demo sales, default batch sizes",
        f"{harness.median(rates):,.0f} sales/s",
        note=f"{harness.median(seconds):.1f} s; goal ≥ 50,000 sales/s",
    )


def _await(watcher: "_Watcher", sent: dict[str, float], last: str | None = None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    wanted = {last} if last else set(sent)
    while time.monotonic() < deadline:
        if last and last in watcher.seen:
            break
        if not last and wanted <= set(watcher.seen):
            break
        time.sleep(0.05)
    watcher.stop.set()
    watcher.join()


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    print("engine: coalescing (demo and flash sale)…", flush=True)
    coalescing(table, runs)
    print("engine: the first tick over a backlog…", flush=True)
    backlog(table, runs)
    print("engine: end to end through gunicorn, Celery worker and beat…", flush=True)
    harness.reset()
    _seed_demo()
    from django.utils import timezone

    from rankings.engine.tick import tick

    tick(now=timezone.now())
    end_to_end(table, runs)
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

"""Real processes for the fault suite, and what it measures them with.

A Stack starts gunicorn, Celery workers and beats against this test run's
database and a Redis of the suite's own; a SaleStream posts sales to the web
process from client threads and remembers every event it sent; a Reader asks
the read API over and over and checks every answer; settle() waits until the
write path has caught up, and figures() compares everything with what was sent.
"""

import datetime as dt
import http.client
import json
import random
import threading
import time
from collections import Counter
from pathlib import Path

from django.db import connection

from rankings.engine import store
from rankings.engine.locks import SHARD_NAMESPACE
from rankings.engine.shards import ALL, active, shard_count, shard_of
from rankings.models import Batch, PendingEngagement, PendingSale, Sale, ShardState, TickLog
from rankings.operations.verify import rankings_verify

from .. import processes

# Ticks every half second: four times the production rate, so faults meet many ticks.
TICK_SECONDS = 0.5  # seconds
# The workers' PostgreSQL sessions carry this name, to be found in pg_stat_activity.
WORKER_APPLICATION = "salesrank-fault-worker"


class Stack:
    """gunicorn, Celery workers and beats of one test, each waited on until ready; all stopped at the end."""

    def __init__(self, tmp_path: Path, redis_url: str, **env):
        self.tmp_path = tmp_path
        self.env = processes.django_env(
            REDIS_URL=redis_url, RANKINGS_TICK_SECONDS=TICK_SECONDS, LOG_LEVEL="WARNING", **env
        )
        self.procs: list[processes.Process] = []
        self.url: str | None = None

    def web(self, workers: int = 2) -> str:
        web = processes.web(self.tmp_path, self.env, workers=workers, wait=False)
        self.procs.append(web)
        web.wait_ready()
        self.url = web.address
        return self.url

    def worker(self, name: str) -> processes.Process:
        env = {
            **self.env,
            "DATABASE_URL": self.env["DATABASE_URL"] + f"?application_name={WORKER_APPLICATION}",
        }
        quiet = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        worker = processes.celery_worker(self.tmp_path, env, name=name, args=quiet, wait=False)
        self.procs.append(worker)
        return worker.wait_ready()

    def beat(self, name: str) -> processes.Process:
        beat = processes.celery_beat(self.tmp_path, self.env, name=name, wait=False)
        self.procs.append(beat)
        return beat.wait_ready()

    def wind_down(self, stream: "SaleStream", reader: "Reader") -> tuple[dict, float]:
        """Stop the sales, let the workers catch up, stop reading and Celery; the figures and the catch-up time."""
        stream.stop()
        caught_up = settle(watch=self.running())
        reader.stop()
        self.stop_celery()
        return figures(stream.sent, accepted=stream.replies["accepted"]), caught_up

    def stop_celery(self) -> None:
        """Stop beats first, then workers (a warm shutdown lets a running tick finish)."""
        processes.stop_all(p for p in self.procs if p.kind == "beat")
        processes.stop_all(p for p in self.procs if p.kind == "worker")

    def close(self) -> None:
        """Stop everything still running; gunicorn on SIGTERM takes its workers (and their sessions) along."""
        processes.stop_all(self.procs)

    def running(self) -> list[processes.Process]:
        return [p for p in self.procs if p.alive()]


# --- HTTP ----------------------------------------------------------------------------


def get(host: str, path: str, timeout: float = 10) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, timeout=timeout)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def post_json(conn: http.client.HTTPConnection, path: str, body: dict, token: str) -> tuple[int, bytes]:
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    conn.request("POST", path, json.dumps(body), headers)
    reply = conn.getresponse()
    return reply.status, reply.read()


# --- the stream of sales -------------------------------------------------------------

PRODUCTS = 200
CATEGORIES = 12


def sale_event(rng: random.Random, event_id: str, now: float, spread: float = 3 * 3600) -> dict:
    """A sale of the last `spread` seconds: skewed products, one or two categories."""
    qty = rng.choice((1, 1, 1, 2, 3))
    categories = [f"c{rng.randrange(CATEGORIES)}"]
    if rng.random() < 0.3:
        categories.append(f"c{rng.randrange(CATEGORIES)}")
    return {
        "id": event_id,
        "ts": int(now - rng.uniform(0, spread)),
        "productId": f"p{min(int(rng.paretovariate(0.8)) - 1, PRODUCTS - 1)}",
        "categories": sorted(set(categories)),
        "qty": qty,
        "amount": f"{qty * rng.randrange(100, 5000) / 100:.2f}",
    }


def engagement_event(rng: random.Random, event_id: str, now: float, spread: float = 3 * 3600) -> dict:
    """A view (or, one time in ten, a wish) of the last `spread` seconds, skewed as the sales are; half
    of them carry an id."""
    event = {
        "ts": int(now - rng.uniform(0, spread)),
        "productId": f"p{min(int(rng.paretovariate(0.8)) - 1, PRODUCTS - 1)}",
        "categories": [f"c{rng.randrange(CATEGORIES)}"],
        "kind": "wish" if rng.random() < 0.1 else "view",
    }
    if rng.random() < 0.5:
        event["id"] = event_id
    return event


class _Threads:
    """Threads running self._run(n) until stopped."""

    def _spawn(self, count: int) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(count)]

    def start(self):
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


class SaleStream(_Threads):
    """Client threads posting batches of new sales to the web process until stopped."""

    def __init__(
        self,
        host: str,
        token: str,
        *,
        clients: int = 2,
        batch: int = 40,
        pause: float = 0.02,
        seed=0,
        path: str = "/v1/sales",
        make_event=sale_event,
    ):
        self.host, self.token, self.batch, self.pause = host, token, batch, pause
        self.path, self.make_event = path, make_event
        self.rng = random.Random(seed)
        self.sent: dict[str, dict] = {}
        self.replies = Counter()
        self.statuses = Counter()
        self.retries = 0
        self.accepted_at: list[float] = []  # when each batch was accepted (time.monotonic())
        self._spawn(clients)

    def accepted_between(self, start: float, end: float) -> int:
        """Batches accepted between two instants of time.monotonic()."""
        with self._lock:
            return sum(start <= t <= end for t in self.accepted_at)

    def _run(self, client: int) -> None:
        conn = http.client.HTTPConnection(self.host, timeout=30)
        n = 0
        while not self._stop.is_set():
            with self._lock:
                events = [
                    self.make_event(self.rng, f"s-{client}-{n + i}", time.time()) for i in range(self.batch)
                ]
            n += self.batch
            self._send(conn, events)
            time.sleep(self.pause)
        conn.close()

    def _send(self, conn, events: list[dict]) -> None:
        for attempt in range(20):
            try:
                status, body = post_json(conn, self.path, {"events": events}, self.token)
            except (OSError, http.client.HTTPException):
                conn.close()
                self.retries += 1
                time.sleep(0.1)
                continue
            with self._lock:
                self.statuses[status] += 1
                if status == 200:
                    reply = json.loads(body)
                    self.replies["accepted"] += reply["accepted"]
                    self.replies["duplicates"] += reply["duplicates"]
                    self.replies["rejected"] += len(reply["rejected"])
                    for i, event in enumerate(events):
                        self.sent[event.get("id") or f"{id(events)}-{i}-{time.monotonic_ns()}"] = event
                    self.accepted_at.append(time.monotonic())
                    return
            self.retries += 1
            time.sleep(0.2 * (attempt + 1))  # a 429 or 503: back off, send the same batch again
        raise RuntimeError(f"a batch could not be posted: {self.statuses}")


# --- the reader ----------------------------------------------------------------------

READ_PATHS = [
    "/v1/categories/all/top?window=1h",
    "/v1/categories/all/top?window=30d&metric=revenue&limit=100",
    "/v1/categories/c0/top?window=1d",
    "/v1/products/p0/rank?category=all&window=7d",
    "/v1/products/p1/ranks?window=1d",
    "/v1/products/p2/neighbors?category=all&window=1h&n=3",
    "/v1/categories",
    "/v1/status",
]


class Reader(_Threads):
    """Threads reading the API; every stale answer must be one served fresh before, with its asOf."""

    def __init__(self, host: str, *, threads: int = 2, paths=READ_PATHS):
        self.host, self.paths = host, paths
        self.statuses = Counter()
        self.stale = 0
        self.stale_unknown: list[str] = []  # stale answers never seen fresh: a false asOf
        self.fresh: dict[str, set[str]] = {p: set() for p in paths}
        self.slowest = 0.0
        self.no_as_of: list[float] = []  # when an answer had no asOf (nothing in Redis for it)
        self.marks: list[tuple[float, int, bool, str, float]] = []  # (time, status, stale, path, seconds)
        self._spawn(threads)

    def _run(self, n: int) -> None:
        i = n
        while not self._stop.is_set():
            path = self.paths[i % len(self.paths)]
            i += 1
            started = time.monotonic()
            try:
                status, raw = get(self.host, path, timeout=15)
            except (OSError, http.client.HTTPException):
                status, raw = 0, b""
            elapsed = time.monotonic() - started
            body = json.loads(raw) if status == 200 and raw.startswith(b"{") else None
            with self._lock:
                self.slowest = max(self.slowest, elapsed)
                self.statuses[status] += 1
                stale = bool(body and body.get("stale"))
                self.marks.append((time.monotonic(), status, stale, path, elapsed))
                if body is None or "asOf" not in body:
                    continue
                if body["asOf"] is None:
                    self.no_as_of.append(time.monotonic())
                answer = json.dumps({k: v for k, v in body.items() if k != "stale"}, sort_keys=True)
                if stale:
                    self.stale += 1
                    if answer not in self.fresh[path]:
                        self.stale_unknown.append(f"{path}: {answer[:200]}")
                else:
                    self.fresh[path].add(answer)

    def answered_since(self, start: float, *, fresh: bool = False) -> int:
        """Answers of 200 since an instant of time.monotonic() (with fresh, only those not stale)."""
        with self._lock:
            return sum(
                t >= start and status == 200 and not (fresh and stale) for t, status, stale, *_ in self.marks
            )

    @property
    def server_errors(self) -> int:
        """Answers of 500 and above other than 503 (nothing known while Redis is away), and dropped connections."""
        return sum(n for status, n in self.statuses.items() if status >= 500 and status != 503 or status == 0)


# --- the write path at rest, and the figures -------------------------------------------


def worker_backends() -> list[tuple[int, int | None, bool]]:
    """(pid, open transaction id, holds a shard's tick lock) of every worker session of this database.

    The transaction id is the full 64-bit one (the epoch of the current
    snapshot added), which pg_xact_status can be asked about after the session is gone.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT a.pid,
                   ((pg_snapshot_xmax(pg_current_snapshot())::text::bigint >> 32) << 32)
                     + a.backend_xid::text::bigint,
                   EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory'
                           AND l.classid = %s AND l.granted)
            FROM pg_stat_activity a
            WHERE a.application_name = %s AND a.datname = current_database()
            """,
            [SHARD_NAMESPACE, WORKER_APPLICATION],
        )
        return cursor.fetchall()


def mid_batch() -> tuple[int, int]:
    """(pid, transaction id) of a worker session inside a batch: it has claimed sales it has not committed."""
    return wait_for(
        lambda: next(((pid, xid) for pid, xid, _ in worker_backends() if xid), None),
        timeout=30,
        what="a tick inside a batch",
    )


def transaction_outcome(xid: int, timeout: float = 30) -> str:
    """'committed' or 'aborted', once the transaction is over (a killed client's session ends soon after)."""

    def outcome() -> str | None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_xact_status(%s::text::xid8)", [str(xid)])
            status = cursor.fetchone()[0]
        return None if status == "in progress" else status

    return wait_for(outcome, timeout, interval=0.02, what=f"transaction {xid} to end")


def wait_for(predicate, timeout: float, interval: float = 0.002, what: str = "a condition", watch=()):
    """The first true value of predicate(); fails loudly, with the output of `watch`, if it never comes."""
    return processes.wait_until(predicate, timeout=timeout, interval=interval, what=what, watch=watch)


def redis_caught_up() -> bool:
    """Every shard's state in Redis holds the last batch PostgreSQL committed, with the current generation."""
    version = store.served_version(fresh=True)
    gen = store.patient().get(store.gen_key(version))
    if gen is None:
        return False
    states = dict(ShardState.objects.values_list("shard", "seq"))
    if len(states) < shard_count():
        return False
    for shard, seq in states.items():
        state = store.shard_state(version, shard)
        if state.get("gen") != gen.decode() or state.get("seq") != str(seq):
            return False
    return True


def rebuilt_while_flowing(stack: "Stack", stream: "SaleStream", *, interval: float) -> float:
    """Wait until the ticks have brought Redis level with PostgreSQL again, then until sales are
    still being accepted after that: the instant Redis was level again."""
    wait_for(redis_caught_up, 60, interval=interval, what="the rebuild", watch=stack.running())
    rebuilt = time.monotonic()
    wait_for(
        lambda: stream.accepted_between(rebuilt, time.monotonic()) >= 5, 30, what="sales after the rebuild"
    )
    return rebuilt


def settle(timeout: float = 90, watch=()) -> float:
    """Wait until no sale is pending, every batch is applied and Redis holds it; return the seconds waited."""
    started = time.monotonic()

    def done() -> bool:
        return (
            not PendingSale.objects.exists()
            and not PendingEngagement.objects.exists()
            and not Batch.objects.filter(applied=False).exists()
            and redis_caught_up()
        )

    wait_for(done, timeout, interval=0.05, what="the ticks to catch up", watch=watch)
    return time.monotonic() - started


def figures(sent: dict[str, dict], *, accepted: int) -> dict:
    """Compare the boards and the raw sales with what was sent; the write path must be at rest."""
    report = rankings_verify()
    stored = Sale.objects.count()
    version = store.served_version(fresh=True)
    board = store.board_key(version, shard_of(ALL, active().layout), "30d", "units", ALL)
    units = sum(score for _, score in store.board_read_all(board))
    month_ago = time.time() - 29 * 86400
    expected = sum(e["qty"] for e in sent.values() if e["ts"] >= month_ago)
    return {
        "events": len(sent),
        "accepted": accepted,
        "stored": stored,
        "lost": max(0, len(sent) - stored) + max(0, expected - units),
        "double counts": max(0, stored - len(sent)) + max(0, units - expected),
        "all/30d units": units,
        "units sent": expected,
        "boards": report.boards,
        "board differences": len(report.differences),
        "ticks": TickLog.objects.count(),
        "_differences": "\n".join(d.describe() for d in report.differences[:5]),
    }


def assert_exact(result: dict) -> None:
    assert result["board differences"] == 0, result["_differences"]
    assert result["stored"] == result["events"] == result["accepted"], result
    assert result["all/30d units"] == result["units sent"], result
    assert result["lost"] == 0 and result["double counts"] == 0, result


def show(title: str, result: dict) -> None:
    shown = ", ".join(f"{k}: {v}" for k, v in result.items() if not k.startswith("_"))
    print(f"\n[faults] {title}: {shown}")


def token_for_ingest() -> str:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    from rankings.operations.tokens import token_create

    user = get_user_model().objects.create_user(f"fault-{time.monotonic_ns()}")
    user.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["add_sale", "add_engagement"], content_type__app_label="rankings"
        )
    )
    return token_create(user=user)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)

"""The tick: bring every shard's boards to `now`, each shard under its own advisory lock.

A tick takes each shard whose lock is free (one another tick holds is reported busy and left to
it) and works it with batches.tick_shard until its queue is empty. A backlog over several shards
is ticked in TICK_THREADS threads, each on a connection of its own that holds the lock of the shard
it works. A shard whose work raises is rolled back, logged and retried with a growing wait; the
other shards tick on. The version written is read under the shard's lock, so a switch-over (which
holds every shard's lock) is never missed.
"""

import collections
import datetime as dt
import logging
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields

from celery.exceptions import SoftTimeLimitExceeded
from django.db import connection
from django.utils import timezone

from rankings.conf import rankings_settings
from rankings.engine import batches, locks, store
from rankings.engine.counts import histogram_observe
from rankings.engine.shards import ALL, ActiveVersion, active, layout_checked
from rankings.models import RankingVersion, ShardState, TickLog

log = logging.getLogger(__name__)


# A failing shard's error is kept this long on its row (a traceback can be huge).
ERROR_TEXT_KEPT = 500  # characters

# The histogram of tick durations /metrics serves (salesrank_tick_duration_seconds): upper bounds
# from a quiet tick's few milliseconds to the task's time limit (a minute).
TICK_SECONDS = "tick_seconds"
TICK_SECONDS_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)  # seconds

# Not a shard's failure but the whole tick's: the task's time is up.
_NOT_ISOLATED = (SoftTimeLimitExceeded,)


class ClockWentBackwards(ValueError):
    pass


@dataclass(kw_only=True)
class TickReport(batches.Tally):
    """What a tick did: its shards' batches counted, and which shards it ticked or left."""

    as_of: dt.datetime
    ticked_shards: list[int] = field(default_factory=list)
    busy_shards: list[int] = field(default_factory=list)
    failed_shards: list[int] = field(default_factory=list)
    backing_off_shards: list[int] = field(default_factory=list)
    duration_ms: float = 0.0

    def merge(self, other: "TickReport") -> None:
        """Add another part of the same tick (its shards ticked in another thread)."""
        for counted in fields(batches.Tally):
            setattr(self, counted.name, getattr(self, counted.name) + getattr(other, counted.name))
        for name in ("ticked_shards", "busy_shards", "failed_shards", "backing_off_shards"):
            getattr(self, name).extend(getattr(other, name))
            getattr(self, name).sort()


def tick(
    *, now: dt.datetime | None = None, log_tick: bool = True, shards: Iterable[int] | None = None
) -> TickReport:
    """Aggregate every pending sale and expire buckets, as of `now` (default: the clock).

    With `shards`, only those shards: each worker of a fanned-out tick brings its own up to
    `now` and never waits for another's. A shard the active version does not have (it was
    resharded since the caller chose) is skipped.
    """
    store.eviction_policy_check()
    started = timezone.now()
    clock = time.perf_counter()
    now = now or started
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    # Refused before anything is claimed while the setting disagrees (see shards.layout_checked).
    _, layout = layout_checked()
    selected = list(range(layout.shards)) if shards is None else sorted(set(shards))
    # These shards' clocks only: another worker's, on another machine's clock, may be a little ahead.
    with connection.cursor() as cursor:
        cursor.execute("SELECT max(as_of) FROM rankings_shardstate WHERE shard = ANY(%s)", [selected])
        (latest,) = cursor.fetchone()
    if latest is not None and now < latest:
        raise ClockWentBackwards(f"now ({now.isoformat()}) is before the last tick ({latest.isoformat()})")

    report = TickReport(as_of=now)
    if _side_by_side(selected):
        _tick_threads(selected, first=layout.shards_of(ALL), now=now, report=report)
    else:
        _tick_shards(iter(selected), now=now, report=report)
    report.duration_ms = (time.perf_counter() - clock) * 1000
    if log_tick:
        TickLog.objects.create(
            started_at=started,
            as_of=now,
            duration_ms=report.duration_ms,
            sales=report.sales,
            batches=report.batches,
            redis_writes=report.redis_writes,
            too_old=report.too_old,
            rebuilt_shards=report.rebuilt_shards,
            shards=report.ticked_shards,
        )
        histogram_observe(TICK_SECONDS, TICK_SECONDS_BOUNDS, report.duration_ms / 1000)
    return report


def _side_by_side(shards: list[int]) -> bool:
    """Whether a tick of `shards` ticks them in threads: a backlog (TICK_PARALLEL_FROM pending
    rows or more) over several shards, outside a transaction (a thread's connection would not see
    its uncommitted sales)."""
    if min(rankings_settings.TICK_THREADS, len(shards)) < 2 or connection.in_atomic_block:
        return False
    with connection.cursor() as cursor:
        cursor.execute(_BACKLOG, {"shards": shards, "most": rankings_settings.TICK_PARALLEL_FROM})
        (pending,) = cursor.fetchone()
    return pending >= rankings_settings.TICK_PARALLEL_FROM


# The rows pending on some shards, counted up to `most` in each queue.
_BACKLOG = """
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM rankings_pendingsale WHERE shard = ANY(%(shards)s) LIMIT %(most)s) AS sales)
     + (SELECT count(*) FROM (
            SELECT 1 FROM rankings_pendingengagement WHERE shard = ANY(%(shards)s) LIMIT %(most)s) AS engaged)
"""


def _tick_threads(shards: list[int], *, first: list[int], now: dt.datetime, report: TickReport) -> None:
    """Tick `shards` side by side, TICK_THREADS at a time, `first` first (the shards of `all`, where
    every sale counts: the longest).

    This thread looks whether each shard's lock is free before a worker thread is given it: a shard
    another tick holds costs no thread and no connection. The worker takes the shard's lock on its
    own connection, the one doing the shard's work, and holds it until the shard is done; should
    another tick have taken it meanwhile, the worker leaves it as busy. So the lock lives as long as
    the work, whatever becomes of this thread's session. A worker starts only when a free shard
    finds every one busy, and ticks on a connection of its own, opened at its first shard and closed
    at its end; so a tick opens at most one connection per shard found free, and at most
    TICK_THREADS. Should the tick be cut short (its time is up, or a worker raised), each worker
    finishes the shard it is on, and no other is given out."""
    todo = collections.deque(sorted(shards, key=lambda shard: shard not in first))
    work: queue.SimpleQueue[int | None] = queue.SimpleQueue()  # free shards; None: stop
    done: queue.SimpleQueue[tuple[int, TickReport | BaseException]] = queue.SimpleQueue()
    workers: list[threading.Thread] = []
    given: set[int] = set()  # shards given to a worker, until it is done with them
    failure: BaseException | None = None

    def worker() -> None:
        pointed: set[tuple[int, int]] = set()
        try:
            for shard in iter(work.get, None):
                own = TickReport(as_of=now)
                try:
                    _tick_shard_locked(shard, now=now, report=own, pointed=pointed)
                except BaseException as error:
                    done.put((shard, error))
                else:
                    done.put((shard, own))
        finally:
            connection.close()

    def settle_one() -> None:
        nonlocal failure
        shard, outcome = done.get()
        given.discard(shard)
        if isinstance(outcome, BaseException):
            failure = failure or outcome
        else:
            report.merge(outcome)

    most = min(rankings_settings.TICK_THREADS, len(shards))
    try:
        while todo and failure is None:
            if len(given) == most:
                settle_one()
                continue
            shard = todo.popleft()
            if not locks.shard_free(shard):
                report.busy_shards.append(shard)
                continue
            given.add(shard)
            work.put(shard)
            if len(workers) < len(given):
                workers.append(threading.Thread(target=worker, name=f"tick_{len(workers)}"))
                workers[-1].start()
    except BaseException as error:
        failure = failure or error
    finally:
        for _ in workers:
            work.put(None)
        for thread in workers:
            thread.join()
        while not done.empty():
            settle_one()
    report.busy_shards.sort()
    if failure is not None:
        raise failure


def _tick_shards(shards: Iterator[int], *, now: dt.datetime, report: TickReport) -> None:
    """Tick each of `shards` whose lock is free, one after another, on this thread's connection."""
    pointed: set[tuple[int, int]] = set()
    for shard in shards:
        _tick_shard_locked(shard, now=now, report=report, pointed=pointed)


def _tick_shard_locked(
    shard: int, *, now: dt.datetime, report: TickReport, pointed: set[tuple[int, int]]
) -> None:
    """Tick the shard under its lock, taken on this thread's connection; a shard whose lock another
    session holds is left as busy."""
    with locks.shard_try_lock(shard) as acquired:
        if not acquired:
            report.busy_shards.append(shard)
            return
        _tick_shard_isolated(shard=shard, now=now, report=report, pointed=pointed)


def _tick_shard_isolated(
    *, shard: int, now: dt.datetime, report: TickReport, pointed: set[tuple[int, int]]
) -> None:
    """Tick one shard (its lock held); an error fails this shard only, which then waits to retry.
    `pointed`: the (version, switch) pairs this tick has already pointed Redis's readers at."""
    # Read under the lock: a switch holds every shard's lock, so it is either seen whole or not yet,
    # and a switch to fewer shards leaves none to tick past the new count.
    (version, epoch, layout), state = _shard_read(shard)
    if shard >= layout.shards:
        return
    if state is None:  # its first tick
        state, _ = ShardState.objects.get_or_create(shard=shard)
    if state.retry_at is not None and timezone.now() < state.retry_at:
        report.backing_off_shards.append(shard)
        return
    try:
        if (version, epoch) not in pointed:
            store.active_ensure(version, epoch)
            store.shard_layout_set(version, layout.shards, layout.pinned)
            pointed.add((version, epoch))
        batches.tick_shard(state=state, layout=layout, version=version, now=now, report=report)
    except _NOT_ISOLATED:
        raise
    except Exception as error:
        _shard_failed(shard, error)
        report.failed_shards.append(shard)
        return
    report.ticked_shards.append(shard)
    if state.failures:
        ShardState.objects.filter(shard=shard).update(failures=0, last_error="", retry_at=None)
        log.warning("shard %s ticks again after %s failures", shard, state.failures)


# The active version and the shard's state, in one round trip (the first of every shard tick).
_SHARD_READ = f"""
WITH active AS ({RankingVersion.ACTIVE_ROW_SQL})
SELECT active.*, s.seq, s.as_of, s.failures, s.retry_at
FROM active LEFT JOIN rankings_shardstate s ON s.shard = %s
"""


def _shard_read(shard: int) -> tuple[ActiveVersion, ShardState | None]:
    """The active version and the shard's state (None before its first tick), in one read."""
    with connection.cursor() as cursor:
        cursor.execute(_SHARD_READ, [shard])
        row = cursor.fetchone()
    if row is None:  # a fresh install: version 1 is recorded here
        return active(), None
    seq, as_of, failures, retry_at = row[4:]
    state = (
        ShardState(shard=shard, seq=seq, as_of=as_of, failures=failures, retry_at=retry_at)
        if seq is not None
        else None
    )
    return ActiveVersion.of_row(row), state


def _shard_failed(shard: int, error: Exception) -> None:
    """Record the failure and when to retry: the wait doubles with each consecutive failure."""
    log.error("tick of shard %s failed; other shards go on", shard, exc_info=error)
    state = ShardState.objects.get(shard=shard)
    failures = state.failures + 1
    wait = min(
        rankings_settings.SHARD_RETRY_SECONDS * 2 ** min(failures - 1, 30),
        rankings_settings.SHARD_RETRY_MAX_SECONDS,
    )
    text = f"{type(error).__name__}: {error}".strip()[:ERROR_TEXT_KEPT]
    ShardState.objects.filter(shard=shard).update(
        failures=failures, last_error=text, retry_at=timezone.now() + dt.timedelta(seconds=wait)
    )


def shards_failing() -> list[dict]:
    """The shards whose last tick failed: how often in a row, the error, and when they retry."""
    return [
        {"shard": shard, "failures": failures, "error": error, "retryAt": retry_at}
        for shard, failures, error, retry_at in ShardState.objects.filter(failures__gt=0)
        .order_by("shard")
        .values_list("shard", "failures", "last_error", "retry_at")
    ]


def shards_pending(shards: Iterable[int]) -> list[int]:
    """Those of `shards` with a sale or engagement event in their queue (committed, not yet claimed)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s FROM unnest(%s::smallint[]) AS s"
            " WHERE EXISTS (SELECT 1 FROM rankings_pendingsale WHERE shard = s)"
            " OR EXISTS (SELECT 1 FROM rankings_pendingengagement WHERE shard = s)",
            [sorted(set(shards))],
        )
        return [shard for (shard,) in cursor.fetchall()]

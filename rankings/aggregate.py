"""The tick: claim pending sales, fold them into buckets, apply the net change to Redis.

For each shard, under that shard's advisory lock, a tick repeats until the
shard's queue is empty:

1. In one PostgreSQL transaction: claim up to BATCH_SIZE pending sales
   (DELETE … FOR UPDATE SKIP LOCKED: no cursor, nothing skipped or repeated),
   compute the net change of every board as the clock moves from the shard's
   last instant to `now` — the claimed sales inside each window, plus the
   buckets that entered it, minus the buckets that left it, all read before
   the claimed sales are folded in — then fold the claimed sales into the
   buckets, and record the change with the next batch sequence number.
2. Apply the change to Redis in one Lua call that checks the sequence number,
   so a batch replayed after a crash is a no-op; then mark it applied.

Because the change is computed as the difference between two whole windows,
additions and expiry can never be applied in the wrong order (seed 000 §6.3).
"""

import datetime as dt
import logging
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.utils import timezone

from catalogue.models import ALL, shard_of

from . import store
from .conf import METRICS, rankings_settings
from .models import Batch, RankingVersion, ShardState, TickLog
from .windows import bucket_sizes, oldest_bucket_start

log = logging.getLogger(__name__)

# Namespace for this engine's advisory locks, so they never collide with another application's.
LOCK_NAMESPACE = 0x5A1E5


class ClockWentBackwards(ValueError):
    pass


@dataclass
class TickReport:
    now: dt.datetime
    sales: int = 0
    batches: int = 0
    redis_writes: int = 0
    too_old: int = 0
    rebuilt_shards: int = 0
    busy_shards: list[int] = field(default_factory=list)
    duration_ms: float = 0.0


def _epoch(value: dt.datetime) -> float:
    return value.timestamp()


def tick(*, now: dt.datetime | None = None, log_tick: bool = True) -> TickReport:
    """Aggregate every pending sale and expire buckets, as of `now` (default: the clock)."""
    started = timezone.now()
    clock = time.perf_counter()
    now = now or started
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    latest = (
        ShardState.objects.filter(now__isnull=False).order_by("-now").values_list("now", flat=True).first()
    )
    if latest is not None and now < latest:
        raise ClockWentBackwards(f"now ({now.isoformat()}) is before the last tick ({latest.isoformat()})")

    version = _write_version()
    gen = store.generation(version)
    report = TickReport(now=now)
    for shard in range(rankings_settings.SHARDS):
        with _shard_lock(shard) as acquired:
            if not acquired:
                report.busy_shards.append(shard)
                continue
            _tick_shard(shard=shard, version=version, gen=gen, now=now, report=report)
    report.duration_ms = (time.perf_counter() - clock) * 1000
    if log_tick:
        TickLog.objects.create(
            started_at=started,
            now=now,
            duration_ms=report.duration_ms,
            sales=report.sales,
            batches=report.batches,
            redis_writes=report.redis_writes,
            too_old=report.too_old,
            rebuilt_shards=report.rebuilt_shards,
        )
    return report


def _write_version() -> int:
    """PostgreSQL decides which version ticks write; Redis's pointer for readers follows it."""
    version = RankingVersion.active_number()
    store.active_ensure(version)
    return version


@contextmanager
def _shard_lock(shard: int):
    """One tick at a time per shard: a session-level advisory lock, released even on error."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_NAMESPACE, shard])
        (acquired,) = cursor.fetchone()
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_NAMESPACE, shard])


@contextmanager
def shard_locked(shard: int, *, timeout: str = "30s"):
    """Wait for the shard's tick lock (a running tick finishes its batch first), hold it, release it."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET lock_timeout = '{timeout}'")
        try:
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", [LOCK_NAMESPACE, shard])
        finally:
            cursor.execute("SET lock_timeout = 0")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_NAMESPACE, shard])


def _tick_shard(*, shard: int, version: int, gen: str, now: dt.datetime, report: TickReport) -> None:
    ShardState.objects.get_or_create(shard=shard)
    for batch in Batch.objects.filter(shard=shard, applied=False).order_by("seq"):
        _apply(batch=batch, version=version, gen=gen, report=report)
    if store.shard_generation(version, shard) != gen:
        shard_rebuild(shard=shard, version=version, gen=gen)
        report.rebuilt_shards += 1
    limit = rankings_settings.BATCH_SIZE
    while True:
        with transaction.atomic():
            state = ShardState.objects.select_for_update().get(shard=shard)
            if state.now is not None and now < state.now:
                return  # a concurrent tick with a later clock has already passed this shard
            claimed = _claim(shard=shard, limit=limit)
            if claimed == 0 and state.now == now:
                return
            changes, too_old = _changes(shard=shard, old_now=state.now, new_now=now)
            _fold(shard=shard)
            state.now = now
            state.too_old += too_old
            batch = None
            if claimed or changes:
                state.seq += 1
                batch = Batch.objects.create(
                    shard=shard,
                    seq=state.seq,
                    now=now,
                    changes=[[c.window, c.metric, c.category, c.product_id, c.delta] for c in changes],
                    sales=claimed,
                )
            state.save()
        report.sales += claimed if shard == shard_of(ALL, rankings_settings.SHARDS) else 0
        report.too_old += too_old
        if batch is not None:
            report.batches += 1
            _apply(batch=batch, version=version, gen=gen, report=report)
        elif not store.shard_touch(version=version, shard=shard, seq=state.seq, asof=_epoch(now), gen=gen):
            shard_rebuild(shard=shard, version=version, gen=gen)
            report.rebuilt_shards += 1
        if claimed < limit:
            return


def _apply(*, batch: Batch, version: int, gen: str, report: TickReport) -> None:
    """Apply a recorded batch to Redis (again, if need be), then mark it applied."""
    outcome = batch_replay(batch=batch, version=version, gen=gen)
    if outcome < 0:
        shard_rebuild(shard=batch.shard, version=version, gen=gen)
        report.rebuilt_shards += 1
    elif outcome > 0:
        report.redis_writes += len(batch.changes)
    Batch.objects.filter(shard=batch.shard, seq=batch.seq).update(applied=True)


def batch_replay(*, batch: Batch, version: int, gen: str) -> int:
    """Apply one recorded batch to a version; see store.batch_apply for the outcome."""
    return store.batch_apply(
        version=version,
        shard=batch.shard,
        seq=batch.seq,
        asof=_epoch(batch.now),
        gen=gen,
        changes=[store.Change(*row) for row in batch.changes],
    )


# Dropped first as well: inside an enclosing transaction (a savepoint) ON COMMIT has not fired yet.
_FACTS_TABLE = """
DROP TABLE IF EXISTS pg_temp.tick_facts;
CREATE TEMPORARY TABLE tick_facts (
    category varchar(50), product_id varchar(64), t bigint, qty bigint, cents bigint
) ON COMMIT DROP
"""

_CLAIM = """
WITH claimed AS (
    DELETE FROM rankings_pendingsale p
    WHERE p.shard = %(shard)s AND p.sale_id IN (
        SELECT sale_id FROM rankings_pendingsale WHERE shard = %(shard)s
        ORDER BY sale_id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
    )
    RETURNING p.sale_id, p.counted_at
), sales AS (
    SELECT s.product_id, s.categories, floor(extract(epoch FROM s.counted_at))::bigint AS t,
           s.qty, CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END AS amount_cents
    -- The claimed months' range lets PostgreSQL skip every other partition of the sales
    -- table, whether it looks each sale up or hashes the claim against the months.
    FROM rankings_sale s JOIN claimed ON s.id = claimed.sale_id AND s.counted_at = claimed.counted_at
    WHERE s.counted_at BETWEEN (SELECT min(counted_at) FROM claimed) AND (SELECT max(counted_at) FROM claimed)
), facts AS (
    SELECT c.slug AS category, s.product_id, s.t, s.qty, s.amount_cents
    FROM sales s CROSS JOIN LATERAL unnest(s.categories) AS u(slug)
    JOIN catalogue_category c ON c.slug = u.slug AND c.shard = %(shard)s
    UNION ALL
    SELECT %(all)s, s.product_id, s.t, s.qty, s.amount_cents FROM sales s WHERE %(has_all)s
), counted AS (
    INSERT INTO tick_facts SELECT * FROM facts
)
SELECT count(*) FROM claimed
"""


def _claim(*, shard: int, limit: int) -> int:
    """Move up to `limit` of the shard's pending sales into tick_facts; return how many."""
    has_all = shard == shard_of(ALL, rankings_settings.SHARDS)
    with connection.cursor() as cursor:
        cursor.execute(_FACTS_TABLE)
        cursor.execute(_CLAIM, {"shard": shard, "limit": limit, "all": ALL, "has_all": has_all})
        (claimed,) = cursor.fetchone()
        # Statistics for the planner: without them it guesses the batch's size and groups badly.
        cursor.execute("ANALYZE tick_facts")
    return claimed


_BUCKET_SUMS = """
SELECT category, product_id, sum(units)::bigint, sum(revenue_cents)::bigint FROM rankings_bucket
WHERE shard = %s AND size = %s AND start BETWEEN %s AND %s
GROUP BY category, product_id
"""

_FACT_SUMS = """
SELECT category, product_id, sum(qty)::bigint, sum(cents)::bigint FROM tick_facts
WHERE t >= %s AND t < %s GROUP BY category, product_id
"""


def _changes(
    *, shard: int, old_now: dt.datetime | None, new_now: dt.datetime
) -> tuple[list[store.Change], int]:
    """The net change of every board of the shard; read before the claimed sales are folded."""
    new_t = int(_epoch(new_now))
    old_t = int(_epoch(old_now)) if old_now is not None else None
    net: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    windows = rankings_settings.windows.values()
    with connection.cursor() as cursor:
        for w in windows:
            left, entered = w.transition(old_t, new_t)
            for bucket_range, sign in ((left, -1), (entered, +1)):
                if bucket_range is None:
                    continue
                cursor.execute(_BUCKET_SUMS, [shard, w.bucket_seconds, *bucket_range])
                for category, product_id, units, cents in cursor.fetchall():
                    totals = net[(w.name, category, product_id)]
                    totals[0] += sign * units
                    totals[1] += sign * cents
            first, last = w.bounds(new_t)
            cursor.execute(_FACT_SUMS, [first, last + w.bucket_seconds])
            for category, product_id, units, cents in cursor.fetchall():
                totals = net[(w.name, category, product_id)]
                totals[0] += units
                totals[1] += cents
        too_old = 0
        if shard == shard_of(ALL, rankings_settings.SHARDS):
            cursor.execute(
                "SELECT count(*) FROM tick_facts WHERE category = %s AND t < %s",
                [ALL, oldest_bucket_start(windows, new_t)],
            )
            (too_old,) = cursor.fetchone()
    changes = [
        store.Change(window, metric, category, product_id, value)
        for (window, category, product_id), values in net.items()
        for metric, value in zip(METRICS, values, strict=True)
        if value != 0
    ]
    return changes, too_old


_FOLD = """
INSERT INTO rankings_bucket AS b (size, start, category, product_id, shard, units, revenue_cents)
SELECT sizes.size, t - ((t %% sizes.size) + sizes.size) %% sizes.size, category, product_id, %(shard)s,
       sum(qty), sum(cents)
FROM tick_facts CROSS JOIN unnest(%(sizes)s::integer[]) AS sizes(size)
GROUP BY 1, 2, category, product_id
ON CONFLICT (size, category, start, product_id) DO UPDATE
SET units = b.units + excluded.units, revenue_cents = b.revenue_cents + excluded.revenue_cents
"""


def _fold(*, shard: int) -> None:
    """Add the claimed sales to their buckets, every bucket size at once: one upsert per batch."""
    sizes = bucket_sizes(rankings_settings.windows.values())
    with connection.cursor() as cursor:
        cursor.execute(_FOLD, {"sizes": sizes, "shard": shard})


def shard_rebuild(*, shard: int, version: int, gen: str) -> None:
    """Rewrite every board of a shard from the PostgreSQL buckets, as of the shard's instant.

    The caller holds the shard's lock. Used when Redis lost the shard's data.
    """
    with transaction.atomic():
        state = ShardState.objects.select_for_update().get(shard=shard)
        boards: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)
        if state.now is not None:
            now_t = int(_epoch(state.now))
            with connection.cursor() as cursor:
                for w in rankings_settings.windows.values():
                    first, last = w.bounds(now_t)
                    cursor.execute(_BUCKET_SUMS, [shard, w.bucket_seconds, first, last])
                    for category, product_id, units, cents in cursor.fetchall():
                        boards[(w.name, "units", category)][product_id] = units
                        boards[(w.name, "revenue", category)][product_id] = cents
        asof = _epoch(state.now) if state.now else 0.0
        store.shard_replace(version=version, shard=shard, seq=state.seq, asof=asof, gen=gen, boards=boards)
        Batch.objects.filter(shard=shard, seq__lte=state.seq, applied=False).update(applied=True)
    # A shard that never ticked has nothing to lose; any other was lost by Redis.
    (log.warning if state.now is not None else log.info)(
        "rebuilt shard %s of version %s from buckets", shard, version
    )

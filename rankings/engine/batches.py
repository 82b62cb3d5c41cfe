"""A shard's batches: claim pending sales, fold them into buckets, apply the net change to Redis.

The caller (the tick, a switch-over, a clock reset) holds the shard's advisory lock. A shard is
brought to `now` a batch at a time:

1. In one PostgreSQL transaction: claim about BATCH_SIZE pending sales
   (DELETE … RETURNING of the rows it sees: no cursor, nothing skipped or repeated),
   compute the net change of every board as the clock moves from the shard's
   last instant to `now` — the claimed sales inside each window, plus the
   buckets that entered it, minus the buckets that left it, all read before
   the claimed sales are folded in — then fold the claimed sales into the
   buckets, and record the change with the next batch sequence number.
2. Apply the change to Redis in one Lua call that checks the sequence number,
   so a batch replayed after a crash is a no-op; then mark it applied. A change
   larger than MAX_BATCH_CHANGES is recorded as several batches (steps) with
   consecutive numbers in the same transaction and applied one call each.

Because the change is computed as the difference between two whole windows,
additions and expiry can never be applied in the wrong order (expiring first would subtract
old buckets before a batch's sales of those very hours are added, leaving expired sales on the
board).
"""

import datetime as dt
import logging
from collections import defaultdict
from dataclasses import dataclass

from django.db import connection, transaction

from rankings.conf import METRICS, rankings_settings
from rankings.engine import locks, snapshots, store
from rankings.engine.buckets import bucket_sums
from rankings.engine.prune import bucket_cutoff
from rankings.engine.shards import ALL, Layout, active, shard_count_checked
from rankings.engine.windows import bucket_sizes, configured_windows, oldest_bucket_start
from rankings.models import Batch, ShardState

log = logging.getLogger(__name__)


# PostgreSQL's memory for one sort or hash of a tick's transaction (a claim of BATCH_SIZE
# sales and its fold each need a few tens of MB).
TICK_WORK_MEM = "64MB"


@dataclass
class Tally:
    """What a shard's batches did, counted into the tick's report."""

    sales: int = 0
    engagements: int = 0
    batches: int = 0
    redis_writes: int = 0
    too_old: int = 0
    rebuilt_shards: int = 0


def _epoch(value: dt.datetime) -> float:
    return value.timestamp()


def _write_version() -> tuple[int, Layout]:
    """The version ticks write and its layout. PostgreSQL decides; Redis's pointer for readers
    follows it, unless it already names a later switch (then this caller is the stale one)."""
    version, epoch, layout = active()
    store.active_ensure(version, epoch)
    return version, layout


def tick_shard(*, state: ShardState, layout: Layout, version: int, now: dt.datetime, report: Tally) -> None:
    """Bring one shard's boards to `now`, a batch of claimed sales at a time (see _tick_to)."""
    shard = state.shard
    gen = _redis_recover(shard=shard, recorded=state.seq, version=version, report=report)
    # Each hour boundary crossed: first to the boundary with what counts by then, its snapshots, on.
    snapshots.take_crossed(
        shard=shard,
        layout=layout,
        version=version,
        as_of=state.as_of,
        now=now,
        step=lambda at: _tick_to(
            shard=shard, layout=layout, version=version, gen=gen, now=at, until=at, report=report
        ),
    )
    _tick_to(shard=shard, layout=layout, version=version, gen=gen, now=now, until=None, report=report)


def _tick_to(
    *,
    shard: int,
    layout: Layout,
    version: int,
    gen: str,
    now: dt.datetime,
    until: dt.datetime | None,
    report: Tally,
) -> None:
    """Claim the shard's pending sales (only those counted at or before `until`, if given) and bring
    its boards to `now`, a batch of up to BATCH_SIZE at a time: a backlog is taken whole when it
    fits, so each board member it touches is written to Redis once, not once per small batch."""
    limit = rankings_settings.BATCH_SIZE
    while True:
        step = _claim_and_record(shard=shard, layout=layout, now=now, limit=limit, until=until)
        if step is None:
            return
        _apply_step(step, shard=shard, layout=layout, version=version, gen=gen, now=now, report=report)
        if max(step.claimed, step.engaged_rows) < limit:
            return


@dataclass
class _Step:
    """One committed transaction of a tick: the sales it claimed and the batches it recorded."""

    claimed: int
    engaged: int  # engagement events claimed
    engaged_rows: int  # in this many rows of their queue
    too_old: int
    seq: int  # the shard's batch sequence number after it
    batches: list[Batch]


def _redis_recover(*, shard: int, recorded: int, version: int, report: Tally) -> str:
    """Make sure Redis holds the shard's boards as of batch `recorded` (PostgreSQL's last) and
    return the version's generation. Most ticks it does: one round trip. Else apply the batches
    recorded but not applied (a tick stopped between its commit and Redis), and rebuild the shard's
    boards should Redis have lost them: all (no state, or another generation), or its last writes
    (a seq below `recorded`, after a failover to a replica that had not received them, or a
    restart from an older snapshot). The caller holds the shard's lock."""
    gen, held = store.shard_open(version, shard)
    if _holds(held, gen, recorded):
        return gen
    for batch in Batch.objects.filter(shard=shard, applied=False).order_by("seq"):
        _apply(batch=batch, version=version, gen=gen, report=report)
    held = store.shard_state(version, shard)
    if _holds(held, gen, recorded):
        return gen
    if held.get("gen") == gen:
        log.warning(
            "Redis holds batch %s of shard %s, PostgreSQL %s: Redis lost its last writes",
            held.get("seq"),
            shard,
            recorded,
        )
    shard_rebuild(shard=shard, version=version, gen=gen)
    report.rebuilt_shards += 1
    return gen


def _holds(held: dict[str, str], gen: str, recorded: int) -> bool:
    """Whether Redis's state of a shard (`held`) is of generation `gen` and batch `recorded` or later."""
    return held.get("gen") == gen and int(held.get("seq") or 0) >= recorded


def _claim_and_record(
    *, shard: int, layout: Layout, now: dt.datetime, limit: int, until: dt.datetime | None = None
) -> _Step | None:
    """In one transaction: claim pending sales, compute the boards' net change, fold the sales into
    their buckets and record the change as batches. None when the shard has nothing to do."""
    params = {"shard": shard, "limit": limit, "until": until}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_OPEN, params)
        state = cursor.fetchone()
        if state is None:
            raise ShardState.DoesNotExist(f"shard {shard} has no state: it is made on the shard's first tick")
        seq, as_of = state
        cursor.nextset()
        last, engagements_wait = cursor.fetchone()
        if as_of is not None and now < as_of:
            return None  # a concurrent tick with a later clock has already passed this shard
        claimed = _claim(cursor, params, last=last) if last is not None else 0
        engaged_rows, engaged = _claim_engagements(cursor, params) if engagements_wait else (0, 0)
        if claimed == 0 and engaged == 0 and as_of == now:
            return None
        facts = claimed + engaged_rows
        if facts >= FACTS_ANALYZED_FROM:
            cursor.execute("ANALYZE tick_facts")
        changes, too_old = _changes(
            cursor, shard=shard, layout=layout, old_now=as_of, new_now=now, facts=facts
        )
        if facts:
            _fold(cursor, shard=shard, now=now)
        batches = (
            _record(shard=shard, seq=seq, as_of=as_of, changes=changes, claimed=claimed, now=now)
            if claimed or engaged or changes
            else []
        )
        seq += len(batches)
        cursor.execute(
            "UPDATE rankings_shardstate SET seq = %s, as_of = %s, too_old = too_old + %s WHERE shard = %s",
            [seq, now, too_old, shard],
        )
    return _Step(
        claimed=claimed,
        engaged=engaged,
        engaged_rows=engaged_rows,
        too_old=too_old,
        seq=seq,
        batches=batches,
    )


def _record(
    *,
    shard: int,
    seq: int,
    as_of: dt.datetime | None,
    changes: list[store.Change],
    claimed: int,
    now: dt.datetime,
) -> list[Batch]:
    """Log the change as batches numbered after `seq`, the shard's last (as of `as_of`)."""
    steps = _steps(changes)
    batches = [
        Batch(
            shard=shard,
            seq=seq + i + 1,
            # Readers are told the new instant only when every step is in.
            as_of=now if i == len(steps) - 1 or as_of is None else as_of,
            changes=step,
            sales=claimed if i == len(steps) - 1 else 0,
        )
        for i, step in enumerate(steps)
    ]
    Batch.objects.bulk_create(batches)
    return batches


def _apply_step(
    step: _Step, *, shard: int, layout: Layout, version: int, gen: str, now: dt.datetime, report: Tally
) -> None:
    """Apply a committed step's batches to Redis; with none, move the shard's instant on all the same."""
    # Every sale is queued once on the shard of `all` (of its part, when `all` is split).
    report.sales += step.claimed if shard in layout.shards_of(ALL) else 0
    report.engagements += step.engaged if shard in layout.shards_of(ALL) else 0
    report.too_old += step.too_old
    for batch in step.batches:
        report.batches += 1
        _apply(batch=batch, version=version, gen=gen, report=report)
    if not step.batches and not store.shard_touch(
        version=version, shard=shard, seq=step.seq, as_of=_epoch(now), gen=gen
    ):
        shard_rebuild(shard=shard, version=version, gen=gen)
        report.rebuilt_shards += 1


def _steps(changes: list[store.Change]) -> list[list[store.Change]]:
    """The changes, a window and category's side by side (as _changes gives them), cut into steps
    of at most MAX_BATCH_CHANGES: a board's changes are kept together where they fit (fewer blobs
    rewritten); always at least one step, possibly empty."""
    limit = rankings_settings.MAX_BATCH_CHANGES
    return [changes[i : i + limit] for i in range(0, len(changes), limit)] or [[]]


def _apply(*, batch: Batch, version: int, gen: str, report: Tally) -> None:
    """Apply a recorded batch to Redis (again, if need be), then mark it applied."""
    outcome = batch_replay(batch=batch, version=version, gen=gen)
    if outcome < 0:
        shard_rebuild(shard=batch.shard, version=version, gen=gen)
        report.rebuilt_shards += 1
    elif outcome > 0:
        report.redis_writes += len(batch.changes)
    # Redis holds every batch up to this one (an earlier one it lacked would have made it refuse):
    # any of them not marked yet (applied by a tick stopped before it marked) is marked with it.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE rankings_batch SET applied = true WHERE shard = %s AND seq <= %s AND NOT applied",
            [batch.shard, batch.seq],
        )


def batch_replay(*, batch: Batch, version: int, gen: str) -> int:
    """Apply one recorded batch to a version; see store.batch_apply for the outcome."""
    return store.batch_apply(
        version=version,
        shard=batch.shard,
        seq=batch.seq,
        as_of=_epoch(batch.as_of),
        gen=gen,
        changes=batch.changes,
    )


# The claimed facts of one transaction, in a table each database session makes once and PostgreSQL
# empties at every commit (making one per claim writes the system catalogue: milliseconds a tick).
# Emptied first as well: inside an enclosing transaction (a savepoint) no commit has emptied it yet.
# A large claim sorts, hashes and groups its sales in memory rather than in temporary files; the
# notice that the table exists already is not worth a line in the server's log.
_FACTS_TABLE = f"""
SET LOCAL work_mem = '{TICK_WORK_MEM}';
SET LOCAL client_min_messages = warning;
CREATE TEMPORARY TABLE IF NOT EXISTS tick_facts (
    category varchar(50), product_id varchar(64), t bigint, qty bigint, cents bigint,
    views bigint DEFAULT 0, wishes bigint DEFAULT 0
) ON COMMIT DELETE ROWS;
DELETE FROM tick_facts
"""

# A claim of this many queue rows or more gives the planner statistics of its facts: without them
# it guesses a large batch's size and groups badly. A small one is guessed well enough (PostgreSQL
# takes a table never analysed as a few thousand rows) and is spared the ANALYZE.
FACTS_ANALYZED_FROM = 1000

# The claim's last sale id: the `limit`-th of the shard's queue rows (those counted by `until`,
# if given), or its last one when fewer wait; NULL when none does.
_CLAIM_LAST = """
SELECT max(sale_id) FROM (
    SELECT sale_id FROM rankings_pendingsale WHERE shard = %(shard)s
      AND (%(until)s::timestamptz IS NULL OR counted_at <= %(until)s::timestamptz)
    ORDER BY sale_id LIMIT %(limit)s
) AS first
"""

# The tick's first statements, under the shard state's row lock (one claimer per shard): the
# state, whether sales and engagement events wait (the claim's last sale id, see _CLAIM_LAST), and
# the facts table made ready; one round trip.
_OPEN = f"""
SELECT seq, as_of FROM rankings_shardstate WHERE shard = %(shard)s FOR UPDATE;
SELECT ({_CLAIM_LAST}), EXISTS (
    SELECT 1 FROM rankings_pendingengagement WHERE shard = %(shard)s
      AND (%(until)s::timestamptz IS NULL OR ts <= %(until)s::timestamptz)
);
{_FACTS_TABLE}
"""

# The queue row names the boards of this shard the sale counts in: the
# catalogue is not consulted, so a category deleted meanwhile loses nothing.
# The claim deletes the rows up to the last sale id that it sees, reading each row once and
# locking none beforehand; no other transaction claims from the shard meanwhile (the claimer
# holds its state's row lock). A sale committed since, with a lower id, is claimed with them;
# one it does not see waits for the next claim. The last id is a value, not a subquery, so that
# PostgreSQL knows how many sales it joins: a few are looked up, many are hashed.
_CLAIM = """
WITH claimed AS (
    DELETE FROM rankings_pendingsale p
    WHERE p.shard = %(shard)s AND p.sale_id <= %(last)s
      AND (%(until)s::timestamptz IS NULL OR p.counted_at <= %(until)s::timestamptz)
    RETURNING p.sale_id, p.counted_at, p.categories
), facts AS (
    SELECT u.category, s.product_id, floor(extract(epoch FROM s.counted_at))::bigint AS t,
           s.qty, CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END AS amount_cents
    -- The claimed months' range lets PostgreSQL skip every other partition of the sales
    -- table, whether it looks each sale up or hashes the claim against the months.
    FROM claimed JOIN rankings_sale s ON s.id = claimed.sale_id AND s.counted_at = claimed.counted_at
    CROSS JOIN LATERAL unnest(claimed.categories) AS u(category)
    WHERE s.counted_at BETWEEN (SELECT min(counted_at) FROM claimed) AND (SELECT max(counted_at) FROM claimed)
), counted AS (
    INSERT INTO tick_facts (category, product_id, t, qty, cents) SELECT * FROM facts
)
SELECT count(*) FROM claimed
"""

# Engagement events: a queue row is a group of them (one product, second and list of boards) and
# carries everything, so no raw event is read; groups of one product and second are summed again.
# Rows are claimed as sales are, up to the `limit`-th entry, here found within the statement
# (nothing is joined, so nothing depends on knowing how many).
_CLAIM_ENGAGEMENT = """
WITH claimed AS (
    DELETE FROM rankings_pendingengagement p
    WHERE p.shard = %(shard)s
      AND (%(until)s::timestamptz IS NULL OR p.ts <= %(until)s::timestamptz)
      AND p.entry <= coalesce((
        SELECT entry FROM rankings_pendingengagement WHERE shard = %(shard)s
          AND (%(until)s::timestamptz IS NULL OR ts <= %(until)s::timestamptz)
        ORDER BY entry OFFSET %(limit)s - 1 LIMIT 1
      ), 9223372036854775807)
    RETURNING p.product_id, p.ts, p.categories, p.views, p.wishes
), counted AS (
    INSERT INTO tick_facts (category, product_id, t, qty, cents, views, wishes)
    SELECT u.category, claimed.product_id, floor(extract(epoch FROM claimed.ts))::bigint, 0, 0,
           sum(claimed.views), sum(claimed.wishes)
    FROM claimed CROSS JOIN LATERAL unnest(claimed.categories) AS u(category)
    GROUP BY 1, 2, 3
)
SELECT count(*), coalesce(sum(views + wishes), 0) FROM claimed
"""


def _claim(cursor, params: dict, *, last: int) -> int:
    """Move the shard's pending sales up to sale id `last` (those counted at or before `until`, if
    given) into tick_facts; return how many."""
    cursor.execute(_CLAIM, {**params, "last": last})
    (claimed,) = cursor.fetchone()
    return claimed


def _claim_engagements(cursor, params: dict) -> tuple[int, int]:
    """Move up to `limit` of the shard's queue rows of engagement (those of events at or before
    `until`, if given) into tick_facts; return how many rows, and how many events they hold."""
    cursor.execute(_CLAIM_ENGAGEMENT, params)
    rows, events = cursor.fetchone()
    return rows, int(events)


# Every board's net change in one statement, as the clock moves: per window (one row of `w`), the
# buckets that left it subtracted, those that entered it added, and the claimed facts inside it
# as of the new instant; one row per board member whose score moves, per metric that moves,
# the rows of a window and category (both metrics of a pair, which share their keys in Redis) side
# by side: sorted by those two alone, by bytes (a sort of 50,000 rows on four text keys, mostly
# equal, costs several times more; the order only keeps a board's rows in as few steps as may be).
# An empty range (first > last) stands for no bucket. A tick that moves no bucket in or out of any window (most ticks: the clock moved
# within a minute) reads the facts alone (_NET_FACTS), never planned against the buckets.
_NET_MOVED = """
    SELECT w.name, b.category, b.product_id, -b.units, -b.revenue_cents, -b.views, -b.wishes
    FROM w CROSS JOIN LATERAL (%(range)s) AS b
    WHERE w.left_from <= w.left_to
    UNION ALL
    SELECT w.name, b.category, b.product_id, b.units, b.revenue_cents, b.views, b.wishes
    FROM w CROSS JOIN LATERAL (%(range)s) AS b
    WHERE w.entered_from <= w.entered_to
    UNION ALL"""
# One window's buckets of a range, read through the shard's index one window at a time (OFFSET 0
# keeps the subquery whole: flattened into a join, the planner may hash the shard's every bucket
# against the windows, not knowing how few the ranges hold).
_NET_RANGE = """
SELECT category, product_id, units, revenue_cents, views, wishes FROM rankings_bucket
WHERE shard = %(shard)s AND size = w.size AND start BETWEEN w.{end}_from AND w.{end}_to OFFSET 0"""
_NET_MOVED = _NET_MOVED.replace("%(range)s", _NET_RANGE.format(end="left"), 1).replace(
    "%(range)s", _NET_RANGE.format(end="entered"), 1
)

_NET = """
WITH w (name, size, first, stop, left_from, left_to, entered_from, entered_to) AS (
    SELECT * FROM unnest(%(names)s::text[], %(sizes)s::integer[], %(firsts)s::bigint[], %(stops)s::bigint[],
                         %(left_from)s::bigint[], %(left_to)s::bigint[], %(entered_from)s::bigint[],
                         %(entered_to)s::bigint[])
), moved (name, category, product_id, units, revenue, views, wishes) AS (%(moved)s
    SELECT w.name, f.category, f.product_id, f.qty, f.cents, f.views, f.wishes
    FROM w JOIN tick_facts f ON f.t >= w.first AND f.t < w.stop
), net AS (
    SELECT name, category, product_id, sum(units)::bigint AS units, sum(revenue)::bigint AS revenue,
           sum(views)::bigint AS views, sum(wishes)::bigint AS wishes
    FROM moved GROUP BY name, category, product_id
)
SELECT net.name, m.metric, net.category, net.product_id, m.delta
FROM net CROSS JOIN LATERAL (VALUES %(metric_values)s) AS m(metric, delta)
WHERE m.delta <> 0
ORDER BY net.name COLLATE "C", net.category COLLATE "C"
""".replace("%(metric_values)s", ", ".join(f"('{m}', {m})" for m in METRICS))
_NET_FACTS = _NET.replace("%(moved)s", "")
_NET = _NET.replace("%(moved)s", _NET_MOVED)

_NO_RANGE = (1, 0)


def _changes(
    cursor, *, shard: int, layout: Layout, old_now: dt.datetime | None, new_now: dt.datetime, facts: int
) -> tuple[list[store.Change], int]:
    """The net change of every board of the shard, in board order, and how many of the `facts`
    claimed are too old for every window; read before the claimed facts are folded. Without facts
    and with no bucket entering or leaving a window, nothing changes (most ticks of a quiet shard)."""
    new_t = int(_epoch(new_now))
    old_t = int(_epoch(old_now)) if old_now is not None else None
    windows = list(configured_windows().values())
    moves = [w.transition(old_t, new_t) for w in windows]
    if not facts and not any(left or entered for left, entered in moves):
        return [], 0
    bounds = [w.bounds(new_t) for w in windows]
    params = {
        "shard": shard,
        "names": [w.name for w in windows],
        "sizes": [w.bucket_seconds for w in windows],
        "firsts": [first for first, _ in bounds],
        "stops": [last + w.bucket_seconds for w, (_, last) in zip(windows, bounds, strict=True)],
        "left_from": [(left or _NO_RANGE)[0] for left, _ in moves],
        "left_to": [(left or _NO_RANGE)[1] for left, _ in moves],
        "entered_from": [(entered or _NO_RANGE)[0] for _, entered in moves],
        "entered_to": [(entered or _NO_RANGE)[1] for _, entered in moves],
    }
    cursor.execute(_NET if any(left or entered for left, entered in moves) else _NET_FACTS, params)
    # Rows of the Change fields' order, left as tuples (a backlog's change has 100,000s).
    changes = cursor.fetchall()
    too_old = 0
    if facts and shard in layout.shards_of(ALL):
        cursor.execute(
            # A fact of engagement counts its events (a sale's has none: one sale).
            "SELECT coalesce(sum(greatest(views + wishes, 1)), 0) FROM tick_facts"
            " WHERE category = ANY(%s) AND t < %s",
            [list(layout.boards_of(ALL)), oldest_bucket_start(windows, new_t)],
        )
        (too_old,) = cursor.fetchone()
    return changes, too_old


_FOLD = """
INSERT INTO rankings_bucket AS b (size, start, category, product_id, shard, units, revenue_cents, views, wishes)
SELECT sizes.size, t - ((t %% sizes.size) + sizes.size) %% sizes.size, category, product_id, %(shard)s,
       sum(qty), sum(cents), sum(views), sum(wishes)
FROM tick_facts CROSS JOIN unnest(%(sizes)s::integer[], %(cutoffs)s::bigint[]) AS sizes(size, cutoff)
WHERE t >= sizes.cutoff
GROUP BY 1, 2, category, product_id
ON CONFLICT (size, category, start, product_id) DO UPDATE
SET units = b.units + excluded.units, revenue_cents = b.revenue_cents + excluded.revenue_cents,
    views = b.views + excluded.views, wishes = b.wishes + excluded.wishes
"""


def _fold(cursor, *, shard: int, now: dt.datetime) -> None:
    """Add the claimed sales to their buckets, every bucket size at once: one upsert per batch.

    A bucket that pruning would delete as of `now` is not written: no window reads it again,
    and a backlog of old sales (a first tick over imported history) skips most minute buckets.
    """
    sizes = bucket_sizes(configured_windows().values())
    cutoffs = [bucket_cutoff(size, now) for size in sizes]
    cursor.execute(_FOLD, {"sizes": sizes, "cutoffs": cutoffs, "shard": shard})


def clock_reset(*, to: dt.datetime) -> list[int]:
    """Put every shard's instant back to `to` and rebuild its boards from the buckets as of then.

    The way out of a clock that went wrong (a tick far in the future empties every window, and
    every later tick is refused as going backwards). Buckets hold sales by their own time, not
    by the instant of the tick that folded them, so the rebuilt boards are exact. Each shard's
    batch sequence skips one number: a retired or building version cannot catch up across the
    reset by replaying batches (they assume the boards as of `to`) and is told to rebuild.
    Sales still pending are folded by the next tick as usual. Returns the shards reset.
    """
    if to.tzinfo is None:
        raise ValueError("to must be timezone-aware")
    shards = list(range(shard_count_checked()))
    with locks.all_shards_lock(len(shards)):
        for shard in shards:
            version, _ = _write_version()
            gen = store.generation(version)
            ShardState.objects.get_or_create(shard=shard)
            with transaction.atomic():
                state = ShardState.objects.select_for_update().get(shard=shard)
                state.as_of = to
                state.seq += 1
                state.save(update_fields=["as_of", "seq"])
                snapshots.snapshots_forget_after(to)
            # After the commit: should the rebuild fail, Redis lacks the skipped number and
            # the next tick rebuilds the shard.
            shard_rebuild(shard=shard, version=version, gen=gen)
            log.warning("reset the clock of shard %s to %s and rebuilt its boards", shard, to.isoformat())
    return shards


def shard_rebuild(*, shard: int, version: int, gen: str) -> None:
    """Rewrite every board of a shard from the PostgreSQL buckets, as of the shard's instant.

    The caller holds the shard's lock. Used when Redis lost the shard's data.
    """
    with transaction.atomic():
        state = ShardState.objects.select_for_update().get(shard=shard)
        boards: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)
        if state.as_of is not None:
            as_of_t = int(_epoch(state.as_of))
            with connection.cursor() as cursor:
                for w in configured_windows().values():
                    first, last = w.bounds(as_of_t)
                    cursor.execute(bucket_sums(), [shard, w.bucket_seconds, first, last])
                    for category, product_id, *values in cursor.fetchall():
                        for metric, value in zip(METRICS, values, strict=True):
                            boards[(w.name, metric, category)][product_id] = value
        as_of = _epoch(state.as_of) if state.as_of else 0.0
        store.shard_replace(version=version, shard=shard, seq=state.seq, as_of=as_of, gen=gen, boards=boards)
        Batch.objects.filter(shard=shard, seq__lte=state.seq, applied=False).update(applied=True)
    # A shard that never ticked has nothing to lose; any other was lost by Redis.
    (log.warning if state.as_of is not None else log.info)(
        "rebuilt shard %s of version %s from buckets", shard, version
    )


def shards_settle(*, now: dt.datetime | None) -> None:
    """Apply every recorded batch and bring every shard of the active layout to `now` (claiming what
    is pending): then all of them stand at one instant, between two batches. The caller holds every
    shard's lock (a switch-over that re-lays out the shards); what fails is raised, not isolated."""
    version, layout = _write_version()
    report = Tally()
    for shard in range(layout.shards):
        state, _ = ShardState.objects.get_or_create(shard=shard)
        if now is None:  # nothing has ticked yet: only batches to apply, if any
            _redis_recover(shard=shard, recorded=state.seq, version=version, report=report)
        else:
            tick_shard(state=state, layout=layout, version=version, now=now, report=report)

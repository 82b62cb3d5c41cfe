"""A shard's claim of the sales it has yet to count: by snapshot, from the sales table itself.

A sale writes no queue row. Its row carries the id of the transaction that wrote it (`xid`) and
the boards it counts in on each shard, fixed at ingest (`boards`). Each shard's state holds its
claim position: the snapshot its last claim interval ended at. A claim takes the sales whose
writer that position had not seen and a newer snapshot has (PgQ's snapshot pairs): every
committed sale becomes visible in exactly one such interval, whatever order transactions commit
in, and a transaction left open elsewhere delays only its own sales. docs/architecture.md ("The
claim") gives the whole argument, with `limit`, `until` and crashes.

A position is (snapshot, own, own_id): the snapshot, the id of the transaction that took it and
the last of that transaction's own sales it saw (a snapshot sees its own transaction's rows as
committed: a tick inside the transaction that ingested, as tests do, must still tell the rows it
claimed from those written after). An interval claimed in several steps (a claim's `limit`, or
`until`) is kept in the state, with the last sale claimed of it in (counted_at, id) order: its
rows are fixed (all committed), and each step takes the next ones in that order.

A switch-over that re-keys what the shards have yet to claim (rankings.engine.relayout, retree)
first moves it into the re-queued sales (`requeue_all`), which the claim takes first.
"""

from dataclasses import dataclass

# The columns of a claim position in rankings_shardstate (and in a copy of it: requeue_all).
POSITION_COLUMNS = (
    "claimed_snapshot, claimed_own, claimed_own_id, claiming_snapshot, claiming_own, claiming_own_id,"
    " claiming_at, claiming_id"
)

# The state's position, as text (the snapshot types have no Python form).
POSITION_READ = (
    "claimed_snapshot::text, claimed_own::text, claimed_own_id, claiming_snapshot::text,"
    " claiming_own::text, claiming_own_id, claiming_at, claiming_id"
)


@dataclass
class Position:
    """A shard's claim position, read under its state's row lock."""

    snapshot: str
    own: str | None
    own_id: int | None
    # The interval being claimed: its end, and the last sale claimed of it.
    target: str | None
    target_own: str | None
    target_own_id: int | None
    after_at: object
    after_id: int | None


def _unseen(columns: str, prev: tuple[str, str, str], target_bound: str) -> str:
    """The rows of the sales table whose writer the position `prev` (SQL of its snapshot, own,
    own_id) may not have seen, read by the writer's id only: at or after the snapshot's end (and
    before `target_bound`), running when it was taken, or the position's own transaction."""
    snap, own, _ = prev
    return f"""
    SELECT {columns} FROM rankings_sale WHERE xid >= pg_snapshot_xmax({snap}) AND {target_bound}
    UNION ALL
    SELECT {columns} FROM rankings_sale
    WHERE xid = ANY(ARRAY(SELECT pg_snapshot_xip({snap}))) AND xid IS DISTINCT FROM {own}
    UNION ALL
    SELECT {columns} FROM rankings_sale WHERE xid = {own} AND xid < pg_snapshot_xmax({snap})
    """


def _seen(position: tuple[str, str, str], sale: str = "s") -> str:
    snap, own, own_id = position
    return f"rankings_seen({sale}.xid, {sale}.id, {snap}, {own}, {own_id})"


_PREV = ("%(snapshot)s::pg_snapshot", "%(own)s::xid8", "%(own_id)s::bigint")
_TARGET = ("%(target)s::pg_snapshot", "%(target_own)s::xid8", "%(target_own_id)s::bigint")

# The interval's rows of this shard after the last claimed, in (counted_at, id) order.
_INTERVAL = f"""
SELECT s.id, s.counted_at, s.product_id, s.qty, s.amount_cents,
       rankings_boards_of(s.boards, %(shard)s) AS categories
FROM ({
    _unseen(
        "id, counted_at, xid, boards, product_id, qty, amount_cents",
        _PREV,
        "(xid < pg_snapshot_xmax(%(target)s::pg_snapshot) OR xid = %(target_own)s::xid8)",
    )
}) AS s
WHERE rankings_boards_of(s.boards, %(shard)s) IS NOT NULL
  AND NOT {_seen(_PREV)} AND {_seen(_TARGET)}
  AND (%(after_id)s::bigint IS NULL OR (s.counted_at, s.id) > (%(after_at)s::timestamptz, %(after_id)s::bigint))
"""

# The next rows of the interval (those counted at or before `until`, if given), up to `limit`, into
# the tick's facts: how many, and the last one's (counted_at, id).
_CLAIM = f"""
WITH claimed AS (
    SELECT * FROM ({_INTERVAL}) AS i
    WHERE %(until)s::timestamptz IS NULL OR i.counted_at <= %(until)s::timestamptz
    ORDER BY i.counted_at, i.id LIMIT %(limit)s
), counted AS (
    INSERT INTO tick_facts (category, product_id, t, qty, cents)
    SELECT u.category, c.product_id, floor(extract(epoch FROM c.counted_at))::bigint,
           c.qty, CASE WHEN c.qty < 0 THEN -c.amount_cents ELSE c.amount_cents END
    FROM claimed c CROSS JOIN LATERAL unnest(c.categories) AS u(category)
)
SELECT (SELECT count(*) FROM claimed), last.counted_at, last.id
FROM (SELECT 1) AS one
LEFT JOIN (SELECT counted_at, id FROM claimed ORDER BY counted_at DESC, id DESC LIMIT 1) AS last ON true
"""

_MORE = f"SELECT EXISTS ({_INTERVAL})"

# A new interval's end: the current snapshot, this transaction's id and its last sale.
_OPEN = """
SELECT pg_current_snapshot()::text, own::text, (SELECT max(id) FROM rankings_sale WHERE xid = own)
FROM (SELECT pg_current_xact_id_if_assigned() AS own) AS t
"""

_RECORD = """
UPDATE rankings_shardstate SET claimed_snapshot = %(snapshot)s::pg_snapshot, claimed_own = %(own)s::xid8,
    claimed_own_id = %(own_id)s, claiming_snapshot = %(target)s::pg_snapshot, claiming_own = %(target_own)s::xid8,
    claiming_own_id = %(target_own_id)s, claiming_at = %(after_at)s, claiming_id = %(after_id)s
WHERE shard = %(shard)s
"""


def position_of(row) -> Position:
    """The position of the state columns read by POSITION_READ."""
    return Position(*row)


def claim_sales(cursor, *, shard: int, position: Position, limit: int, until) -> int:
    """Move up to `limit` of the shard's unclaimed sales (those counted at or before `until`, if
    given) into tick_facts, in (counted_at, id) order within the claim interval, and record the new
    position; inside the tick's transaction, under the state's row lock. Return how many."""
    if limit <= 0:
        return 0
    fresh = position.target is None
    if fresh:
        cursor.execute(_OPEN)
        position.target, position.target_own, position.target_own_id = cursor.fetchone()
        position.after_at = position.after_id = None
    params = {**vars(position), "shard": shard, "until": until, "limit": limit}
    cursor.execute(_CLAIM, params)
    claimed, last_at, last_id = cursor.fetchone()
    if claimed:
        position.after_at, position.after_id = last_at, last_id
    more = claimed == limit
    if not more and until is not None:
        cursor.execute(_MORE, {**params, **vars(position)})
        (more,) = cursor.fetchone()
    if not more:
        # The interval is claimed whole: its end is where the next one starts.
        if fresh and not claimed and position.target == position.snapshot:
            return 0  # no transaction ended since: the state stays as it is
        position.snapshot, position.own, position.own_id = (
            position.target or position.snapshot,
            position.target_own,
            position.target_own_id,
        )
        position.target = position.target_own = position.target_own_id = None
        position.after_at = position.after_id = None
    cursor.execute(_RECORD, {**vars(position), "shard": shard})
    return claimed


def unseen_by(sale: str, state: str) -> str:
    """SQL: whether the sales table's row `sale` names the shard of state row `state` and its
    position has not seen it (the view rankings_pendingsale's test, for one row)."""
    prev = (f"{state}.claimed_snapshot", f"{state}.claimed_own", f"{state}.claimed_own_id")
    target = (f"{state}.claiming_snapshot", f"{state}.claiming_own", f"{state}.claiming_own_id")
    return f"""(rankings_boards_of({sale}.boards, {state}.shard) IS NOT NULL
    AND NOT {_seen(prev, sale)}
    AND NOT coalesce({_seen(target, sale)}
                     AND ({sale}.counted_at, {sale}.id) <= ({state}.claiming_at, {state}.claiming_id), false))"""


def _unseen_entries(positions: str) -> str:
    """(shard, sale_id, counted_at, categories) of every sale not yet claimed by a shard whose
    position is a row of table `positions`, as the view rankings_pendingsale reads them."""
    prev = ("p.claimed_snapshot", "p.claimed_own", "p.claimed_own_id")
    target = ("p.claiming_snapshot", "p.claiming_own", "p.claiming_own_id")
    return f"""
SELECT p.shard, s.id, s.counted_at, rankings_boards_of(s.boards, p.shard)
FROM {positions} p CROSS JOIN LATERAL ({_unseen("id, counted_at, xid, boards", prev, "true")}) AS s
WHERE rankings_boards_of(s.boards, p.shard) IS NOT NULL AND NOT {_seen(prev)}
  AND NOT coalesce({_seen(target)} AND (s.counted_at, s.id) <= (p.claiming_at, p.claiming_id), false)
"""


def requeue_all(cursor, *, positions: str = "rankings_shardstate") -> int:
    """Re-queue every sale the shards have yet to claim (by the positions in table `positions`,
    keyed by the shards they were taken on) and move every shard's position in rankings_shardstate
    to this statement's snapshot, which sees all of them; return how many rows were re-queued.

    In one statement, so in one snapshot: a sale it does not see (its writer still running) is
    neither re-queued nor seen by the new positions, and is claimed from its row once committed.
    The caller holds every shard's lock and the layout lock that every ingest shares, so no sale
    of the boards being left is still running."""
    cursor.execute(
        f"""
WITH moved AS (
    INSERT INTO rankings_requeuedsale (shard, sale_id, counted_at, categories)
    {_unseen_entries(positions)}
    RETURNING 1
), here AS (
    SELECT pg_current_snapshot() AS snap, own, (SELECT max(id) FROM rankings_sale WHERE xid = own) AS own_id
    FROM (SELECT pg_current_xact_id_if_assigned() AS own) AS t
), moved_on AS (
    UPDATE rankings_shardstate SET claimed_snapshot = here.snap, claimed_own = here.own,
        claimed_own_id = here.own_id, claiming_snapshot = NULL, claiming_own = NULL,
        claiming_own_id = NULL, claiming_at = NULL, claiming_id = NULL
    FROM here
)
SELECT count(*) FROM moved
"""
    )
    return cursor.fetchone()[0]


def states_ensure(cursor, shards: int) -> None:
    """Make the state of each of the first `shards` shards that has none (a shard that never
    ticked: its position has seen no sale, so that requeue_all re-queues all of its sales)."""
    cursor.execute(
        "INSERT INTO rankings_shardstate (shard, seq, too_old, failures, last_error)"
        " SELECT s, 0, 0, 0, '' FROM generate_series(0, %s - 1) AS s ON CONFLICT (shard) DO NOTHING",
        [shards],
    )


def _oldest_unseen(most: str) -> str:
    """The sales some shard's position has not seen, read by writer id: those of transactions
    running when it was taken and of its own, and the first `most` after its end in writer order
    (a bound on the read: a backlog longer than that is old enough at its `most`-th sale)."""
    prev = ("st.claimed_snapshot", "st.claimed_own", "st.claimed_own_id")
    target = ("st.claiming_snapshot", "st.claiming_own", "st.claiming_own_id")
    columns = "id, counted_at, xid, boards, received_at"
    return f"""
SELECT s.received_at FROM (
    SELECT {columns} FROM rankings_sale
    WHERE xid = ANY(ARRAY(SELECT pg_snapshot_xip(st.claimed_snapshot))) AND xid IS DISTINCT FROM st.claimed_own
    UNION ALL
    SELECT {columns} FROM rankings_sale WHERE xid = st.claimed_own AND xid < pg_snapshot_xmax(st.claimed_snapshot)
    UNION ALL
    (SELECT {columns} FROM rankings_sale WHERE xid >= pg_snapshot_xmax(st.claimed_snapshot) ORDER BY xid LIMIT {most})
) AS s
WHERE rankings_boards_of(s.boards, st.shard) IS NOT NULL AND NOT {_seen(prev)}
  AND NOT coalesce({_seen(target)} AND (s.counted_at, s.id) <= (st.claiming_at, st.claiming_id), false)
UNION ALL
SELECT received_at FROM rankings_sale
WHERE id = (SELECT min(sale_id) FROM rankings_requeuedsale r WHERE r.shard = st.shard)
"""


# When the oldest sale some shard of the first `shards` has yet to claim was received.
_OLDEST = f"""
SELECT min(o.received_at) FROM rankings_shardstate st
CROSS JOIN LATERAL ({_oldest_unseen("%(most)s")}) AS o
WHERE st.shard < %(shards)s
"""


def unclaimed_oldest(cursor, *, shards: int, most: int):
    """When the oldest sale that one of the first `shards` shards has yet to claim was received
    (None when none waits), reading at most `most` sales per shard beyond those of transactions
    that were running at its last claim: a bounded read however long the backlog."""
    cursor.execute(_OLDEST, {"shards": shards, "most": most})
    return cursor.fetchone()[0]

"""The read path's calls: a board's slice or head, a product's rank, a whole small board, what it
takes to climb. Each answers with its shard's as_of, read in the same round trip, so an answer is
of one batch."""

import json
from dataclasses import dataclass

from cachetools import LRUCache

from rankings.conf import other_metric
from rankings.engine.store.client import (
    REMEMBERED_PREFIXES,
    fast,
    memory_lock,
    remembered,
    script,
    scripts_run,
    translated,
)
from rankings.engine.store.keys import (
    BLOB_SIZE,
    STATE_READ,
    board_key,
    board_keys,
    member_keys,
    prefix,
    state_key,
)
from rankings.engine.store.names import NAMES_BUCKETS, rows_names_head

# The highest batch sequence number this process has read in each shard's state, per generation.
seq_seen: LRUCache = remembered(LRUCache(maxsize=REMEMBERED_PREFIXES * 64))


def state_as_of(version: int, shard: int, state: list) -> float | None:
    """A shard's as_of from its state's (asof, seq, gen); None, unknown, when there is none, or when
    the seq is below one this process has read in the same generation: Redis lost the shard's last
    writes (a replica that had not received them took over its node, or it restarted from an older
    snapshot) and its boards lag PostgreSQL until a tick rebuilds them. The seq only grows
    otherwise: a rebuild, a clock reset and every batch write one at least as high."""
    as_of, seq, gen = state
    if not as_of:
        return None
    seq, key = int(seq or 0), (prefix(), version, shard, gen)
    with memory_lock:
        if seq < seq_seen.get(key, 0):
            return None
        seq_seen[key] = seq
    return float(as_of)


def _heads(version: int, boards: list[tuple[int, str, str, str]], states: list[int]) -> tuple[list, list]:
    """The head (lua/head.lua) of each board (shard, window, metric, category), and the state of each
    shard of `states`: one round trip (client.scripts_run), on one server or a Redis Cluster."""
    values = scripts_run(
        [("head", list(board_keys(version, *board)), [BLOB_SIZE]) for board in boards],
        commands=[("HMGET", state_key(version, shard), *STATE_READ) for shard in states],
    )
    return values[: len(states)], values[len(states) :]


@dataclass
class BoardSlice:
    as_of: float | None
    total: int
    rows: list[tuple[str, int, int]]  # (product_id, this metric's score, other metric's score)


@translated
def board_slice(
    *, version: int, shard: int, window: str, metric: str, category: str, start: int, stop: int
) -> BoardSlice:
    """Members ranked start..stop (0-based, inclusive), with both metrics.

    Within the blob's ranks this is one round trip (the blob, or a small board's head made from
    it: lua/head.lua); deeper, two (ZRANGE, then ZMSCORE for the other metric).
    """
    r = fast()
    if stop < BLOB_SIZE:
        (state,), (blob,) = _heads(version, [(shard, window, metric, category)], [shard])
        if blob:
            data = json.loads(blob)
            return BoardSlice(
                as_of=state_as_of(version, shard, state),
                total=data["total"],
                rows=[(m, int(s), int(o)) for m, s, o in data["rows"][start : stop + 1]],
            )
    key = board_key(version, shard, window, metric, category)
    pipe = r.pipeline(transaction=False)
    pipe.zrange(key, start, stop, withscores=True)
    pipe.zcard(key)
    pipe.hmget(state_key(version, shard), STATE_READ)
    rows, total, state = pipe.execute()
    members = [m for m, _ in rows]
    others = (
        r.zmscore(board_key(version, shard, window, other_metric(metric), category), members)
        if members
        else []
    )
    return BoardSlice(
        as_of=state_as_of(version, shard, state),
        total=total,
        rows=[
            (m.decode(), int(-s), int(-o) if o is not None else 0)
            for (m, s), o in zip(rows, others, strict=True)
        ],
    )


@dataclass
class MemberRank:
    as_of: float | None
    total: int
    rank: int | None  # 0-based
    score: int
    other: int

    @classmethod
    def from_reply(cls, version: int, shard: int, reply: list) -> "MemberRank":
        rank, score, other, total, state = reply
        return cls(
            as_of=state_as_of(version, shard, state),
            total=total,
            rank=rank,
            score=int(-float(score)) if score is not None else 0,
            other=int(-float(other)) if other is not None else 0,
        )


@translated
def member_rank(
    *, version: int, shard: int, window: str, metric: str, category: str, product_id: str
) -> MemberRank:
    """One product's rank and scores on a board, in one round trip."""
    keys = member_keys(version, shard, window, metric, category)
    (reply,) = scripts_run([("member_rank", keys, [product_id, *STATE_READ])])
    return MemberRank.from_reply(version, shard, reply)


@dataclass
class MemberAround:
    found: MemberRank  # the product's rank, scores, the board's size, as of its shard's state
    start: int  # the 0-based rank of the slice's first row
    board: BoardSlice  # ranks from n before the product to n after it (empty when it has no rank)
    # What Redis's copy of the names holds of them, when the read asked it (on one server, and of a
    # split board's part on a Redis Cluster).
    names: dict[str, str] | None = None


def scored_rows(rows: list, others: list) -> list[tuple[str, int, int]]:
    """(member, score, other score) of a ZRANGE ... WITHSCORES reply and its members' ZMSCORE (as a
    script returns them: scores as text, False for none)."""
    return [
        (m.decode(), int(-float(s)), int(-float(o)) if o is not None else 0)
        for m, s, o in zip(rows[::2], rows[1::2], others, strict=True)
    ]


@translated
def member_around(
    *,
    version: int,
    shard: int,
    window: str,
    metric: str,
    category: str,
    product_id: str,
    n: int,
    part: bool = False,
) -> MemberAround:
    """A product's rank and scores on a board and the members from n ranks before it to n after,
    with both metrics, of one instant, and their names from Redis's copy (for n > 0): one round trip
    (lua/neighbors.lua), O(log n + n). A Redis Cluster's call cannot reach the shared copy's
    buckets (other slots): there a split board's `part` names its rows from its own copy, and a
    whole board's names are a read of their own."""
    keys = member_keys(version, shard, window, metric, category)
    names = rows_names_head(version, shard, part=part) if n else ""
    (reply,) = scripts_run([("neighbors", keys, [product_id, n, names, NAMES_BUCKETS, *STATE_READ])])
    return around_of(version, shard, reply)


def around_of(version: int, shard: int, reply: list) -> MemberAround:
    """member_around's answer from lua/neighbors.lua's reply (or a reply of its shape without the
    names)."""
    rank, start, rows, others, total, state, *named = reply
    names = named[0] if named else []
    as_of = state_as_of(version, shard, state)
    read = scored_rows(rows, others)
    if rank is None:
        found = MemberRank(as_of=as_of, total=total, rank=None, score=0, other=0)
    else:
        _, score, other = read[rank - start]
        found = MemberRank(as_of=as_of, total=total, rank=rank, score=score, other=other)
    return MemberAround(
        found=found,
        start=start,
        board=BoardSlice(as_of=as_of, total=total, rows=read),
        names=names_found(read, names) if names else None,
    )


def names_found(rows: list[tuple[str, int, int]], names: list) -> dict[str, str]:
    """The names lua/names_of.lua found of `rows` (scored_rows), by product (none where the call
    was given no names' keys to read)."""
    if not names:
        return {}
    return {m: name.decode() for (m, _, _), name in zip(rows, names, strict=True) if name}


class BoardCopy:
    """A whole board as of one instant, as Redis sent it: a member's rank is its place in the
    board's ZRANGE; scores are parsed only for the members asked about (a rank, or a product's
    neighbours)."""

    def __init__(self, as_of: float | None, stamp: tuple, board: list[bytes], other: list[bytes]):
        self.as_of = as_of
        self.stamp = stamp  # the shard's (asof, seq, gen) as read with the board (shard_stamp)
        self.total = len(board) // 2
        self._scores = board
        self._places = dict(zip(board[::2], range(0, len(board), 2), strict=True))
        self._others = dict(zip(other[::2], other[1::2], strict=True))

    def before(self, score: int, product_id: str) -> int:
        """What ordered_before would have answered at the copy's instant: the members with a higher
        score, or the same score and a smaller id (found by halves: O(log n) scores parsed)."""
        key = (float(-score), product_id.encode())
        low, high = 0, self.total
        while low < high:
            mid = (low + high) // 2
            if (float(self._scores[2 * mid + 1]), self._scores[2 * mid]) < key:
                low = mid + 1
            else:
                high = mid
        return low

    def rows(self, start: int, stop: int) -> list[tuple[str, int, int]]:
        """Ranks start..stop - 1 (0-based) with both metrics, as a BoardSlice holds them: only these
        rows' scores are parsed."""
        start, stop = max(0, start), min(stop, self.total)
        board, others = self._scores, self._others
        out = []
        for member, score in zip(
            board[2 * start : 2 * stop : 2], board[2 * start + 1 : 2 * stop : 2], strict=True
        ):
            other = others.get(member)
            out.append((member.decode(), int(-float(score)), int(-float(other)) if other is not None else 0))
        return out

    def around(self, product_id: str, n: int) -> MemberAround:
        """What member_around would have answered at the copy's instant: the product's rank and
        the members from n ranks before it to n after (none when it has no rank), with no round
        trip."""
        found = self.member(product_id)
        if found.rank is None:
            return MemberAround(found=found, start=0, board=BoardSlice(self.as_of, self.total, []))
        start = max(0, found.rank - n)
        return MemberAround(
            found=found,
            start=start,
            board=BoardSlice(self.as_of, self.total, self.rows(start, found.rank + n + 1)),
        )

    def member(self, product_id: str) -> MemberRank:
        """What member_rank would have answered at the copy's instant."""
        key = product_id.encode()
        place = self._places.get(key)
        if place is None:
            return MemberRank(as_of=self.as_of, total=self.total, rank=None, score=0, other=0)
        other = self._others.get(key)
        return MemberRank(
            as_of=self.as_of,
            total=self.total,
            rank=place // 2,
            score=int(-float(self._scores[place + 1])),
            other=int(-float(other)) if other is not None else 0,
        )


@translated
def board_copy(
    *, version: int, shard: int, window: str, metric: str, category: str, most: int
) -> BoardCopy | None:
    """A board of at most `most` members, whole, in one round trip; None for a larger one."""
    keys = member_keys(version, shard, window, metric, category)
    reply = script("board_copy")(keys=keys, args=[most, *STATE_READ], client=fast())
    if reply is None:
        return None
    board, other, state = reply
    return BoardCopy(state_as_of(version, shard, state), tuple(state), board, other)


@translated
def shard_stamp(*, version: int, shard: int) -> tuple:
    """A shard's state fields (asof, seq, gen) as stored. Every write to the shard's boards writes them (a batch its
    seq, a tick its asof, a rebuild all three), so equal fields mean boards unchanged in between."""
    return tuple(fast().hmget(state_key(version, shard), STATE_READ))


# --- what it takes to climb ---------------------------------------------------------


@dataclass
class MembersOnBoard:
    stamp: tuple  # the shard's state fields as read with the scores (what shard_stamp answers)
    as_of: float | None
    rows: list[tuple[str, int, int]]  # (product_id, this metric's score, other metric's score), unordered


@translated
def members_on_board(
    *, version: int, shard: int, window: str, metric: str, category: str, members: list[str]
) -> MembersOnBoard:
    """Those of `members` on a board, with both metrics' scores and the shard's state, all of one
    instant (lua/members_on_board.lua): one round trip, O(len(members)) work in Redis whatever the
    board's size."""
    keys = member_keys(version, shard, window, metric, category)
    state, *found = script("members_on_board")(keys=keys, args=[*STATE_READ, *members], client=fast())
    return MembersOnBoard(
        stamp=tuple(state),
        as_of=state_as_of(version, shard, state),
        rows=[(m.decode(), int(-float(s)), int(-float(o)) if o is not None else 0) for m, s, o in found],
    )


@translated
def ordered_before(
    *, version: int, shard: int, window: str, metric: str, category: str, score: int, product_id: str
) -> int:
    """How many members of a board are ordered before a product with `score` (it excluded when its
    own score is lower): its rank, were its score `score`, is one more."""
    key = board_key(version, shard, window, metric, category)
    return script("ordered_before")(keys=[key], args=[-score, product_id], client=fast())


@dataclass
class Thresholds:
    as_of: float | None
    total: int
    ranks: list[tuple[int, str, int]]  # (rank, the member there, its score), while the board is that deep
    counts: list[int]  # members scoring from each edge up to the next (the last edge: and above)


@translated
def board_thresholds(
    *, version: int, shard: int, window: str, metric: str, category: str, ranks: list[int], edges: list[int]
) -> Thresholds:
    """The members and scores at `ranks` and the board's histogram over `edges`, in one round trip."""
    keys = [board_key(version, shard, window, metric, category), state_key(version, shard)]
    args: list[int | str] = [len(ranks), *ranks, len(edges), *(-edge for edge in edges), *STATE_READ]
    total, rows, counts, state = script("thresholds")(keys=keys, args=args, client=fast())
    return Thresholds(
        as_of=state_as_of(version, shard, state),
        total=total,
        ranks=[(int(rank), member.decode(), int(-float(score))) for rank, member, score in rows],
        counts=[int(count) for count in counts],
    )


@translated
def members_ranks(
    *, version: int, window: str, metric: str, product_id: str, boards: list[tuple[int, str]]
) -> list[MemberRank]:
    """One product's rank on several boards ((shard, category) pairs), in one round trip.

    Plain commands rather than the member-rank script: a cluster's pipeline refuses EVALSHA."""
    pipe = fast().pipeline(transaction=False)
    for shard, category in boards:
        key, other_key, state_key_ = member_keys(version, shard, window, metric, category)
        pipe.zrank(key, product_id)
        pipe.zscore(key, product_id)
        pipe.zscore(other_key, product_id)
        pipe.zcard(key)
        pipe.hmget(state_key_, STATE_READ)
    values = pipe.execute()
    return [
        MemberRank.from_reply(version, shard, values[5 * i : 5 * i + 5])
        for i, (shard, _) in enumerate(boards)
    ]


@translated
def members_scores(
    *, version: int, lookups: list[tuple[int, str, str, str, list[str]]]
) -> list[dict[str, int]]:
    """For each (shard, window, metric, category, product ids): those products' scores on that board
    (0 when not on it), in one round trip. An engagement board's answers show units and revenue too."""
    pipe = fast().pipeline(transaction=False)
    asked = [(lookup, lookup[4]) for lookup in lookups if lookup[4]]
    for (shard, window, metric, category, _), members in asked:
        pipe.zmscore(board_key(version, shard, window, metric, category), members)
    replies = iter(pipe.execute() if asked else [])
    found: list[dict[str, int]] = []
    for *_, members in lookups:
        if not members:
            found.append({})
            continue
        reply = next(replies)
        found.append({m: int(-float(s)) if s is not None else 0 for m, s in zip(members, reply, strict=True)})
    return found


@translated
def shard_as_of(*, version: int, shard: int) -> float | None:
    """The instant a shard's boards were last brought up to date (None: Redis holds no state for it)."""
    return state_as_of(version, shard, fast().hmget(state_key(version, shard), STATE_READ))


@translated
def shards_as_of(*, version: int, shards: list[int]) -> list[float | None]:
    """Each shard's as_of (None: unknown, as shard_as_of), in one round trip: one HMGET a shard."""
    pipe = fast().pipeline(transaction=False)
    for shard in shards:
        pipe.hmget(state_key(version, shard), STATE_READ)
    return [state_as_of(version, shard, state) for shard, state in zip(shards, pipe.execute(), strict=True)]


@translated
def board_heads(*, version: int, boards: list[tuple[int, str, str, str, int]]) -> list[BoardSlice | None]:
    """The first n ranks of several boards ((shard, window, metric, category, n) each).

    One round trip for them all: each board's head (its blob, or for a small board the same made
    from the board: lua/head.lua), each shard's as_of. None for a board the head cannot answer (a large
    board's blob missing, or n deeper than the blob): a caller reads that one with board_slice.
    """
    shards = sorted({shard for shard, *_ in boards})
    states, heads = _heads(version, [board[:4] for board in boards], shards)
    as_of_by_shard = {shard: state_as_of(version, shard, s) for shard, s in zip(shards, states, strict=True)}
    out: list[BoardSlice | None] = []
    for blob, (shard, _, _, _, n) in zip(heads, boards, strict=True):
        if not blob:
            out.append(None)  # a large board whose blob is missing
            continue
        data = json.loads(blob)
        if n > BLOB_SIZE and data["total"] > BLOB_SIZE:
            out.append(None)  # deeper than the blob
            continue
        out.append(
            BoardSlice(
                as_of=as_of_by_shard[shard],
                total=data["total"],
                rows=[(m, int(s), int(o)) for m, s, o in data["rows"][:n]],
            )
        )
    return out

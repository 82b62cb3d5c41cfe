"""Split boards: the reads a merge of a board's parts needs (rankings.serving.merge)."""

from dataclasses import dataclass

from rankings.engine.store.client import clustered, fast, score_pairs, script, scripts_run, translated
from rankings.engine.store.keys import STATE_READ, board_key, member_keys, state_key
from rankings.engine.store.names import NAMES_BUCKETS, rows_names_head
from rankings.engine.store.reads import (
    BoardSlice,
    MemberAround,
    Thresholds,
    around_of,
    member_around,
    names_found,
    scored_rows,
    state_as_of,
)


@dataclass
class PartBefore:
    as_of: float | None
    total: int
    before: int  # members ordered before the product asked about


@translated
def parts_before(
    *, version: int, window: str, metric: str, parts: list[tuple[int, str]], score: int, product_id: str
) -> list[PartBefore]:
    """On each board (shard, category), the members ordered before `product_id` were its score
    `score`, with the board's size and its shard's as_of: one round trip, on one server or a Redis
    Cluster."""
    args = [-score, product_id, *STATE_READ]
    replies = _on_boards("part_before", version=version, window=window, metric=metric, parts=parts, args=args)
    return [
        PartBefore(as_of=state_as_of(version, shard, state), total=int(total), before=int(before))
        for (before, total, state), (shard, _) in zip(replies, parts, strict=True)
    ]


def _on_boards(
    source: str, *, version: int, window: str, metric: str, parts: list[tuple[int, str]], args: list
):
    """The replies of the script `source` run on each board (shard, category) with its shard's state
    key and `args`: one round trip, on one server or a Redis Cluster (client.scripts_run)."""
    return scripts_run(
        [
            (source, [board_key(version, shard, window, metric, category), state_key(version, shard)], args)
            for shard, category in parts
        ]
    )


@dataclass
class PartAround:
    before: PartBefore  # the members of the part ordered before the product, its size, its as_of
    start: int  # the 0-based rank (in the part) of the first row read
    rows: list[tuple[str, int, int]]  # (product_id, this metric's score, other metric's score)
    names: dict[str, str]  # the rows' names that Redis's copy held


@translated
def parts_around(
    *,
    version: int,
    window: str,
    metric: str,
    parts: list[tuple[int, str]],
    score: int | None,
    product_id: str,
    n: int,
) -> list[PartAround]:
    """On each board (shard, category), the members ordered before `product_id` were its score
    `score`, and the n just before that place and the n from it on with both metrics, the board's
    size and its shard's as_of (lua/part_around.lua): one round trip, on one server or a Redis
    Cluster. No score (an unranked product): each board's size and as_of alone, nothing counted."""
    args = ["" if score is None else -score, product_id, n]
    replies = scripts_run(
        [
            (
                "part_around",
                [*member_keys(version, shard, window, metric, category)],
                [*args, rows_names_head(version, shard, part=True) if n else "", NAMES_BUCKETS, *STATE_READ],
            )
            for shard, category in parts
        ]
    )
    return [_part_around(version, shard, reply) for reply, (shard, _) in zip(replies, parts, strict=True)]


def _part_around(version: int, shard: int, reply: list) -> PartAround:
    before, start, rows, others, total, state, names = reply
    read = scored_rows(rows, others)
    return PartAround(
        before=PartBefore(as_of=state_as_of(version, shard, state), total=int(total), before=int(before)),
        start=int(start),
        rows=read,
        names=names_found(read, names),
    )


@translated
def split_around(
    *, version: int, window: str, metric: str, parts: list[tuple[int, str]], own: int, product_id: str, n: int
) -> tuple[MemberAround, list[PartAround]]:
    """A product's standing on a split board whose parts are `parts` ((shard, part) each), `own`
    the index of the one that holds it: in its own part, member_around's answer (its rank, its
    scores, the n members either side); in each other part, in order, parts_around's with its
    score; the rows' names with them. One round trip on one server (lua/split_around.lua reads every
    part in one call); two on a Redis Cluster, where no call reaches two parts' slots: its own part,
    then the others at once, each naming its rows from its own copy of the names."""
    shard, part = parts[own]
    others = [p for i, p in enumerate(parts) if i != own]
    if clustered():
        mine = member_around(
            version=version,
            shard=shard,
            window=window,
            metric=metric,
            category=part,
            product_id=product_id,
            n=n,
            part=True,
        )
        ranked = mine.found.rank is not None
        read = parts_around(
            version=version,
            window=window,
            metric=metric,
            parts=others,
            score=mine.found.score if ranked else None,
            product_id=product_id,
            n=n if ranked else 0,
        )
        return mine, read
    keys = [key for s, c in [parts[own], *others] for key in member_keys(version, s, window, metric, c)]
    names = rows_names_head(version, shard, part=True) if n else ""
    args: list[str | int] = [product_id, n, names, NAMES_BUCKETS, *STATE_READ]
    replies = script("split_around")(keys=keys, args=args, client=fast())
    return around_of(version, shard, replies[0]), [
        _part_around(version, s, reply) for (s, _), reply in zip(others, replies[1:], strict=True)
    ]


@translated
def parts_ranges(
    *, version: int, window: str, metric: str, ranges: list[tuple[int, str, int, int]]
) -> list[BoardSlice]:
    """Ranks start..stop (0-based, inclusive) of several boards ((shard, category, start, stop)
    each) with this metric's scores only (the other's 0), each board's size and its shard's as_of:
    one round trip. For a merge's probes; a page's rows with both metrics are parts_rows'."""
    pipe = fast().pipeline(transaction=False)
    for shard, category, start, stop in ranges:
        key = board_key(version, shard, window, metric, category)
        if stop >= start:
            pipe.zrange(key, start, stop, withscores=True)
        else:
            pipe.zcard(key)  # a place holder: nothing to read from this board
        pipe.zcard(key)
        pipe.hmget(state_key(version, shard), STATE_READ)
    values = pipe.execute()
    out = []
    for i, (shard, _, start, stop) in enumerate(ranges):
        rows, total, state = values[3 * i : 3 * i + 3]
        rows = rows if stop >= start else []
        out.append(
            BoardSlice(
                as_of=state_as_of(version, shard, state),
                total=total,
                rows=[(m.decode(), int(-s), 0) for m, s in rows],
            )
        )
    return out


@dataclass
class PartRows:
    """Ranks of a part, for a merge: each row (its score as stored, negated, a whole number; the
    member as Redis sent it), in the board's order, which is the order of these tuples (score, then
    member by bytes)."""

    as_of: float | None
    total: int
    rows: list[tuple[int, bytes]]


@translated
def parts_rows(
    *, version: int, window: str, metric: str, ranges: list[tuple[int, str, int, int]]
) -> list[PartRows]:
    """Ranks start..stop (0-based, inclusive) of several boards ((shard, category, start, stop)
    each) with this metric's scores, each board's size and its shard's as_of, in one round trip: a
    ZRANGE, a ZCARD and an HMGET a board, as board_slice reads a whole board's, on one server or a
    Redis Cluster. The members are left as sent: a merge orders the rows as they are, and only the
    rows it keeps are turned into ids and given their other metric (members_scores)."""
    pipe = fast().pipeline(transaction=False)
    for shard, category, start, stop in ranges:
        key = board_key(version, shard, window, metric, category)
        # As Redis sends it: redis-py's own reading of the scores took most of a deep page's time.
        pipe.execute_command("ZRANGE", key, start, stop, "WITHSCORES")
        pipe.zcard(key)
        pipe.hmget(state_key(version, shard), STATE_READ)
    values = pipe.execute()
    return [
        PartRows(
            as_of=state_as_of(version, shard, state),
            total=total,
            rows=[(int(score), member) for member, score in score_pairs(rows)],
        )
        for (shard, _, _, _), rows, total, state in zip(
            ranges, values[0::3], values[1::3], values[2::3], strict=True
        )
    ]


@translated
def parts_histogram(
    *, version: int, window: str, metric: str, parts: list[tuple[int, str]], edges: list[int]
) -> list[Thresholds]:
    """Each board's size, histogram over `edges` and shard's as_of (board_thresholds without ranks):
    one round trip."""
    args = [0, len(edges), *(-edge for edge in edges), *STATE_READ]
    replies = _on_boards("thresholds", version=version, window=window, metric=metric, parts=parts, args=args)
    return [
        Thresholds(
            as_of=state_as_of(version, shard, state),
            total=int(total),
            ranks=[],
            counts=[int(c) for c in counts],
        )
        for (total, _, counts, state), (shard, _) in zip(replies, parts, strict=True)
    ]

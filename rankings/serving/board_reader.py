"""The one reader of boards: a board's slice, heads, a member's rank, its neighbours and the sales
beside an engagement board, whole or split alike (rankings/serving/merge.py merges a split
board's parts), and copies of small boards read at random.

The selectors ask it for a board by category and never branch on the layout."""

import threading
import time
from typing import Any

from rankings.conf import ENGAGEMENT_METRICS, SALES_METRICS
from rankings.engine import store
from rankings.engine.shards import Layout
from rankings.serving import answers, merge
from rankings.serving.layouts import layout_of
from rankings.serving.memory import WeighedLRU, WeighedTTL

# A board whose ranks or neighbours are asked for many different products within FRESH_SECONDS (a
# reader of random products: product pages of the long tail) is copied whole into the process, when
# it is small enough, and answered from the copy until a tick writes the board's shard (checked
# every FRESH_SECONDS, so a copy is as fresh as a remembered answer).
# Otherwise each such read costs a Redis round trip, more than the rest of the request.
BOARD_COPY_AFTER = 16  # uncached rank or neighbour reads of one board within answers.FRESH_SECONDS
BOARD_COPY_MEMBERS = 20_000  # the largest board copied: a few ms of Redis time, a few MB here
# Boards copied at once, per process: about 7 of the largest (6.6 MB each), more of smaller ones.
BOARD_COPIES_BYTES = 48 * 2**20  # bytes
# Rank and neighbour reads counted per board, within FRESH_SECONDS: about 3,000 boards.
BOARD_READS_BYTES = 2**20  # bytes

# Each copied board's [copy, when it was last known current]; None for a board too large to copy.
_board_copies = WeighedLRU(name=f"{__name__}._board_copies", maxsize=BOARD_COPIES_BYTES)
_board_reads = WeighedTTL(
    name=f"{__name__}._board_reads", maxsize=BOARD_READS_BYTES, ttl=answers.FRESH_SECONDS
)
_cache_lock = threading.Lock()


def sales_beside(
    version: int, layout: Layout, window: str, metric: str, boards: list[tuple[str, list[str]]]
) -> list[dict[str, tuple[int, int]]]:
    """For an engagement metric, each (category, product ids)'s units and revenue cents on the sales
    boards of the same window (of a split category, each product's on the part that holds it), in
    one round trip; nothing to read for a sales metric."""
    if metric not in ENGAGEMENT_METRICS:
        return [{} for _ in boards]
    held = []  # per board asked, the boards holding its products: board -> product ids
    for category, members in boards:
        parts: dict[str, list[str]] = {}
        for pid in members:
            parts.setdefault(layout.board_of(category, pid), []).append(pid)
        held.append(parts)
    lookups = [
        (layout.shard_of(board), window, m, board, members)
        for parts in held
        for board, members in parts.items()
        for m in SALES_METRICS
    ]
    found = iter(store.members_scores(version=version, lookups=lookups))
    sales = []
    for parts in held:
        beside: dict[str, tuple[int, int]] = {}
        for members in parts.values():
            units, cents = next(found), next(found)
            beside.update((pid, (units.get(pid, 0), cents.get(pid, 0))) for pid in members)
        sales.append(beside)
    return sales


def heads_read(
    categories: list[str], *, limits: dict[str, int], window: str, metric: str
) -> dict[str, store.BoardSlice | None] | None:
    """The heads of the boards of `categories`, in one round trip; None when Redis fails."""
    if not categories:
        return {}
    try:
        version = store.served_version()
        layout = layout_of(version)
        if layout.split:
            read = merge.heads(
                version=version, layout=layout, boards=[(c, window, metric, limits[c]) for c in categories]
            )
        else:
            read = store.board_heads(
                version=version,
                boards=[(layout.shard_of(c), window, metric, c, limits[c]) for c in categories],
            )
    except store.StoreError:
        return None
    return dict(zip(categories, read, strict=True))


def _split_member_rank(
    version: int, layout: Layout, window: str, metric: str, category: str, product_id: str
) -> store.MemberRank:
    """A product's rank on a split board: from copies of its parts when it has them (random products
    of a small split board, as for a whole board), else merged from Redis."""
    parts = [(version, layout.shard_of(part), window, metric, part) for part in layout.boards_of(category)]
    copies = [_board_copy(part) for part in parts]
    if all(copy is not None for copy in copies):
        return merge.member_rank_copied(
            layout=layout, category=category, product_id=product_id, copies=copies
        )
    return merge.member_rank(
        version=version, layout=layout, window=window, metric=metric, category=category, product_id=product_id
    )


def _member_rank(board: tuple[int, int, str, str, str], product_id: str) -> store.MemberRank:
    """A product's rank on a board (version, shard, window, metric, category): from the board's
    copy when it has one, else from Redis."""
    copy = _board_copy(board)
    if copy is not None:
        return copy.member(product_id)
    version, shard, window, metric, category = board
    return store.member_rank(
        version=version, shard=shard, window=window, metric=metric, category=category, product_id=product_id
    )


def _board_copy(board: tuple[int, int, str, str, str]) -> store.BoardCopy | None:
    """The board's copy, made once its rank and neighbour reads within answers.FRESH_SECONDS reach
    BOARD_COPY_AFTER; None before, and for a board too large to copy. Every FRESH_SECONDS a copy is
    checked against its shard's state, one small read, and kept for as long as no tick has written
    the shard."""
    now = time.monotonic()
    version, shard, window, metric, category = board
    with _cache_lock:
        held = _board_copies.get(board)
    if held is not None:
        copy, checked = held
        if now - checked < answers.FRESH_SECONDS:
            return copy
        if copy is not None and store.shard_stamp(version=version, shard=shard) == copy.stamp:
            with _cache_lock:
                held[1] = now  # in place: a copy is weighed once, when it is stored
            return copy
        with _cache_lock:
            _board_copies.pop(board, None)
    with _cache_lock:
        reads = _board_reads[board] = _board_reads.get(board, 0) + 1
    if reads < BOARD_COPY_AFTER:
        return None
    copy = store.board_copy(
        version=version, shard=shard, window=window, metric=metric, category=category, most=BOARD_COPY_MEMBERS
    )
    with _cache_lock:
        _board_copies[board] = [copy, now]
        _board_reads.pop(board, None)
    return copy


def board_slice(
    version: int, layout: Layout, *, category: str, window: str, metric: str, start: int, stop: int
) -> store.BoardSlice:
    """Ranks start+1 … stop+1 of a board (0-based, inclusive), with its total and instant."""
    ranks: dict[str, Any] = {
        "window": window,
        "metric": metric,
        "category": category,
        "start": start,
        "stop": stop,
    }
    if category in layout.split:
        return merge.board_slice(version=version, layout=layout, **ranks)
    return store.board_slice(version=version, shard=layout.shard_of(category), **ranks)


def member_rank(
    version: int, layout: Layout, *, category: str, window: str, metric: str, product_id: str
) -> store.MemberRank:
    """A product's rank on a board: from copies of the board (of its parts) when it has them,
    else from Redis."""
    if category in layout.split:
        return _split_member_rank(version, layout, window, metric, category, product_id)
    return _member_rank((version, layout.shard_of(category), window, metric, category), product_id)


def members_ranks(
    version: int, layout: Layout, *, categories: list[str], window: str, metric: str, product_id: str
) -> list[store.MemberRank]:
    """A product's rank on each board of `categories`, in their order: the whole boards in one
    round trip, each split board merged from its parts."""
    whole = [c for c in categories if c not in layout.split]
    found = store.members_ranks(
        version=version,
        window=window,
        metric=metric,
        product_id=product_id,
        boards=[(layout.shard_of(c), c) for c in whole],
    )
    if not layout.split:
        return list(found)
    by_category = dict(zip(whole, found, strict=True))
    return [
        by_category[c]
        if c not in layout.split
        else merge.member_rank(
            version=version, layout=layout, window=window, metric=metric, category=c, product_id=product_id
        )
        for c in categories
    ]


def neighbors(
    version: int, layout: Layout, *, category: str, window: str, metric: str, product_id: str, n: int
) -> tuple[store.MemberRank, int, store.BoardSlice | None, dict[str, str] | None]:
    """(the product's rank, the 0-based rank the slice starts at, the slice of the n products on
    either side of it and itself, what Redis's copy of the names held of them when the same read
    asked it, else None); no slice for a product without a rank there. A whole board in one round
    trip (with the names on one server), a split board in one or two with the names
    (merge.neighbors); from copies of the board (of its parts) when it has them, as a rank is, with
    none."""
    if category in layout.split:
        parts = [
            (version, layout.shard_of(part), window, metric, part) for part in layout.boards_of(category)
        ]
        copies = [_board_copy(part) for part in parts]
        if all(copy is not None for copy in copies):
            return *merge.neighbors_copied(
                layout=layout, category=category, product_id=product_id, n=n, copies=copies
            ), None
        return merge.neighbors(
            version=version,
            layout=layout,
            window=window,
            metric=metric,
            category=category,
            product_id=product_id,
            n=n,
        )
    board = (version, layout.shard_of(category), window, metric, category)
    copy = _board_copy(board)
    if copy is not None:
        read = copy.around(product_id, n)
    else:
        read = store.member_around(
            version=version,
            shard=board[1],
            window=window,
            metric=metric,
            category=category,
            product_id=product_id,
            n=n,
        )
    if read.found.rank is None:
        return read.found, 0, None, None
    return read.found, read.start, read.board, read.names


def thresholds(
    version: int,
    layout: Layout,
    *,
    category: str,
    window: str,
    metric: str,
    ranks: list[int],
    edges: list[int],
) -> store.Thresholds:
    """The board's scores at `ranks` and its histogram over `edges` (of a split board, the parts'
    histograms summed and the ranks from their merge)."""
    board: dict[str, Any] = {
        "window": window,
        "metric": metric,
        "category": category,
        "ranks": ranks,
        "edges": edges,
    }
    if category in layout.split:
        return merge.thresholds(version=version, layout=layout, **board)
    return store.board_thresholds(version=version, shard=layout.shard_of(category), **board)


def ordered_before(
    version: int, layout: Layout, *, category: str, window: str, metric: str, score: int, product_id: str
) -> int:
    """How many members of the board a product of `score` would rank behind."""
    board: dict[str, Any] = {
        "window": window,
        "metric": metric,
        "category": category,
        "score": score,
        "product_id": product_id,
    }
    if category in layout.split:
        return merge.ordered_before(version=version, layout=layout, **board)
    return store.ordered_before(version=version, shard=layout.shard_of(category), **board)

"""What it takes to climb a board: the scores at ranks 1, 10, 100, 1,000 and 10,000, the
board's histogram of scores, and how much more a product needs to reach the next of those ranks.

Read from the board itself in one round trip (a few ZCOUNT and ZRANGE of one member each, so
O(log n) whatever the board's size) and remembered like every answer.
"""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from rankings.engine import store
from rankings.engine.instants import instant
from rankings.serving import board_reader
from rankings.serving.answers import NotFound, Unavailable, money, reading, served
from rankings.serving.categories import category_name
from rankings.serving.layouts import layout_of

RANKS = (1, 10, 100, 1_000, 10_000)


def _edges() -> list[int]:
    """Histogram edges in a metric's own steps: 1, 2, 5, 10, 20, 50, … up to 5 × 10^15."""
    return [step * 10**power for power in range(16) for step in (1, 2, 5)]


# A count's steps are units (views, wishes); revenue's are whole currency units, after a first
# bucket of the amounts under one (in cents: 1, then 100, 200, 500, …).
_EDGES = {"count": _edges(), "revenue": [1, *(edge * 100 for edge in _edges())]}


def _score(metric: str, value: int) -> int | Decimal:
    """A board's score as the API speaks of it: revenue in money, the other metrics as counts."""
    return money(value) if metric == "revenue" else value


@dataclass(frozen=True, slots=True)
class Thresholds:
    category: str
    window: str
    metric: str
    as_of: dt.datetime | None
    total: int
    thresholds: tuple[tuple[int, int | Decimal], ...]  # (rank, score) while the board is that deep
    buckets: tuple[tuple[int | Decimal, int | Decimal, int], ...]  # (min, max, members), low to high
    # The member at each threshold rank, for what it takes to pass it (ties are ordered by id).
    members: tuple[tuple[int, str, int], ...] = ()
    stale: bool = False


@reading
def board_thresholds(*, category: str, window: str, metric: str) -> Thresholds:
    category_name(category)
    return served(
        ("thresholds", category, window, metric),
        lambda: _board_thresholds(category=category, window=window, metric=metric),
    )


def _board_thresholds(*, category: str, window: str, metric: str) -> Thresholds:
    version = store.served_version()
    layout = layout_of(version)
    edges = _EDGES["revenue" if metric == "revenue" else "count"]
    found = board_reader.thresholds(
        version, layout, category=category, window=window, metric=metric, ranks=list(RANKS), edges=edges
    )
    return Thresholds(
        category=category,
        window=window,
        metric=metric,
        as_of=instant(found.as_of),
        total=found.total,
        thresholds=tuple((rank, _score(metric, score)) for rank, _, score in found.ranks),
        buckets=_buckets(metric, edges, found.counts, top=found.ranks[0][2] if found.ranks else 0),
        members=tuple(found.ranks),
    )


def _buckets(metric: str, edges: list[int], counts: list[int], top: int) -> tuple:
    """The histogram from the lowest non-empty bucket to the highest, empty ones between included."""
    filled = [i for i, count in enumerate(counts) if count]
    if not filled:
        return ()
    return tuple(
        (
            _score(metric, edges[i]),
            _score(metric, edges[i + 1] - 1 if i + 1 < len(edges) else top),
            counts[i],
        )
        for i in range(filled[0], filled[-1] + 1)
    )


@dataclass(frozen=True, slots=True)
class Climb:
    """`more` units (or revenue) in the window would give the product `rank`: the next threshold
    rank, or better where passing its member also passes members tied with it."""

    category: str
    more: int | Decimal
    rank: int


def product_climb(*, product_id: str, category: str, window: str, metric: str, rank: int | None, score: int):
    """What would lift a product from `rank` (None: unranked) with `score` to the next threshold
    rank above it; None at the top, on an empty board, or while Redis is away."""
    try:
        thresholds = board_thresholds(category=category, window=window, metric=metric)
    except (NotFound, Unavailable):
        return None
    above = [row for row in thresholds.members if rank is None or row[0] < rank]
    if not above or thresholds.stale:
        return None
    _, member, target = above[-1]
    # Passing the member at the threshold: a higher score, or the same score and a smaller id.
    more = target - score + (1 if product_id.encode() > member.encode() else 0)
    if more < 1:  # a tick moved the product between the two reads
        return None
    try:
        version = store.served_version()
        layout = layout_of(version)
        before = board_reader.ordered_before(
            version,
            layout,
            category=category,
            window=window,
            metric=metric,
            score=score + more,
            product_id=product_id,
        )
    except store.StoreError:
        return None
    return Climb(category=category, more=_score(metric, more), rank=before + 1)

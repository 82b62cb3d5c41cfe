"""What moves (DESIGN §2c): movers and shakers, hot new releases and a product's rank history.

Movers compare a board's first SNAPSHOT_DEPTH ranks now (Redis) with the snapshot 24 hours
before (PostgreSQL, remembered per process: rankings/serving/then.py). New releases filter a
board at read time by each product's release instant, so they are exact at any instant: a
product leaves the moment its release is RANKINGS_NEW_DAYS behind the board's asOf, and a late
sale with an earlier time moves its release at once, without a tick. History reads the ranks of
one product in a board's snapshots. Every answer is remembered as the other reads are
(selectors._served): fresh for half a second, last known while Redis is unreachable.
"""

import dataclasses
import datetime as dt
from dataclasses import dataclass

from django.db import DatabaseError, connection

from catalogue.models import Product
from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.models import ProductTotal, RankingVersion, Snapshot, SnapshotHour
from rankings.serving import selectors
from rankings.serving.selectors import (
    Board,
    RankedProduct,
    _items,
    _names,
    _placed,
    _product,
    _reading,
    _served,
    category_name,
    instant,
)
from rankings.serving.then import gain_percent, ranks_then, then_of

# A new-releases board reads its board this many members at a time, until it has what it needs.
NEW_READ_CHUNK = 2000  # members
HOUR = 3600  # seconds


@dataclass(frozen=True, slots=True)
class Movers(Board):
    """A board's movers; `then` is the hour of the snapshot compared, None when there is none."""


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    at: dt.datetime
    rank: int | None


@dataclass(frozen=True, slots=True)
class History:
    product_id: str
    category: str
    window: str
    metric: str
    points: tuple[HistoryPoint, ...]
    stale: bool = False


def _depth_slice(category: str, window: str, metric: str, start: int, stop: int) -> store.BoardSlice:
    version, shard = _placed(category)
    return store.board_slice(
        version=version, shard=shard, window=window, metric=metric, category=category, start=start, stop=stop
    )


# --- movers and shakers ----------------------------------------------------------------


@_reading
def board_movers(*, category: str, window: str, metric: str, limit: int) -> Movers:
    """The products ranked now within the first DEPTH whose rank 24 hours before was lower or none."""
    selectors.split_refused(category)
    category_name(category)
    return _served(
        ("movers", category, window, metric, limit),
        lambda: _board_movers(category=category, window=window, metric=metric, limit=limit),
    )


def _board_movers(*, category: str, window: str, metric: str, limit: int) -> Movers:
    found = _depth_slice(category, window, metric, 0, rankings_settings.SNAPSHOT_DEPTH - 1)
    as_of = instant(found.as_of)
    if as_of is None:  # the shard is unknown: not "all new"
        raise store.Unreachable("the board could not be read")
    try:
        then = ranks_then(category=category, window=window, metric=metric, as_of=as_of, strict=True)
    except DatabaseError as error:
        raise store.Unreachable("the snapshot the board is compared with could not be read") from error
    # No snapshot of that hour: every rank then is unknown (None), and the answer says so (`then` null).
    moved = []
    for place, row in enumerate(found.rows):
        rank, rank_then = place + 1, (then or {}).get(row[0])
        if rank_then is None or rank_then > rank:
            moved.append((rank, rank_then, row))
    # Unranked then first (by rank now), then the largest gain, then rank now; ranks are unique.
    moved.sort(key=lambda m: (m[1] is not None, -(gain_percent(m[0], m[1]) or 0), m[0]))
    chosen = moved[:limit]
    names = _names([row[0] for _, _, row in chosen])
    items = tuple(
        RankedProduct(
            rank,
            row[0],
            names.get(row[0], row[0]),
            *selectors._figures(metric, row[1], row[2], None),
            rank_then=rank_then,
        )
        for rank, rank_then, row in chosen
    )
    return Movers(
        category=category,
        window=window,
        metric=metric,
        as_of=as_of,
        total=len(moved),
        items=items,
        then=then_of(as_of) if then is not None else None,
    )


# --- hot new releases ------------------------------------------------------------------

_RELEASED = f"""
SELECT p.product_id, COALESCE(p.released_at, t.first_sold_at)
FROM {Product._meta.db_table} p LEFT JOIN {ProductTotal._meta.db_table} t ON t.product_id = p.product_id
WHERE p.product_id = ANY(%s)
"""


def releases(product_ids: list[str]) -> dict[str, dt.datetime]:
    """product -> release instant: the catalogue's where an editor set it, else its first sale's ts."""
    if not product_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_RELEASED, [product_ids])
        return {product_id: at for product_id, at in cursor.fetchall() if at is not None}


@_reading
def board_new(*, category: str, window: str, metric: str, limit: int, offset: int) -> Board:
    """The board restricted to the products released at most NEW_DAYS days before its asOf."""
    selectors.split_refused(category)
    category_name(category)
    return _served(
        ("new", category, window, metric, limit, offset),
        lambda: _board_new(category=category, window=window, metric=metric, limit=limit, offset=offset),
    )


def _board_new(*, category: str, window: str, metric: str, limit: int, offset: int) -> Board:
    """Reads the whole board a chunk at a time (the total is the number of new products on it);
    each chunk's releases are one query."""
    rows: list[tuple[str, int, int, dt.datetime]] = []
    as_of = None
    start = 0
    while True:
        found = _depth_slice(category, window, metric, start, start + NEW_READ_CHUNK - 1)
        if as_of is None:
            as_of = found.as_of
        elif found.as_of != as_of:  # a tick between two chunks: read again, all of one instant
            rows, start, as_of = [], 0, None
            continue
        if as_of is None:
            break
        cutoff = instant(as_of) - dt.timedelta(days=rankings_settings.NEW_DAYS)
        try:
            released = releases([row[0] for row in found.rows])
        except DatabaseError as error:
            raise store.Unreachable("the catalogue did not answer") from error
        rows.extend(
            (pid, score, other, released[pid])
            for pid, score, other in found.rows
            if released.get(pid, cutoff - dt.timedelta(1)) >= cutoff
        )
        start += NEW_READ_CHUNK
        if start >= found.total:
            break
    at = instant(as_of)
    page = rows[offset : offset + limit]
    items = _items([(pid, score, other) for pid, score, other, _ in page], offset + 1, metric)
    items = tuple(dataclasses.replace(item, released_at=page[i][3]) for i, item in enumerate(items))
    return Board(category=category, window=window, metric=metric, as_of=at, total=len(rows), items=items)


# --- a product's rank history ----------------------------------------------------------


@_reading
def product_history(*, product_id: str, category: str, window: str, metric: str, days: int) -> History:
    """The product's rank in each hourly snapshot of the last `days` days, oldest first; None where
    it was not in the snapshot's first DEPTH ranks."""
    selectors.split_refused(category)
    category_name(category)
    return product_histories(
        product_id=product_id, categories=[category], window=window, metric=metric, days=days
    )[category]


_HISTORY = f"""
WITH hours AS (
    SELECT at FROM {SnapshotHour._meta.db_table}
    WHERE version = %(version)s AND at > (
        SELECT max(at) FROM {SnapshotHour._meta.db_table} WHERE version = %(version)s
    ) - make_interval(days => %(days)s)
)
SELECT hours.at, s.category, array_position(s.products, %(product)s::varchar)
FROM hours LEFT JOIN {Snapshot._meta.db_table} s
  ON s.version = %(version)s AND s.at = hours.at AND s.category = ANY(%(categories)s)
  AND s.window = %(window)s AND s.metric = %(metric)s
ORDER BY hours.at
"""


def product_histories(
    *, product_id: str, categories: list[str], window: str, metric: str, days: int
) -> dict[str, History]:
    """product_history of several categories in one query (a product's page charts them all)."""
    _product(product_id)
    hours: dict[dt.datetime, dict[str, int]] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                _HISTORY,
                {
                    "version": RankingVersion.active_number(),  # its history: PostgreSQL's alone
                    "product": product_id,
                    "days": days,
                    "categories": categories,
                    "window": window,
                    "metric": metric,
                },
            )
            for at, category, rank in cursor.fetchall():
                ranks = hours.setdefault(at, {})
                if category is not None and rank is not None:
                    ranks[category] = rank
    except DatabaseError as error:
        raise selectors.Unavailable("rank history is unavailable right now; try again shortly") from error
    return {
        category: History(
            product_id,
            category,
            window,
            metric,
            tuple(HistoryPoint(at, ranks.get(category)) for at, ranks in hours.items()),
        )
        for category in categories
    }

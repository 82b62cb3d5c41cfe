"""What moves (DESIGN §2c): movers and shakers, hot new releases and a product's rank history.

Movers compare a board's first SNAPSHOT_DEPTH ranks now (Redis) with the snapshot 24 hours
before (PostgreSQL, remembered per process: rankings/serving/then.py). New releases are the
board restricted to the latest releases, read in one consistent pass and kept, one answer per
board, until a tick writes its shard (rankings/serving/releases.py): a product leaves the moment
its release is RANKINGS_NEW_DAYS behind the board's asOf. History reads the ranks of one product
in a board's snapshots. Every other answer is remembered as the other reads are
(selectors._served): fresh for half a second, last known while Redis is unreachable.
"""

import dataclasses
import datetime as dt
from dataclasses import dataclass

from django.db import DatabaseError, connection

from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.models import Snapshot, SnapshotMark
from rankings.serving import releases, selectors
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

HOUR = 3600  # seconds


@dataclass(frozen=True, slots=True)
class Movers(Board):
    then: dt.datetime | None = None  # the hour of the snapshot compared


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
    then = ranks_then(category=category, window=window, metric=metric, as_of=as_of)
    if then is None:  # no instant (the shard is unknown) or no snapshot could be read: not "all new"
        raise store.Unreachable("the board or the snapshot it is compared with could not be read")
    moved = []
    for place, row in enumerate(found.rows):
        rank, rank_then = place + 1, then.get(row[0])
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
        then=then_of(as_of),
    )


# --- hot new releases ------------------------------------------------------------------


@_reading
def board_new(*, category: str, window: str, metric: str, limit: int, offset: int) -> Board:
    """Ranks offset+1 … offset+limit of the board restricted to the products released at most
    NEW_DAYS days before its asOf (the NEW_MOST latest of them): a slice of the board's one answer
    (rankings/serving/releases.py); its last known while Redis or the catalogue is away."""
    selectors.split_refused(category)
    category_name(category)
    stale = False
    try:
        version, shard = _placed(category)
        found = releases.new_releases(
            version=version, shard=shard, window=window, metric=metric, category=category
        )
    except (store.StoreError, DatabaseError) as error:
        found, stale = releases.last_known(category=category, window=window, metric=metric), True
        if found is None:
            raise selectors.Unavailable("rankings are unavailable right now; try again shortly") from error
    page = found.rows[offset : offset + limit]
    items = _items([(pid, score, other) for pid, score, other, _ in page], offset + 1, metric)
    return Board(
        category=category,
        window=window,
        metric=metric,
        as_of=instant(found.as_of),
        total=found.total,
        items=tuple(
            dataclasses.replace(item, released_at=row[3]) for item, row in zip(items, page, strict=True)
        ),
        stale=stale or selectors._catalogue_failed.get(),
    )


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
    SELECT DISTINCT at FROM {SnapshotMark._meta.db_table}
    WHERE at > (SELECT max(at) FROM {SnapshotMark._meta.db_table}) - make_interval(days => %(days)s)
)
SELECT hours.at, s.category, array_position(s.products, %(product)s::varchar)
FROM hours LEFT JOIN {Snapshot._meta.db_table} s
  ON s.at = hours.at AND s.category = ANY(%(categories)s) AND s.window = %(window)s AND s.metric = %(metric)s
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

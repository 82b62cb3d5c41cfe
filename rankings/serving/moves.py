"""What moves (docs/api.md, "What moves"): movers and shakers, hot new releases and a product's rank history.

Movers compare a board's first SNAPSHOT_DEPTH ranks now (Redis) with the snapshot 24 hours
before (PostgreSQL, remembered per process: rankings/serving/rank_then.py). New releases are the
board restricted to the latest releases, read in one consistent pass and kept, one answer per
board, until a tick writes its shard (rankings/serving/releases.py): a product leaves the moment
its release is RANKINGS_NEW_DAYS behind the board's asOf. History reads the ranks of one product
in a board's snapshots, remembered per board until the next hour is snapshotted. Every other
answer is remembered as the other reads are (answers.served): fresh for half a second, last
known while Redis is unreachable.
"""

import dataclasses
import datetime as dt
import threading
import time
from array import array
from dataclasses import dataclass

from django.db import DatabaseError, connection

from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.engine.instants import instant
from rankings.engine.shards import active
from rankings.models import Snapshot, SnapshotHour
from rankings.serving import releases, selectors
from rankings.serving.answers import Board, RankedProduct, catalogue_failed, figures, reading, served
from rankings.serving.boards import items_of
from rankings.serving.catalogue_reads import catalogue_product, product_names
from rankings.serving.categories import category_name
from rankings.serving.layouts import placed
from rankings.serving.memory import WeighedLRU, WeighedTTL
from rankings.serving.rank_then import gain_percent, ranks_then, then_of

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
    version, shard = placed(category)
    return store.board_slice(
        version=version, shard=shard, window=window, metric=metric, category=category, start=start, stop=stop
    )


# --- movers and shakers ----------------------------------------------------------------


@reading
def board_movers(*, category: str, window: str, metric: str, limit: int) -> Movers:
    """The products ranked now within the first DEPTH whose rank 24 hours before was lower or none."""
    selectors.split_refused(category)
    category_name(category)
    return served(
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
    names = product_names([row[0] for _, _, row in chosen])
    items = tuple(
        RankedProduct(
            rank,
            row[0],
            names.get(row[0], row[0]),
            *figures(metric, row[1], row[2], None),
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


@reading
def board_new(*, category: str, window: str, metric: str, limit: int, offset: int) -> Board:
    """Ranks offset+1 … offset+limit of the board restricted to the products released at most
    NEW_DAYS days before its asOf (the NEW_MOST latest of them): a slice of the board's one answer
    (rankings/serving/releases.py); its last known while Redis or the catalogue is away."""
    selectors.split_refused(category)
    category_name(category)
    stale = False
    try:
        version, shard = placed(category)
        found = releases.new_releases(
            version=version, shard=shard, window=window, metric=metric, category=category
        )
    except (store.StoreError, DatabaseError) as error:
        held = releases.last_known(category=category, window=window, metric=metric)
        if held is None:
            raise selectors.Unavailable("rankings are unavailable right now; try again shortly") from error
        found, stale = held, True
    page = found.rows[offset : offset + limit]
    items = items_of([(pid, score, other) for pid, score, other, _ in page], offset + 1, metric)
    return Board(
        category=category,
        window=window,
        metric=metric,
        as_of=instant(found.as_of),
        total=found.total,
        items=tuple(
            dataclasses.replace(item, released_at=row[3]) for item, row in zip(items, page, strict=True)
        ),
        stale=stale or catalogue_failed.get(),
    )


# --- a product's rank history ----------------------------------------------------------


@reading
def product_history(*, product_id: str, category: str, window: str, metric: str, days: int) -> History:
    """The product's rank in each hourly snapshot of the last `days` days, oldest first; None where
    it was not in the snapshot's first DEPTH ranks."""
    selectors.split_refused(category)
    category_name(category)
    return product_histories(
        product_id=product_id, categories=[category], window=window, metric=metric, days=days
    )[category]


# A rank history changes only when an hour is snapshotted: each board's history of a product is
# remembered until then, as its ranks (4 bytes an hour), the period's hours once for every board.
# An entry lives HISTORY_KEEP_SECONDS at most: a clock reset that takes an hour again with other
# ranks shows within that time.
HISTORY_CACHE_BYTES = 16 * 2**20  # bytes: about 4,000 histories of 32 days
HISTORY_KEEP_SECONDS = 300.0  # seconds
# The latest hour of the active version's history is read again after this long (one row of an
# index): a new hour shows in histories at most this much later, a small delay beside an hour.
LATEST_HOUR_SECONDS = 30.0  # seconds

# (version, product, category, window, metric, days, latest hour) -> ranks, one an hour, 0 for
# none; ("hours", version, days, latest hour) -> the version's hours in the period, oldest first.
_histories = WeighedTTL(
    name=f"{__name__}._histories",
    kind="history",
    maxsize=HISTORY_CACHE_BYTES,
    ttl=HISTORY_KEEP_SECONDS,
    timer=time.monotonic,
)
# version -> (when its latest hour was read, time.monotonic(); the hour)
_latest_hour = WeighedLRU(name=f"{__name__}._latest_hour", kind="history", maxsize=2**16)
_history_lock = threading.Lock()

_LATEST_HOUR = f"SELECT max(at) FROM {SnapshotHour._meta.db_table} WHERE version = %s"
# The hours of a version's history in the period: read once per period and hour, for every board.
_HOURS = f"""
SELECT at FROM {SnapshotHour._meta.db_table} WHERE version = %s AND at > %s AND at <= %s ORDER BY at
"""
# A product's place in each of the boards' snapshots of the period: one row per board and hour,
# through the snapshots' (version, category, window, metric, at) index.
_PLACES = f"""
SELECT at, category, array_position(string_to_array(products, ' '), %(product)s::text)
FROM {Snapshot._meta.db_table}
WHERE version = %(version)s AND category = ANY(%(categories)s) AND "window" = %(window)s
  AND metric = %(metric)s AND at > %(since)s AND at <= %(latest)s
"""


def _served_version() -> int:
    """The version whose history is served: as the boards' reads know it (remembered a second),
    PostgreSQL's when Redis does not answer, so that a history needs no Redis."""
    try:
        return store.served_version()
    except store.StoreError:
        return active().number


def _hours(version: int, days: int) -> tuple[dt.datetime, ...]:
    """The hours of the version's history in the last `days` days up to its latest: a query of one
    index row every LATEST_HOUR_SECONDS, and one of the period's hours when a new hour is recorded."""
    with _history_lock:
        read_at, latest = _latest_hour.get(version, (float("-inf"), None))
    if time.monotonic() - read_at >= LATEST_HOUR_SECONDS:
        with connection.cursor() as cursor:
            cursor.execute(_LATEST_HOUR, [version])
            (latest,) = cursor.fetchone()
        with _history_lock:
            _latest_hour[version] = (time.monotonic(), latest)
    if latest is None:
        return ()
    key = ("hours", version, days, latest)
    with _history_lock:
        hours = _histories.get(key)
    if hours is None:
        with connection.cursor() as cursor:
            cursor.execute(_HOURS, [version, latest - dt.timedelta(days=days), latest])
            hours = tuple(at for (at,) in cursor.fetchall())
        with _history_lock:
            _histories[key] = hours
    return hours


def _places(
    version: int, product_id: str, categories: list[str], window: str, metric: str, days: int, hours: tuple
) -> dict[str, array]:
    """category -> the product's rank in each of `hours` (0 where unranked): remembered ones from
    memory, the rest in one query. A board is remembered once its snapshot of the latest hour is
    read (its shard snapshots the hours in order, so it has every earlier one): until then its
    shard may not have taken it yet, and it is read again."""
    if not hours:
        return {category: array("I") for category in categories}
    keys = {
        category: (version, product_id, category, window, metric, days, hours[-1]) for category in categories
    }
    with _history_lock:
        remembered = {category: _histories.get(key) for category, key in keys.items()}
    found = {category: ranks for category, ranks in remembered.items() if ranks is not None}
    missing = [category for category in remembered if category not in found]
    if not missing:
        return found
    index = {at: i for i, at in enumerate(hours)}
    read = {category: array("I", bytes(4 * len(hours))) for category in missing}
    with connection.cursor() as cursor:
        cursor.execute(
            _PLACES,
            {
                "version": version,
                "product": product_id,
                "categories": missing,
                "window": window,
                "metric": metric,
                "since": hours[-1] - dt.timedelta(days=days),
                "latest": hours[-1],
            },
        )
        complete = set()
        for at, category, rank in cursor.fetchall():
            if rank is not None and at in index:
                read[category][index[at]] = rank
            if at == hours[-1]:
                complete.add(category)
    with _history_lock:
        for category in complete:
            _histories[keys[category]] = read[category]
    return found | read


def product_histories(
    *, product_id: str, categories: list[str], window: str, metric: str, days: int
) -> dict[str, History]:
    """product_history of several categories, each board's from memory until the next hour is
    snapshotted, the others' in one query (a product's page charts them all)."""
    catalogue_product(product_id)
    try:
        version = _served_version()
        hours = _hours(version, days)
        places = _places(version, product_id, categories, window, metric, days, hours)
    except DatabaseError as error:
        raise selectors.Unavailable("rank history is unavailable right now; try again shortly") from error
    return {
        category: History(
            product_id,
            category,
            window,
            metric,
            tuple(HistoryPoint(at, rank or None) for at, rank in zip(hours, places[category], strict=True)),
        )
        for category in categories
    }

"""Ranks 24 hours before (docs/api.md, "What moves"): a board's ranks in the snapshot it is compared with.

The snapshot compared with a board read as of `asOf` is the active version's taken 24 hours
before the latest hour at or before `asOf`: it was recorded long before any read that asks for it
and never changes, so each process keeps it (product -> rank) per version, board and hour and a
board's rank arrows cost a dictionary lookup per row, not a query. Where the version's history has
no such hour, the ranks then are unknown (None), never "all unranked".
"""

import datetime as dt
import threading

from django.db import DatabaseError

from rankings.conf import rankings_settings
from rankings.models import Snapshot, SnapshotHour
from rankings.serving.layouts import split_board
from rankings.serving.memory import WeighedLRU

HOUR = 3600  # seconds
THEN_HOURS = 24  # a board is compared with its snapshot this many hours before
# Snapshots remembered per process, bounded in bytes so that a client asking for every category's
# board cannot fill memory with them: about 380 boards of SNAPSHOT_DEPTH 1,000 members (125 KB
# each as product -> rank), thousands of smaller ones.
THEN_CACHE_BYTES = 48 * 2**20  # bytes

_known = WeighedLRU(name=f"{__name__}._known", kind="history", maxsize=THEN_CACHE_BYTES)
_lock = threading.Lock()


def then_of(as_of: dt.datetime | None) -> dt.datetime | None:
    """The hour of the snapshot a board read as of `as_of` is compared with; None when unknown."""
    if as_of is None:
        return None
    t = int(as_of.timestamp())
    return dt.datetime.fromtimestamp(t - t % HOUR - THEN_HOURS * HOUR, dt.UTC)


def snapshot_windows() -> tuple[str, ...]:
    return tuple(rankings_settings.SNAPSHOT_WINDOWS)


def _version() -> int | None:
    from rankings.engine import store

    try:
        return store.served_version()
    except store.StoreError:
        return None


def ranks_then(
    *, category: str, window: str, metric: str, as_of: dt.datetime | None, strict: bool = False
) -> dict[str, int] | None:
    """product -> rank in the compared snapshot; {} when it has none (no product had a rank
    then); None when unknown: the window has no snapshots, the version's history has no snapshot of
    that hour, or PostgreSQL did not answer (`strict`: raises DatabaseError instead)."""
    then = then_of(as_of)
    version = _version()
    if then is None or version is None or window not in snapshot_windows() or split_board(category):
        return None
    key = (version, category, window, metric, then)
    with _lock:
        known = _known.get(key, _UNKNOWN)
    if known is not _UNKNOWN:
        return known
    try:
        ranks = _ranks_read(version, category, window, metric, then)
    except DatabaseError:
        if strict:
            raise
        return None
    with _lock:
        _known[key] = ranks
    return ranks


_UNKNOWN = object()  # not remembered (None is remembered: no snapshot of that hour)


def _ranks_read(version: int, category: str, window: str, metric: str, then: dt.datetime) -> dict | None:
    if not SnapshotHour.objects.filter(version=version, at=then).exists():
        return None
    products = (
        Snapshot.objects.filter(version=version, category=category, window=window, metric=metric, at=then)
        .values_list("products", flat=True)
        .first()
    )
    return {product_id: i + 1 for i, product_id in enumerate(products or ())}


def ranks_then_prefetch(boards: list[tuple[str, str, str, dt.datetime | None]]) -> None:
    """Read the compared snapshots of many boards ((category, window, metric, asOf)) not yet known,
    in one query: a page of many boards' leaders pays one query, not one per board."""
    version = _version()
    if version is None:
        return
    wanted = set()
    for category, window, metric, as_of in boards:
        then = then_of(as_of)
        if then is not None and window in snapshot_windows():
            wanted.add((version, category, window, metric, then))
    with _lock:
        wanted = {key for key in wanted if _known.get(key, _UNKNOWN) is _UNKNOWN}
    if not wanted:
        return
    try:
        hours = set(
            SnapshotHour.objects.filter(version=version, at__in={key[4] for key in wanted}).values_list(
                "at", flat=True
            )
        )
        found: dict[tuple, dict[str, int] | None] = {key: {} if key[4] in hours else None for key in wanted}
        rows = Snapshot.objects.filter(
            version=version,
            category__in={key[1] for key in wanted},
            window__in={key[2] for key in wanted},
            metric__in={key[3] for key in wanted},
            at__in=hours,
        ).values_list("category", "window", "metric", "at", "products")
        for category, window, metric, at, products in rows:
            if (version, category, window, metric, at) in found:
                found[(version, category, window, metric, at)] = {p: i + 1 for i, p in enumerate(products)}
    except DatabaseError:
        return
    with _lock:
        _known.update(found)


def gain_percent(rank: int, rank_then: int | None) -> int | None:
    """floor(100 × (rankThen − rank) ÷ rank); None when there is no rank then."""
    if rank_then is None:
        return None
    return (100 * (rank_then - rank)) // rank


def move_of(item, window: str, *, known: bool = True) -> dict | None:
    """A row's arrow against 24 hours before: up, down, the same, or new; None where the window
    has no snapshots or the ranks 24 hours before are not `known`."""
    if window not in snapshot_windows() or not known:
        return None
    then = item.rank_then
    if then is None:
        return {"kind": "new", "text": "new", "label": "not in the first ranks 24 hours ago"}
    if then == item.rank:
        return {"kind": "same", "text": "=", "label": "the same rank as 24 hours ago"}
    by = abs(then - item.rank)
    places = f"{by:,} place{'s' * (by > 1)}"
    if then > item.rank:
        return {"kind": "up", "text": f"▲ {by:,}", "label": f"up {places} since 24 hours ago (was #{then:,})"}
    return {"kind": "down", "text": f"▼ {by:,}", "label": f"down {places} since 24 hours ago (was #{then:,})"}

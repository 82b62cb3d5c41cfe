"""Ranks 24 hours before (docs/api.md, "What moves"): a board's ranks in the snapshot it is compared with.

The snapshot compared with a board read as of `asOf` is the one taken 24 hours before the
latest hour at or before `asOf`: it was recorded long before any read that asks for it and never
changes, so each process keeps it (product -> rank) per board and hour and a board's rank
arrows cost a dictionary lookup per row, not a query.
"""

import datetime as dt
import threading

from django.db import DatabaseError

from rankings.conf import rankings_settings
from rankings.models import Snapshot
from rankings.serving.memory import WeighedLRU

HOUR = 3600  # seconds
THEN_HOURS = 24  # a board is compared with its snapshot this many hours before
# Snapshots remembered per process, bounded in bytes so that a client asking for every category's
# board cannot fill memory with them: about 380 boards of SNAPSHOT_DEPTH 1,000 members (125 KB
# each as product -> rank), thousands of smaller ones.
THEN_CACHE_BYTES = 48 * 2**20  # bytes

_known = WeighedLRU(maxsize=THEN_CACHE_BYTES)
_lock = threading.Lock()


def then_of(as_of: dt.datetime | None) -> dt.datetime | None:
    """The hour of the snapshot a board read as of `as_of` is compared with; None when unknown."""
    if as_of is None:
        return None
    t = int(as_of.timestamp())
    return dt.datetime.fromtimestamp(t - t % HOUR - THEN_HOURS * HOUR, dt.UTC)


def snapshot_windows() -> tuple[str, ...]:
    return tuple(rankings_settings.SNAPSHOT_WINDOWS)


def split_board(category: str) -> bool:
    """Whether the active version splits the category: its parts are snapshotted apart, so its rank
    24 hours before is unknown."""
    from rankings.engine import store
    from rankings.serving.selectors import _layout

    try:
        return category in _layout(store.active_version()).split
    except store.StoreError:
        return False


def ranks_then(
    *, category: str, window: str, metric: str, as_of: dt.datetime | None
) -> dict[str, int] | None:
    """product -> rank in the compared snapshot; {} when it has none (no product had a rank
    then); None when the window has no snapshots or PostgreSQL did not answer (unknown)."""
    then = then_of(as_of)
    if then is None or window not in snapshot_windows() or split_board(category):
        return None
    key = (category, window, metric, then)
    with _lock:
        known = _known.get(key)
    if known is not None:
        return known
    try:
        products = (
            Snapshot.objects.filter(category=category, window=window, metric=metric, at=then)
            .values_list("products", flat=True)
            .first()
        )
    except DatabaseError:
        return None
    ranks = {product_id: i + 1 for i, product_id in enumerate(products or ())}
    with _lock:
        _known[key] = ranks
    return ranks


def ranks_then_prefetch(boards: list[tuple[str, str, str, dt.datetime | None]]) -> None:
    """Read the compared snapshots of many boards ((category, window, metric, asOf)) not yet known,
    in one query: a page of many boards' leaders pays one query, not one per board."""
    wanted = set()
    for category, window, metric, as_of in boards:
        then = then_of(as_of)
        if then is not None and window in snapshot_windows():
            wanted.add((category, window, metric, then))
    with _lock:
        wanted = {key for key in wanted if _known.get(key) is None}
    if not wanted:
        return
    found: dict[tuple, dict[str, int]] = {key: {} for key in wanted}
    try:
        rows = Snapshot.objects.filter(
            category__in={key[0] for key in wanted},
            window__in={key[1] for key in wanted},
            metric__in={key[2] for key in wanted},
            at__in={key[3] for key in wanted},
        ).values_list("category", "window", "metric", "at", "products")
        for category, window, metric, at, products in rows:
            if (category, window, metric, at) in found:
                found[(category, window, metric, at)] = {p: i + 1 for i, p in enumerate(products)}
    except DatabaseError:
        return
    with _lock:
        _known.update(found)


def ranks_then_forget() -> None:
    with _lock:
        _known.clear()


def gain_percent(rank: int, rank_then: int | None) -> int | None:
    """floor(100 × (rankThen − rank) ÷ rank); None when there is no rank then."""
    if rank_then is None:
        return None
    return (100 * (rank_then - rank)) // rank


def move_of(item, window: str) -> dict | None:
    """A row's arrow against 24 hours before: up, down, the same, or new; None where the window
    has no snapshots."""
    if window not in snapshot_windows():
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

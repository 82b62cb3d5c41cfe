"""Hot new releases of a board, read in one consistent pass and kept, one answer per board.

The new products are the catalogue's latest releases (at most NEW_MOST: one indexed statement,
shared by the boards read within half a second); their scores come from the board in one script
together with the shard's state, so the answer is exact as of that state's asOf, at a cost that
grows with NEW_MOST and never with the board. A board's answer is kept until a tick writes its
shard (one small read tells), and every page of the list is a slice of it; it stops at MAX_DEPTH
ranks, the deepest a list reads. A release edited by an editor, or moved back by a late sale, shows
from the next tick on."""

import datetime as dt
import threading
import time
from dataclasses import dataclass

from django.db import connection

from catalogue.models import Product
from rankings.conf import MAX_DEPTH, rankings_settings
from rankings.engine import store
from rankings.models import ProductTotal
from rankings.serving.memory import WeighedLRU, WeighedTTL

# Rows of new releases kept per process, over every board (a row is a product id, two scores and
# an instant: about 200 bytes). A board keeps at most MAX_DEPTH rows, so the largest few boards'
# whole lists fit at once; a least recently read board is dropped first.
HELD_BYTES = 16 * 2**20  # bytes: about 50,000 rows

# A product's release is the catalogue's where an editor set it, else its first sale's time: the
# latest `most` of those at or after `since`, by two index scans (catalogue_product.released_at,
# rankings_producttotal.first_sold_at) that each stop after `most` rows.
_LATEST = f"""
(SELECT product_id, released_at FROM {Product._meta.db_table}
 WHERE released_at >= %(since)s ORDER BY released_at DESC, product_id LIMIT %(most)s)
UNION ALL
(SELECT t.product_id, t.first_sold_at
 FROM {ProductTotal._meta.db_table} t JOIN {Product._meta.db_table} p ON p.product_id = t.product_id
 WHERE t.first_sold_at >= %(since)s AND p.released_at IS NULL
 ORDER BY t.first_sold_at DESC, t.product_id LIMIT %(most)s)
ORDER BY 2 DESC, 1 LIMIT %(most)s
"""


@dataclass(frozen=True, slots=True)
class NewReleases:
    """A board's new releases, ranked among themselves, as of the shard's state `stamp`."""

    version: int
    shard: int
    stamp: tuple  # the shard's state as read with the scores (store.shard_stamp)
    as_of: float | None
    total: int  # new releases on the board
    rows: tuple[
        tuple[str, int, int, dt.datetime], ...
    ]  # (product, score, other score, released), first MAX_DEPTH


# The latest releases are the same for every board of one instant: read once for all of them, and
# again after this long, so that a product first sold meanwhile is among them by the next tick.
LATEST_SECONDS = 0.5  # seconds: what any answer of the read path may lag

_held = WeighedLRU(name=f"{__name__}._held", maxsize=HELD_BYTES)
# (since, most) -> the latest releases read for it: two instants, at most NEW_MOST products each
# (about 2 MB each at the default 10,000).
LATEST_BYTES = 8 * 2**20  # bytes
_latest = WeighedTTL(
    name=f"{__name__}._latest", maxsize=LATEST_BYTES, ttl=LATEST_SECONDS, timer=time.monotonic
)
_lock = threading.Lock()


def _cutoff(as_of: float) -> dt.datetime:
    """The earliest release still new on a board as of `as_of` (to the second, as asOf is shown)."""
    return dt.datetime.fromtimestamp(int(as_of), tz=dt.UTC) - dt.timedelta(days=rankings_settings.NEW_DAYS)


def latest_releases(*, since: dt.datetime, most: int) -> dict[str, dt.datetime]:
    """product -> release of the `most` latest products released at or after `since`: one statement,
    shared by every board read within LATEST_SECONDS."""
    with _lock:
        known = _latest.get((since, most))
    if known is not None:
        return known
    with connection.cursor() as cursor:
        cursor.execute(_LATEST, {"since": since, "most": most})
        found = dict(cursor.fetchall())
    with _lock:
        _latest[since, most] = found
    return found


def new_releases(*, version: int, shard: int, window: str, metric: str, category: str) -> NewReleases:
    """The board's new releases: kept while its shard is unchanged, else read again (one statement,
    one script). store.StoreError when Redis cannot give one consistent instant, DatabaseError
    when the catalogue does not answer: the caller answers from the last known."""
    board = (category, window, metric)
    with _lock:
        held = _held.get(board)
    stamp = store.shard_stamp(version=version, shard=shard)
    if held is not None and (held.version, held.shard, held.stamp) == (version, shard, stamp):
        return held
    if not stamp[0]:
        raise store.Unreachable("the board's shard has no state in Redis")
    since = _cutoff(float(stamp[0]))
    released = latest_releases(since=since, most=rankings_settings.NEW_MOST)
    found = store.members_on_board(
        version=version, shard=shard, window=window, metric=metric, category=category, members=list(released)
    )
    # A tick in between moves asOf on, and the products read stay every one that can be new then.
    # Moved back (the clock reset, the shard lost) they may not: the last known answer serves.
    if found.as_of is None or _cutoff(found.as_of) < since:
        raise store.Unreachable("the board's shard moved back while its new releases were read")
    cutoff = _cutoff(found.as_of)
    rows = sorted(
        ((pid, score, other, released[pid]) for pid, score, other in found.rows if released[pid] >= cutoff),
        key=lambda row: (-row[1], row[0].encode()),
    )
    answer = NewReleases(version, shard, found.stamp, found.as_of, len(rows), tuple(rows[:MAX_DEPTH]))
    with _lock:
        _held[board] = answer
    return answer


def last_known(*, category: str, window: str, metric: str) -> NewReleases | None:
    """The board's new releases as last read, for while Redis or the catalogue is away."""
    with _lock:
        return _held.get((category, window, metric))

"""What every read answers with and how it is served: the answer types, the errors, an answer
remembered fresh for FRESH_SECONDS and served stale (flagged) while Redis is away, and the
figures of a board's member (units, revenue, views, wishes).

Selectors answer with these typed values (datetimes, ints, Decimal money, None where unknown);
the API decides how they are written on the wire, the pages how they are shown."""

import dataclasses
import datetime as dt
import functools
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal

from rankings.conf import ENGAGEMENT_METRICS
from rankings.engine import store
from rankings.serving.layouts import split_board
from rankings.serving.memory import WeighedLRU

# A reader process answers a repeated query from memory for this long: fresh
# enough next to a 2-second tick, and it absorbs bursts on hot boards.
FRESH_SECONDS = 0.5  # seconds
# Last known answers kept per process, served (flagged stale) while Redis is down: bounded in
# bytes, so that a client asking every limit and offset of a board cannot fill memory with them
# (a page of 100 products weighs 25-60 KB, a product's rank 1-2 KB).
LAST_KNOWN_BYTES = 32 * 2**20  # bytes

# Each question's last answer, with when it was made (time.monotonic()): fresh for FRESH_SECONDS,
# and the last known one after that.
_answers = WeighedLRU(name=f"{__name__}._answers", maxsize=LAST_KNOWN_BYTES)
_answers_lock = threading.Lock()
# Set while an answer is computed without the catalogue (PostgreSQL did not
# answer): names fall back to ids, and the answer is marked stale, not remembered.
catalogue_failed: ContextVar[bool] = ContextVar("catalogue_failed", default=False)


class NotFound(LookupError):
    pass


class Unavailable(RuntimeError):
    """Redis is unreachable and no earlier answer to this query is known."""


class NotKept(ValueError):
    """What is not kept for this board: a split board's parts are snapshotted apart, so its movers,
    new releases and rank history are not answered (a 400, not a guess)."""


def split_refused(category: str) -> None:
    """NotKept for a category the active version splits."""
    if split_board(category):
        raise NotKept(f"movers, new releases and rank history are not kept for the split board '{category}'")


# --- answers ------------------------------------------------------------------------


@dataclass(slots=True)
class RankedProduct:
    """One row of a board. Unlike the answers that hold it, not frozen: a frozen dataclass sets each
    field through object.__setattr__ (3 µs a row against 0.6), and a page builds a hundred rows.
    Nothing changes a row once built (dataclasses.replace makes another)."""

    rank: int  # 1-based
    product_id: str
    name: str  # the product id when the catalogue does not know it (or did not answer)
    units: int
    revenue: Decimal
    # On an engagement board (metric views or wishes) only: its views and wishes beside its sales.
    views: int | None = None
    wishes: int | None = None
    rank_then: int | None = None  # its rank 24 hours before (rankings/serving/rank_then.py)
    released_at: dt.datetime | None = None  # on a new-releases board (rankings/serving/moves.py)


@dataclass(frozen=True, slots=True)
class Board:
    """Ranks offset+1 … offset+len(items) of a board."""

    category: str
    window: str
    metric: str
    as_of: dt.datetime | None  # the instant the answer was exact
    total: int  # products ranked on the board
    items: tuple[RankedProduct, ...]
    stale: bool = False  # a last known answer, served while Redis is unreachable
    # The hour of the snapshot the items' rank_then come from; None: no snapshot of it (unknown).
    then: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class Rank:
    """A product's standing on one board; rank and percentile are None when it has no sales there."""

    product_id: str
    category: str
    window: str
    metric: str
    as_of: dt.datetime | None
    rank: int | None
    units: int
    revenue: Decimal
    total: int
    percentile: float | None
    stale: bool = False
    views: int | None = None  # on an engagement board only, as below
    wishes: int | None = None


@dataclass(frozen=True, slots=True)
class CategoryRank:
    category: str
    rank: int | None
    units: int
    revenue: Decimal
    total: int
    percentile: float | None
    views: int | None = None  # on an engagement board only
    wishes: int | None = None


@dataclass(frozen=True, slots=True)
class Ranks:
    """A product's standing in each of its categories; as_of is the oldest of their boards'."""

    product_id: str
    window: str
    metric: str
    as_of: dt.datetime | None
    ranks: tuple[CategoryRank, ...]
    stale: bool = False
    more: bool = False  # filed under more categories than `ranks` holds (PRODUCT_CATEGORIES_READ)


@dataclass(frozen=True, slots=True)
class Neighbors:
    product_id: str
    category: str
    window: str
    metric: str
    as_of: dt.datetime | None
    rank: int | None
    items: tuple[RankedProduct, ...]
    stale: bool = False


@dataclass(frozen=True, slots=True)
class ProductDetail:
    product_id: str
    name: str  # the id while the catalogue does not answer
    price: Decimal | None  # None while the catalogue does not answer
    stale: bool = False


@dataclass(frozen=True, slots=True)
class CategoriesPage:
    total: int | None  # categories, `all` included; None where they are not counted
    items: list[tuple[str, str]]  # (slug, name)
    next: str | None = None  # the cursor (after=) of the page that follows; None on the last


@dataclass(frozen=True, slots=True)
class UnitsPerPeriod:
    """Net units sold in each period (hour, day) from `first` on; no periods while PostgreSQL is away."""

    periods: list[tuple[dt.datetime, int]]  # (start of the period, units)
    stale: bool = False


def served(key: tuple, compute, *, boards: bool = True):
    """Answer from memory when fresh; else from Redis; when Redis fails, the last known answer, flagged stale."""
    hit = fresh(key)
    if hit is not None:
        return hit
    try:
        value = compute()
        if catalogue_failed.get():
            return dataclasses.replace(value, stale=True)
        if boards and value.as_of is None:
            # No tick has reached this board's shard in Redis: it was lost (or
            # never built). An empty board would pass for the truth; it is not.
            raise store.Unreachable("the board's shard has no state in Redis")
    except store.StoreError as error:
        with _answers_lock:
            known = _answers.get(key)
        if known is None:
            raise Unavailable("rankings are unavailable right now; try again shortly") from error
        return dataclasses.replace(known[1], stale=True)
    with _answers_lock:
        _answers[key] = (time.monotonic(), value)
    return value


def fresh(key: tuple):
    """The answer to the question made less than FRESH_SECONDS ago; None when there is none."""
    with _answers_lock:
        known = _answers.get(key)
    if known is not None and time.monotonic() - known[0] < FRESH_SECONDS:
        return known[1]
    return None


def reading(selector):
    """A read that may go without the catalogue: its answer says stale when it had to."""

    @functools.wraps(selector)
    def wrapper(*args, **kwargs):
        token = catalogue_failed.set(False)
        try:
            return selector(*args, **kwargs)
        finally:
            catalogue_failed.reset(token)

    return wrapper


def catalogue_unreachable() -> None:
    catalogue_failed.set(True)


def money(cents: int) -> Decimal:
    """Cents as an exact amount with two places."""
    return Decimal(cents).scaleb(-2)


def percentile(rank: int | None, total: int) -> float | None:
    if rank is None or not total:
        return None
    return round(100 * rank / total, 2)


def _units_revenue(metric: str, score: int, other: int) -> tuple[int, Decimal]:
    units, revenue = (score, other) if metric == "units" else (other, score)
    return units, money(revenue)


def figures(
    metric: str, score: int, other: int, sales: tuple[int, int] | None
) -> tuple[int, Decimal, int | None, int | None]:
    """(units, revenue, None, None) of a sales board's member; of an engagement board's, (units,
    revenue, views, wishes), its sales read beside (`sales`: units and revenue cents)."""
    if metric not in ENGAGEMENT_METRICS:
        return *_units_revenue(metric, score, other), None, None
    views, wishes = (score, other) if metric == "views" else (other, score)
    units, cents = sales or (0, 0)
    return units, money(cents), views, wishes

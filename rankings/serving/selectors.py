"""The read path: top-N, rank, ranks and neighbours from Redis, names from the catalogue.

A read never touches raw sales; only the sales charts read buckets. Each costs a bounded number of
Redis round trips (O(log n + limit) work there) and at most one catalogue query.

Selectors answer with the typed values below (datetimes, ints, Decimal money, None where unknown);
the API decides how they are written on the wire, the pages how they are shown.
"""

import dataclasses
import datetime as dt
import functools
import re
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal

from django.db import DatabaseError, connection

from catalogue.models import PRODUCT_ID_PATTERN, Category, Product
from rankings.conf import ENGAGEMENT_METRICS, MAX_DEPTH, SALES_METRICS
from rankings.engine import store
from rankings.engine.instants import instant
from rankings.engine.shards import ALL, Layout, active_layout
from rankings.engine.tree import EMPTY, Tree, version_tree
from rankings.engine.windows import configured_windows
from rankings.serving import memory, merge
from rankings.serving.layouts import layout_of, split_board
from rankings.serving.memory import WeighedLRU, WeighedTLRU, WeighedTTL
from rankings.serving.then import ranks_then, ranks_then_prefetch, then_of

# Category names change rarely; a reader may see a new category this much later.
CATEGORY_CACHE_SECONDS = 5.0  # seconds
# A slug found unknown is asked for again after this long (one indexed query: a
# flood of one made-up slug costs one a second). While PostgreSQL is unreachable,
# the tree that counts is asked for as often.
CATEGORY_MISS_RELOAD_SECONDS = 1.0  # seconds
# Category names (and slugs found unknown) remembered per process: bounded in bytes, so that
# memory does not grow with the catalogue (a shop may have a million categories) nor with the
# made-up slugs a client asks for: about 40,000 categories each (names; names as last read).
CATEGORY_CACHE_BYTES = 16 * 2**20  # bytes
# A product's name and price as last read, per process: a reader of random
# products among many would otherwise ask PostgreSQL on every read, which costs
# more than the Redis read that answers it. Short-lived, so that an edit shows
# within a minute; bounded, so that memory does not grow with the catalogue.
PRODUCT_CACHE_SECONDS = 60.0  # seconds
PRODUCT_CACHE_SIZE = 50_000  # products
# What they hold at most: PRODUCT_CACHE_SIZE names of up to 200 characters.
PRODUCT_CACHE_BYTES = 40 * 2**20  # bytes
# A reader of random products among many misses that memory on nearly every read, and one query
# per read costs PostgreSQL and the reader more than the read itself. So once this many lookups
# have missed it since the last copy, a catalogue of at most PRODUCT_CACHE_SIZE products is read
# whole, in one query, and its names and prices are remembered as each product's would have been:
# for PRODUCT_CACHE_SECONDS. A product created since is looked up alone; a larger catalogue is
# asked again, to see whether it fits, a copy's lifetime later.
CATALOGUE_COPY_AFTER = 64  # product lookups that missed memory: about what one copy of 20,000 costs

# A reader process answers a repeated query from memory for this long: fresh
# enough next to a 2-second tick, and it absorbs bursts on hot boards.
FRESH_SECONDS = 0.5  # seconds
# Last known answers kept per process, served (flagged stale) while Redis is down: bounded in
# bytes, so that a client asking every limit and offset of a board cannot fill memory with them
# (a page of 100 products weighs 25-60 KB, a product's rank 1-2 KB).
LAST_KNOWN_BYTES = 32 * 2**20  # bytes
# Each product's categories as last read: a product in a few categories weighs under 1 KB.
PRODUCT_CATEGORIES_BYTES = 8 * 2**20  # bytes

# A board whose ranks are asked for many different products within FRESH_SECONDS (a reader of
# random products: product pages of the long tail) is copied whole into the process, when it is
# small enough, and answered from the copy until a tick writes the board's shard (checked every
# FRESH_SECONDS, so a copy is as fresh as a remembered answer).
# Otherwise each such read costs a Redis round trip, more than the rest of the request.
BOARD_COPY_AFTER = 16  # uncached rank reads of one board within FRESH_SECONDS
BOARD_COPY_MEMBERS = 20_000  # the largest board copied: a few ms of Redis time, a few MB here
# Boards copied at once, per process: about 7 of the largest (6.6 MB each), more of smaller ones.
BOARD_COPIES_BYTES = 48 * 2**20  # bytes
# Rank reads counted per board, within FRESH_SECONDS: about 3,000 boards.
BOARD_READS_BYTES = 2**20  # bytes

# A product may be filed under any number of categories (the catalogue's editors decide): its
# ranks are read for the first this many of them by slug, one Redis read each, and the answer
# says when there are more (Ranks.more). A product page reads each rank three times, once per
# badge row, and each badge's climb: about 1 ms of Redis time per category.
PRODUCT_CATEGORIES_READ = 50  # categories

_PRODUCT_ID = re.compile(PRODUCT_ID_PATTERN)
_UNREAD = object()  # a slug this process has not looked up (or not lately)
# Each question's last answer, with when it was made (time.monotonic()): fresh for FRESH_SECONDS,
# and the last known one after that.
_answers = WeighedLRU(name="rankings.serving.selectors._answers", maxsize=LAST_KNOWN_BYTES)
# Each product's categories as last read, for a product's ranks while PostgreSQL is away.
_product_categories = WeighedLRU(
    name="rankings.serving.selectors._product_categories", maxsize=PRODUCT_CATEGORIES_BYTES
)
_products = WeighedTTL(
    name="rankings.serving.selectors._products", maxsize=PRODUCT_CACHE_BYTES, ttl=PRODUCT_CACHE_SECONDS
)
# Each copied board's [copy, when it was last known current]; None for a board too large to copy.
_board_copies = WeighedLRU(name="rankings.serving.selectors._board_copies", maxsize=BOARD_COPIES_BYTES)
_board_reads = WeighedTTL(
    name="rankings.serving.selectors._board_reads", maxsize=BOARD_READS_BYTES, ttl=FRESH_SECONDS
)
_cache_lock = threading.Lock()
# Set while an answer is computed without the catalogue (PostgreSQL did not
# answer): names fall back to ids, and the answer is marked stale, not remembered.
_catalogue_failed: ContextVar[bool] = ContextVar("catalogue_failed", default=False)


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


@dataclass(frozen=True, slots=True)
class RankedProduct:
    """One row of a board."""

    rank: int  # 1-based
    product_id: str
    name: str  # the product id when the catalogue does not know it (or did not answer)
    units: int
    revenue: Decimal
    # On an engagement board (metric views or wishes) only: its views and wishes beside its sales.
    views: int | None = None
    wishes: int | None = None
    rank_then: int | None = None  # its rank 24 hours before (rankings/serving/then.py)
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


# --- memory ---------------------------------------------------------------------------


def _served(key: tuple, compute, *, boards: bool = True):
    """Answer from memory when fresh; else from Redis; when Redis fails, the last known answer, flagged stale."""
    hit = _fresh(key)
    if hit is not None:
        return hit
    try:
        value = compute()
        if _catalogue_failed.get():
            return dataclasses.replace(value, stale=True)
        if boards and value.as_of is None:
            # No tick has reached this board's shard in Redis: it was lost (or
            # never built). An empty board would pass for the truth; it is not.
            raise store.Unreachable("the board's shard has no state in Redis")
    except store.StoreError as error:
        with _cache_lock:
            known = _answers.get(key)
        if known is None:
            raise Unavailable("rankings are unavailable right now; try again shortly") from error
        return dataclasses.replace(known[1], stale=True)
    with _cache_lock:
        _answers[key] = (time.monotonic(), value)
    return value


def _fresh(key: tuple):
    """The answer to the question made less than FRESH_SECONDS ago; None when there is none."""
    with _cache_lock:
        known = _answers.get(key)
    if known is not None and time.monotonic() - known[0] < FRESH_SECONDS:
        return known[1]
    return None


def _reading(selector):
    """A read that may go without the catalogue: its answer says stale when it had to."""

    @functools.wraps(selector)
    def wrapper(*args, **kwargs):
        token = _catalogue_failed.set(False)
        try:
            return selector(*args, **kwargs)
        finally:
            _catalogue_failed.reset(token)

    return wrapper


def _catalogue_unreachable() -> None:
    _catalogue_failed.set(True)


# --- categories -------------------------------------------------------------------------

ALL_NAME = "All products"

# Categories are looked up by slug as reads ask for them, never loaded whole: a shop may have a
# million. Each process remembers at most CATEGORY_CACHE_BYTES of names (and slugs found unknown),
# the way it remembers products.
_category_names = WeighedTLRU(
    name="rankings.serving.selectors._category_names",
    kind="categories",
    seconds=CATEGORY_CACHE_SECONDS,
    maxsize=CATEGORY_CACHE_BYTES,
    ttu=lambda _slug, name, now: now + (CATEGORY_CACHE_SECONDS if name else CATEGORY_MISS_RELOAD_SECONDS),
    timer=time.monotonic,
)
# The names as last read, for the reads made while PostgreSQL does not answer.
_category_known = WeighedLRU(
    name="rankings.serving.selectors._category_known", kind="categories", maxsize=CATEGORY_CACHE_BYTES
)
# The lists' totals, each a count of the table (at a million categories, a tenth of a second):
# counted at most this often per process, whatever the requests.
CATEGORY_COUNT_SECONDS = 60.0  # seconds
# Two counts, each under its SQL (a few hundred bytes).
CATEGORY_COUNTS_BYTES = 4096  # bytes
_category_counts = WeighedTTL(
    name="rankings.serving.selectors._category_counts",
    kind="categories",
    maxsize=CATEGORY_COUNTS_BYTES,
    ttl=CATEGORY_COUNT_SECONDS,
    timer=time.monotonic,
)


# The tree that counts, as [the version whose tree it is, the tree].
_tree_held: list = [None, EMPTY]
_categories_lock = threading.Lock()

_CATEGORY_NAMES = f"SELECT slug, name FROM {Category._meta.db_table} WHERE slug = ANY(%s)"
# A list of categories by name, from an offset or after a cursor: a walk of the index of migration
# catalogue 0007 (parent, name, slug) or 0006 (name, slug) from where the page starts, never a
# sort of the table.
_CATEGORY_ROWS = f"SELECT c.slug, c.name FROM {Category._meta.db_table} c {{where}} ORDER BY c.name, c.slug LIMIT %s OFFSET %s"
_TOP_LEVEL = "c.parent_id IS NULL"
_UNDER = f"c.parent_id = (SELECT id FROM {Category._meta.db_table} WHERE slug = %s)"
_AFTER = "(c.name, c.slug) > (%s, %s)"
# The top of the catalogue's tree, counted only as far as the home page numbers its pages.
_TOP_LEVEL_COUNT = (
    f"SELECT count(*) FROM (SELECT 1 FROM {Category._meta.db_table} c WHERE {_TOP_LEVEL} LIMIT %s) t"
)


def _categories_remember(asked: list[str], rows: dict[str, str]) -> None:
    with _categories_lock:
        for slug in asked:
            _category_names[slug] = rows.get(slug)
        _category_known.update(rows)


def categories_names(slugs) -> dict[str, str]:
    """slug -> name of those of `slugs` that are categories (`all` among them): remembered ones
    from memory, the rest in one query. While PostgreSQL is unreachable, a slug not remembered may
    still be a category: its name falls back to its slug, and the answer is marked stale."""
    names, missing = {}, []
    with _categories_lock:
        for slug in dict.fromkeys(slugs):
            name = ALL_NAME if slug == ALL else _category_names.get(slug, _UNREAD)
            if name is _UNREAD:
                missing.append(slug)
            elif name is not None:
                names[slug] = name
    if not missing:
        return names
    try:
        with connection.cursor() as cursor:
            cursor.execute(_CATEGORY_NAMES, [missing])
            rows = dict(cursor.fetchall())
    except DatabaseError:
        _catalogue_unreachable()
        with _categories_lock:
            return names | {slug: _category_known.get(slug, slug) for slug in missing}
    _categories_remember(missing, rows)
    return names | rows


def category_name(slug: str) -> str:
    """A category's name; NotFound for a slug no category has (asked again after
    CATEGORY_MISS_RELOAD_SECONDS: a flood of one made-up slug is one indexed query a second)."""
    name = categories_names([slug]).get(slug)
    if name is None:
        raise NotFound(f"unknown category '{slug}'")
    return name


def _category_rows(*conditions: tuple[str, list], limit: int, offset: int = 0, after: str | None = None):
    """`limit` (slug, name) rows by name meeting every (SQL, params) condition, from `offset` or
    after the category `after` (NotFound when no category has that slug; `all` starts the list).
    Each row read is remembered as categories_names would; none while PostgreSQL is unreachable."""
    if after is not None and after != ALL:
        conditions = (*conditions, (_AFTER, [category_name(after), after]))
    where = " AND ".join(sql for sql, _ in conditions)
    params = [value for _, values in conditions for value in values]
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                _CATEGORY_ROWS.format(where=f"WHERE {where}" if where else ""), [*params, limit, offset]
            )
            rows = cursor.fetchall()
    except DatabaseError:
        _catalogue_unreachable()
        return []
    _categories_remember([slug for slug, _ in rows], dict(rows))
    return rows


def _paged(rows: list[tuple[str, str]], limit: int, *, total: int | None) -> CategoriesPage:
    """A page of the first `limit` of `rows`, read one further to know whether another page follows."""
    more = len(rows) > limit
    return CategoriesPage(total=total, items=rows[:limit], next=rows[limit - 1][0] if more else None)


def _count(sql: str, params: list) -> int:
    with _categories_lock:
        known = _category_counts.get(sql)
    if known is None:
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                (known,) = cursor.fetchone()
        except DatabaseError:
            _catalogue_unreachable()
            return 0
        with _categories_lock:
            _category_counts[sql] = known
    return known


def categories_page(*, limit: int, offset: int = 0, after: str | None = None) -> CategoriesPage:
    """`limit` categories from `offset` (at most MAX_DEPTH) of the list, `all` first, or of those
    after the category `after`: one query for the page, and the table's count at most every
    CATEGORY_COUNT_SECONDS."""
    if after is not None:
        rows = _category_rows(limit=limit + 1, offset=offset, after=after)
        return _paged(rows, limit, total=_categories_count())
    first = [(ALL, ALL_NAME)] if offset == 0 else []
    rows = _category_rows(limit=limit + 1 - len(first), offset=max(0, offset - 1))
    return _paged([*first, *rows], limit, total=_categories_count())


def _categories_count() -> int:
    return _count(f"SELECT count(*) FROM {Category._meta.db_table}", []) + 1  # `all` included


def top_categories(*, limit: int, offset: int = 0, after: str | None = None) -> CategoriesPage:
    """The categories at the top of the catalogue's tree, as categories_page pages them; the total
    counted up to MAX_DEPTH + 1 only (a page past MAX_DEPTH is found by cursor, not by number)."""
    rows = _category_rows((_TOP_LEVEL, []), limit=limit + 1, offset=offset, after=after)
    return _paged(rows, limit, total=_count(_TOP_LEVEL_COUNT, [MAX_DEPTH + 1]))


def category_children(slug: str, *, limit: int, after: str | None = None) -> CategoriesPage:
    """The categories right under `slug` in the catalogue's tree, by name, `limit` after the child
    `after`; their total is not counted (a category may have a million)."""
    rows = _category_rows((_UNDER, [slug]), limit=limit + 1, after=after)
    return _paged(rows, limit, total=None)


def categories_tree() -> Tree:
    """The tree the boards count with: the active version's, read once per version (the version
    is the one this process reads boards of); as last read while PostgreSQL or Redis is away."""
    with _categories_lock:
        held = tuple(_tree_held)
    try:
        number = store.active_version()
        if number == held[0]:
            return held[1]
        tree = version_tree(number)
    except (store.StoreError, DatabaseError):
        _catalogue_unreachable()
        return held[1]
    with _categories_lock:
        _tree_held[:] = [number, tree]
    return tree


def _tree_forget() -> None:
    with _categories_lock:
        _tree_held[:] = [None, EMPTY]


# One version's tree: its size is the catalogue's (tens of megabytes at a million categories).
memory.keep(f"{__name__}._tree_held", _tree_forget, kind="categories", bytes=None)


# --- products -------------------------------------------------------------------------


_catalogue_copied = float("-inf")  # time.monotonic() of the last copy of the whole catalogue
_catalogue_misses = 0  # lookups that missed memory since the last copy


def _catalogue_forget() -> None:
    global _catalogue_copied, _catalogue_misses
    with _cache_lock:
        _catalogue_copied, _catalogue_misses = float("-inf"), 0


memory.keep(f"{__name__}._catalogue_copied", _catalogue_forget, kind="answers", bytes=0)


# The one catalogue query of a rank read: written out, because building it through the ORM costs
# five times the query itself (0.5 ms against 0.1 ms) and a random product misses every cache.
_PRODUCT_ROW = f"SELECT name, price_cents FROM {Product._meta.db_table} WHERE product_id = %s"


def _product_row(product_id: str) -> tuple[str, int] | None:
    with connection.cursor() as cursor:
        cursor.execute(_PRODUCT_ROW, [product_id])
        return cursor.fetchone()


# Every product, when there are at most `limit` - 1 of them (see CATALOGUE_COPY_AFTER).
_CATALOGUE = f"SELECT product_id, name, price_cents FROM {Product._meta.db_table} LIMIT %s"


def _catalogue_read(product_id: str) -> tuple[str, int] | None:
    """The product's row from PostgreSQL: alone, or with the whole catalogue, copied into the
    products' memory, when CATALOGUE_COPY_AFTER lookups have missed it since the last copy (at
    most one a PRODUCT_CACHE_SECONDS, and only of a catalogue that memory holds whole); None when
    no product has the id."""
    global _catalogue_copied, _catalogue_misses
    now = time.monotonic()
    with _cache_lock:
        _catalogue_misses += 1
        due = _catalogue_misses >= CATALOGUE_COPY_AFTER and now - _catalogue_copied >= PRODUCT_CACHE_SECONDS
        if due:
            _catalogue_copied, _catalogue_misses = now, 0
    if not due:
        return _product_row(product_id)
    with connection.cursor() as cursor:
        cursor.execute(_CATALOGUE, [PRODUCT_CACHE_SIZE + 1])
        rows = {pid: (name, price) for pid, name, price in cursor.fetchall()}
    if len(rows) > PRODUCT_CACHE_SIZE:
        return _product_row(product_id)
    with _cache_lock:
        _products.update(rows)
    return rows.get(product_id)


def _product(product_id: str) -> tuple[str, int] | None:
    """The catalogue's (name, price in cents); None when PostgreSQL does not answer (the boards may
    still know the product); NotFound for an id no product has."""
    if not _PRODUCT_ID.fullmatch(product_id):
        raise NotFound(f"unknown product '{product_id}'")
    with _cache_lock:
        known = _products.get(product_id)
    if known is not None:
        return known
    try:
        found = _catalogue_read(product_id)
    except DatabaseError:
        _catalogue_unreachable()
        return None
    if found is None:
        raise NotFound(f"unknown product '{product_id}'")
    with _cache_lock:
        _products[product_id] = found
    return found


def _names(product_ids) -> dict[str, str]:
    """Names of the products the catalogue knows: remembered ones from memory, the rest in one query."""
    names: dict[str, str] = {}
    with _cache_lock:
        for product_id in product_ids:
            known = _products.get(product_id)
            if known is not None:
                names[product_id] = known[0]
    missing = [product_id for product_id in product_ids if product_id not in names]
    if not missing:
        return names
    try:
        rows = list(
            Product.objects.filter(product_id__in=missing).values_list("product_id", "name", "price_cents")
        )
    except DatabaseError:
        _catalogue_unreachable()
        return names
    with _cache_lock:
        for product_id, name, price in rows:
            _products[product_id] = (name, price)
    names.update((product_id, name) for product_id, name, _ in rows)
    return names


def _product_category_slugs(product_id: str) -> list[str]:
    """The product's first PRODUCT_CATEGORIES_READ + 1 categories by slug (the last one only says
    there are more); as last read while PostgreSQL does not answer."""
    try:
        categories = list(
            Category.objects.filter(products__product_id=product_id)
            .order_by("slug")
            .values_list("slug", flat=True)[: PRODUCT_CATEGORIES_READ + 1]
        )
    except DatabaseError as error:
        _catalogue_unreachable()
        with _cache_lock:
            categories = _product_categories.get(product_id)
        if categories is None:
            raise Unavailable(
                "the catalogue is unavailable and this product's categories are unknown"
            ) from error
        return categories
    with _cache_lock:
        _product_categories[product_id] = categories
    return categories


@_reading
def product_detail(*, product_id: str) -> ProductDetail:
    """A product's name and price, as its page shows them (its id and no price while PostgreSQL is away)."""
    found = _product(product_id)
    if found is None:
        return ProductDetail(product_id=product_id, name=product_id, price=None, stale=True)
    name, price_cents = found
    return ProductDetail(product_id=product_id, name=name, price=money(price_cents))


# --- boards -------------------------------------------------------------------------


def money(cents: int) -> Decimal:
    """Cents as an exact amount with two places."""
    return Decimal(cents).scaleb(-2)


def _percentile(rank: int | None, total: int) -> float | None:
    if rank is None or not total:
        return None
    return round(100 * rank / total, 2)


def _units_revenue(metric: str, score: int, other: int) -> tuple[int, Decimal]:
    units, revenue = (score, other) if metric == "units" else (other, score)
    return units, money(revenue)


def _figures(metric: str, score: int, other: int, sales: tuple[int, int] | None) -> tuple:
    """(units, revenue) of a sales board's member; of an engagement board's, (units, revenue, views,
    wishes), its sales read beside (`sales`: units and revenue cents)."""
    if metric not in ENGAGEMENT_METRICS:
        return _units_revenue(metric, score, other)
    views, wishes = (score, other) if metric == "views" else (other, score)
    units, cents = sales or (0, 0)
    return units, money(cents), views, wishes


def _sales_beside(
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
        beside = {}
        for members in parts.values():
            units, cents = next(found), next(found)
            beside.update((pid, (units.get(pid, 0), cents.get(pid, 0))) for pid in members)
        sales.append(beside)
    return sales


def _items(
    rows,
    first_rank: int,
    metric: str,
    names: dict[str, str] | None = None,
    then: dict[str, int] | None = None,
    sales: dict | None = None,
) -> tuple[RankedProduct, ...]:
    if names is None:
        names = _names([product_id for product_id, _, _ in rows])
    then = then or {}
    sales = sales or {}
    return tuple(
        RankedProduct(
            first_rank + i,
            pid,
            names.get(pid, pid),
            *_figures(metric, score, other, sales.get(pid)),
            rank_then=then.get(pid),
        )
        for i, (pid, score, other) in enumerate(rows)
    )


def _board(
    category: str,
    window: str,
    metric: str,
    offset: int,
    found: store.BoardSlice,
    names: dict | None = None,
    sales: dict | None = None,
) -> Board:
    as_of = instant(found.as_of)
    then = ranks_then(category=category, window=window, metric=metric, as_of=as_of)
    return Board(
        category=category,
        window=window,
        metric=metric,
        as_of=as_of,
        total=found.total,
        items=_items(found.rows, offset + 1, metric, names, then=then, sales=sales),
        then=then_of(as_of) if then is not None else None,
    )


@_reading
def board_top(*, category: str, window: str, metric: str, limit: int, offset: int) -> Board:
    """The products ranked offset+1 … offset+limit on a board."""
    category_name(category)
    return _served(
        _top_key(category, window, metric, limit, offset),
        lambda: _board_top(category=category, window=window, metric=metric, limit=limit, offset=offset),
    )


def _top_key(category: str, window: str, metric: str, limit: int, offset: int) -> tuple:
    return ("top", category, window, metric, limit, offset)


def _board_top(*, category: str, window: str, metric: str, limit: int, offset: int) -> Board:
    version = store.active_version()
    layout = layout_of(version)
    ranks = {
        "window": window,
        "metric": metric,
        "category": category,
        "start": offset,
        "stop": offset + limit - 1,
    }
    if category in layout.split:
        found = merge.board_slice(version=version, layout=layout, **ranks)
    else:
        found = store.board_slice(version=version, shard=layout.shard_of(category), **ranks)
    (sales,) = _sales_beside(version, layout, window, metric, [(category, [pid for pid, _, _ in found.rows])])
    return _board(category, window, metric, offset, found, sales=sales)


@_reading
def boards_top_many(*, limits: dict[str, int], window: str, metric: str) -> dict[str, Board]:
    """The first limits[c] products of each category c's board, each as board_top would answer.

    One Redis round trip for every board (their top-100 blobs, in one
    pipeline) and one catalogue query for all the names, so a hundred
    categories' leaders cost what one does. Answers are remembered under
    board_top's keys, fresh or stale alike.
    """
    known = categories_names(limits)
    for category in limits:
        if category not in known:
            raise NotFound(f"unknown category '{category}'")
    keys = {category: _top_key(category, window, metric, limit, 0) for category, limit in limits.items()}
    wanted = [category for category, key in keys.items() if _fresh(key) is None]
    heads = _heads_read(wanted, limits=limits, window=window, metric=metric)
    names = _names({pid for found in (heads or {}).values() if found for pid, _, _ in found.rows})
    ranks_then_prefetch(
        [(c, window, metric, instant(found.as_of)) for c, found in (heads or {}).items() if found]
    )

    def answer(category: str) -> Board:
        if heads is None and category in wanted:
            raise store.Unreachable("the boards could not be read")
        found = (heads or {}).get(category)
        if found is None or metric in ENGAGEMENT_METRICS:
            # fresh a moment ago and no longer, or a blob to rebuild, or sales to read beside: read it alone
            return _board_top(
                category=category, window=window, metric=metric, limit=limits[category], offset=0
            )
        return _board(category, window, metric, 0, found, names)

    return {category: _served(key, lambda c=category: answer(c)) for category, key in keys.items()}


def _heads_read(
    categories: list[str], *, limits: dict[str, int], window: str, metric: str
) -> dict[str, store.BoardSlice | None] | None:
    """The heads of the boards of `categories`, in one round trip; None when Redis fails."""
    if not categories:
        return {}
    try:
        version = store.active_version()
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


# --- a product's ranks ---------------------------------------------------------------


@_reading
def product_rank(*, product_id: str, category: str, window: str, metric: str) -> Rank:
    category_name(category)
    return _served(
        ("rank", product_id, category, window, metric),
        lambda: _product_rank(product_id=product_id, category=category, window=window, metric=metric),
    )


def _product_rank(*, product_id: str, category: str, window: str, metric: str) -> Rank:
    if not _PRODUCT_ID.fullmatch(product_id):
        raise NotFound(f"unknown product '{product_id}'")
    version = store.active_version()
    layout = layout_of(version)
    if category in layout.split:
        found = _split_member_rank(version, layout, window, metric, category, product_id)
    else:
        found = _member_rank((version, layout.shard_of(category), window, metric, category), product_id)
    if found.rank is None:
        # Only an unranked product needs the catalogue to tell "not ranked" from "no such
        # product": a ranked one has sales, and a product with sales cannot be deleted.
        _product(product_id)
    rank = found.rank + 1 if found.rank is not None else None
    sales = None
    if metric in ENGAGEMENT_METRICS:  # its sales, read beside
        (beside,) = _sales_beside(version, layout, window, metric, [(category, [product_id])])
        sales = beside.get(product_id)
    units, revenue, *engagement = _figures(metric, found.score, found.other, sales)
    return Rank(
        product_id,
        category,
        window,
        metric,
        instant(found.as_of),
        rank,
        units,
        revenue,
        found.total,
        _percentile(rank, found.total),
        False,
        *engagement,
    )


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
    """The board's copy, made once its rank reads within FRESH_SECONDS reach BOARD_COPY_AFTER;
    None before, and for a board too large to copy. Every FRESH_SECONDS a copy is checked against
    its shard's state, one small read, and kept for as long as no tick has written the shard."""
    now = time.monotonic()
    version, shard, window, metric, category = board
    with _cache_lock:
        held = _board_copies.get(board)
    if held is not None:
        copy, checked = held
        if now - checked < FRESH_SECONDS:
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


@_reading
def product_ranks(*, product_id: str, window: str, metric: str, every_level: bool = False) -> Ranks:
    """The product's rank in each of its first PRODUCT_CATEGORIES_READ catalogue categories by slug,
    in one Redis round trip; with `every_level`, in them and their ancestors in the tree that
    counts (each once), the first PRODUCT_CATEGORIES_READ of those. `more` says some were left out."""
    if _product(product_id) is None:
        with _cache_lock:
            categories = _product_categories.get(product_id)
        if categories is None:
            raise Unavailable("the catalogue is unavailable and this product's categories are unknown")
    else:
        categories = _product_category_slugs(product_id)
    if every_level:
        categories = categories_tree().expand(categories)
    more, categories = len(categories) > PRODUCT_CATEGORIES_READ, list(categories[:PRODUCT_CATEGORIES_READ])
    ranks = _served(
        ("ranks", product_id, window, metric, tuple(categories)),
        lambda: _product_ranks(product_id=product_id, window=window, metric=metric, categories=categories),
        boards=bool(categories),  # a product in no category reads no board
    )
    return dataclasses.replace(ranks, more=more) if more else ranks


def _product_ranks(*, product_id: str, window: str, metric: str, categories: list[str]) -> Ranks:
    version = store.active_version()
    layout = layout_of(version)
    found = store.members_ranks(
        version=version,
        window=window,
        metric=metric,
        product_id=product_id,
        boards=[(layout.shard_of(c), c) for c in categories if c not in layout.split],
    )
    if layout.split:  # each split board merged from its parts, in the order of `categories`
        by_category = dict(zip([c for c in categories if c not in layout.split], found, strict=True))
        found = [
            by_category[c]
            if c not in layout.split
            else merge.member_rank(
                version=version,
                layout=layout,
                window=window,
                metric=metric,
                category=c,
                product_id=product_id,
            )
            for c in categories
        ]
    known = [f.as_of for f in found if f.as_of]
    sales = _sales_beside(version, layout, window, metric, [(c, [product_id]) for c in categories])
    ranks = []
    for category, f, beside in zip(categories, found, sales, strict=True):
        rank = f.rank + 1 if f.rank is not None else None
        units, revenue, *engagement = _figures(metric, f.score, f.other, beside.get(product_id))
        ranks.append(
            CategoryRank(category, rank, units, revenue, f.total, _percentile(rank, f.total), *engagement)
        )
    return Ranks(
        product_id=product_id,
        window=window,
        metric=metric,
        # One board of unknown instant (its shard lost in Redis, or behind what this process read)
        # makes the whole answer unknown: served stale, not fresh with that board's rank wrong.
        as_of=instant(min(known)) if known and len(known) == len(found) else None,
        ranks=tuple(ranks),
    )


@_reading
def product_neighbors(*, product_id: str, category: str, window: str, metric: str, n: int) -> Neighbors:
    """The n products ranked just above and just below the product, and the product itself."""
    category_name(category)
    return _served(
        ("neighbors", product_id, category, window, metric, n),
        lambda: _product_neighbors(
            product_id=product_id, category=category, window=window, metric=metric, n=n
        ),
    )


def _product_neighbors(*, product_id: str, category: str, window: str, metric: str, n: int) -> Neighbors:
    _product(product_id)
    version = store.active_version()
    layout = layout_of(version)
    if category in layout.split:
        found, start, board = merge.neighbors(
            version=version,
            layout=layout,
            window=window,
            metric=metric,
            category=category,
            product_id=product_id,
            n=n,
        )
        if board is None:
            return Neighbors(product_id, category, window, metric, instant(found.as_of), None, ())
        (sales,) = _sales_beside(
            version, layout, window, metric, [(category, [pid for pid, _, _ in board.rows])]
        )
        items = _items(board.rows, start + 1, metric, sales=sales)
        return Neighbors(product_id, category, window, metric, instant(board.as_of), found.rank + 1, items)
    shard = layout.shard_of(category)
    found = store.member_rank(
        version=version, shard=shard, window=window, metric=metric, category=category, product_id=product_id
    )
    items: tuple[RankedProduct, ...] = ()
    rank = None
    as_of = found.as_of
    if found.rank is not None:
        rank = found.rank + 1
        start = max(0, found.rank - n)
        board = store.board_slice(
            version=version,
            shard=shard,
            window=window,
            metric=metric,
            category=category,
            start=start,
            stop=found.rank + n,
        )
        as_of = board.as_of
        (sales,) = _sales_beside(
            version, layout, window, metric, [(category, [pid for pid, _, _ in board.rows])]
        )
        then = ranks_then(category=category, window=window, metric=metric, as_of=instant(as_of))
        items = _items(board.rows, start + 1, metric, then=then, sales=sales)
    return Neighbors(product_id, category, window, metric, instant(as_of), rank, items)


# --- sales over time (PostgreSQL) ---------------------------------------------------------


def chart_bucket_seconds() -> int:
    """The size of the buckets the charts add up: those of the longest window, kept the longest."""
    longest = max(configured_windows().values(), key=lambda w: w.bucket_seconds * w.buckets)
    return longest.bucket_seconds


def units_per_period(
    *, period: int, first: dt.datetime, count: int, product_id: str | None = None
) -> UnitsPerPeriod:
    """Net units sold in each of `count` periods of `period` seconds from `first` (by sale time),
    of one product or of every product.

    Read from the buckets of the `all` board, where every sale counts once whatever its
    categories; `period` is a multiple of their size. The one read that goes to PostgreSQL
    rather than Redis: the boards keep window totals, the buckets the history. One query;
    periods without sales are 0.
    """
    from django.db.models import F, Sum

    from rankings.models import Bucket

    size = chart_bucket_seconds()
    if period % size:
        raise ValueError(f"a period of {period} s is not a whole number of {size}-second buckets")
    start = int(first.timestamp()) // period
    try:
        # `all`'s buckets, or those of its parts when it is split.
        categories = active_layout()[1].boards_of(ALL)
    except DatabaseError:
        return UnitsPerPeriod(periods=[], stale=True)
    rows = Bucket.objects.filter(
        size=size, category__in=categories, start__gte=start * period, start__lt=(start + count) * period
    )
    if product_id is not None:
        rows = rows.filter(product_id=product_id)
    query = (
        rows.annotate(n=F("start") / period)
        .values("n")
        .annotate(units=Sum("units"))
        .values_list("n", "units")
    )
    try:
        per_period = dict(query.order_by())
    except DatabaseError:
        return UnitsPerPeriod(periods=[], stale=True)
    return UnitsPerPeriod(
        periods=[
            (dt.datetime.fromtimestamp(n * period, tz=dt.UTC), int(per_period.get(n, 0)))
            for n in range(start, start + count)
        ]
    )

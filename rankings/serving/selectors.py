"""The read path: top-N, rank, ranks and neighbours from Redis, names from the catalogue.

A read never touches raw sales; only a product page's daily chart reads buckets. Each costs a bounded number of
Redis round trips (O(log n + limit) work there) and at most one catalogue query.
"""

import datetime as dt
import functools
import re
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal

from cachetools import LRUCache, TTLCache
from django.db import DatabaseError

from catalogue.models import PRODUCT_ID_PATTERN, Category, Product
from rankings.engine import store
from rankings.engine.shards import ALL, shard_of

# Category names change rarely; a reader may see a new category this much later.
CATEGORY_CACHE_SECONDS = 5.0  # seconds
# A slug the names do not hold re-reads them at most this often: a flood of
# made-up slugs costs one read of the category table per interval, not one per
# request. While PostgreSQL is unreachable, the read is retried as often.
CATEGORY_MISS_RELOAD_SECONDS = 1.0  # seconds

# A reader process answers a repeated query from memory for this long: fresh
# enough next to a 2-second tick, and it absorbs bursts on hot boards.
FRESH_SECONDS = 0.5  # seconds
# Last known answers kept per process, served (flagged stale) while Redis is down.
LAST_KNOWN_SIZE = 20_000  # answers

_PRODUCT_ID = re.compile(PRODUCT_ID_PATTERN)
_fresh: TTLCache = TTLCache(maxsize=LAST_KNOWN_SIZE, ttl=FRESH_SECONDS)
_last_known: LRUCache = LRUCache(maxsize=LAST_KNOWN_SIZE)
_cache_lock = threading.Lock()
# Each product's categories as last read, for a product's ranks while PostgreSQL is away.
_product_categories: LRUCache = LRUCache(maxsize=LAST_KNOWN_SIZE)
# Set while an answer is computed without the catalogue (PostgreSQL did not
# answer): names fall back to ids, and the answer is marked stale, not remembered.
_catalogue_failed: ContextVar[bool] = ContextVar("catalogue_failed", default=False)


class NotFound(LookupError):
    pass


class Unavailable(RuntimeError):
    """Redis is unreachable and no earlier answer to this query is known."""


def answers_forget() -> None:
    """Forget every remembered answer (fresh and last known)."""
    with _cache_lock:
        _fresh.clear()
        _last_known.clear()
        _product_categories.clear()


def caches_clear() -> None:
    """Forget everything this process remembers of the read side (answers, names, status figures)."""
    from rankings.operations.status import status_forget

    answers_forget()
    categories_forget()
    status_forget()


def _served(key: tuple, compute, *, boards: bool = True) -> dict:
    """Answer from memory when fresh; else from Redis; when Redis fails, the last known answer, flagged stale."""
    with _cache_lock:
        hit = _fresh.get(key)
    if hit is not None:
        return hit
    try:
        value = {**compute(), "stale": False}
        if _catalogue_failed.get():
            return {**value, "stale": True}
        if boards and "asOf" in value and value["asOf"] is None:
            # No tick has reached this board's shard in Redis: it was lost (or
            # never built). An empty board would pass for the truth; it is not.
            raise store.Unreachable("the board's shard has no state in Redis")
    except store.StoreError as error:
        with _cache_lock:
            known = _last_known.get(key)
        if known is None:
            raise Unavailable("rankings are unavailable right now; try again shortly") from error
        return {**known, "stale": True}
    with _cache_lock:
        _fresh[key] = value
        _last_known[key] = value
    return value


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


@dataclass(frozen=True)
class _Categories:
    loaded: float  # time.monotonic() of the read
    names: dict[str, str]  # slug -> name, `all` first
    rows: list[tuple[str, str]]  # (slug, name) of the real categories, by name
    complete: bool  # False: PostgreSQL did not answer; names hold what was known before


_categories: _Categories | None = None
_categories_lock = threading.Lock()


def _categories_read(*, reload: bool = False) -> _Categories:
    global _categories
    current = _categories
    if current is not None and not reload and time.monotonic() - current.loaded <= CATEGORY_CACHE_SECONDS:
        return current
    with _categories_lock:
        if _categories is not current:  # another thread read them meanwhile
            return _categories
        try:
            rows = list(Category.objects.order_by("name", "slug").values_list("slug", "name"))
            loaded, complete = time.monotonic(), True
        except DatabaseError:
            _catalogue_unreachable()
            rows = current.rows if current else []
            # Tried again after the short interval, not the long one.
            loaded = time.monotonic() - CATEGORY_CACHE_SECONDS + CATEGORY_MISS_RELOAD_SECONDS
            complete = False
        _categories = _Categories(
            loaded=loaded, names={ALL: "All products", **dict(rows)}, rows=rows, complete=complete
        )
        return _categories


def categories_map() -> dict[str, str]:
    """slug -> name of every category, with `all` first."""
    return _categories_read().names


def categories_page(*, limit: int, offset: int) -> dict:
    """{"total", "items": [(slug, name)]}: `limit` categories from `offset`, `all` first."""
    read = _categories_read()
    if offset == 0:
        items = [(ALL, read.names[ALL]), *read.rows[: limit - 1]]
    else:
        items = read.rows[offset - 1 : offset - 1 + limit]
    return {"total": len(read.rows) + 1, "items": items}


def categories_real() -> list[tuple[str, str]]:
    """(slug, name) of every category but `all`, by name."""
    return _categories_read().rows


def categories_forget() -> None:
    global _categories
    _categories = None


def category_name(slug: str) -> str:
    """A category's name; NotFound for a slug no category has.

    While PostgreSQL is unreachable, a slug the names do not hold may still be
    a category: its name falls back to its slug and the answer is marked stale.
    """
    read = _categories_read()
    if slug not in read.names and time.monotonic() - read.loaded >= CATEGORY_MISS_RELOAD_SECONDS:
        read = _categories_read(reload=True)
    if slug in read.names:
        return read.names[slug]
    if not read.complete:
        _catalogue_unreachable()
        return slug
    raise NotFound(f"unknown category '{slug}'")


def _shard(category: str, version: int) -> int:
    """The board's shard under the version's own count: from Redis, else from PostgreSQL."""
    shards = store.shard_count_get(version)
    if shards is None:
        from rankings.models import RankingVersion

        try:
            shards = RankingVersion.objects.filter(number=version).values_list("shards", flat=True).first()
        except DatabaseError as error:
            raise store.Unreachable(f"the shard count of version {version} is unknown") from error
        if shards is None:
            raise store.Unreachable(f"the shard count of version {version} is unknown")
    return shard_of(category, shards)


def format_asof(asof: float | None) -> str | None:
    if not asof:
        return None
    return dt.datetime.fromtimestamp(int(asof), tz=dt.UTC).isoformat().replace("+00:00", "Z")


def cents(value: int) -> str:
    return str((Decimal(value) / 100).quantize(Decimal("0.01")))


def _score_fields(metric: str, score: int, other: int) -> dict:
    units, revenue = (score, other) if metric == "units" else (other, score)
    return {"units": units, "revenue": cents(revenue)}


@dataclass
class Item:
    rank: int
    product_id: str
    name: str
    units: int
    revenue: str

    def as_dict(self) -> dict:
        return {
            "rank": self.rank,
            "productId": self.product_id,
            "name": self.name,
            "units": self.units,
            "revenue": self.revenue,
        }


def _names(product_ids) -> dict[str, str]:
    if not product_ids:
        return {}
    try:
        return dict(Product.objects.filter(product_id__in=product_ids).values_list("product_id", "name"))
    except DatabaseError:
        _catalogue_unreachable()
        return {}


def _items(rows, first_rank: int, metric: str) -> list[Item]:
    names = _names([product_id for product_id, _, _ in rows])
    return [
        Item(
            rank=first_rank + i,
            product_id=pid,
            name=names.get(pid, pid),
            **_score_fields(metric, score, other),
        )
        for i, (pid, score, other) in enumerate(rows)
    ]


@_reading
def board_top(*, category: str, window: str, metric: str, limit: int, offset: int) -> dict:
    """The products ranked offset+1 … offset+limit on a board."""
    category_name(category)
    return _served(
        ("top", category, window, metric, limit, offset),
        lambda: _board_top(category=category, window=window, metric=metric, limit=limit, offset=offset),
    )


def _board_top(*, category: str, window: str, metric: str, limit: int, offset: int) -> dict:
    version = store.active_version()
    board = store.board_slice(
        version=version,
        shard=_shard(category, version),
        window=window,
        metric=metric,
        category=category,
        start=offset,
        stop=offset + limit - 1,
    )
    return {
        "category": category,
        "window": window,
        "metric": metric,
        "asOf": format_asof(board.asof),
        "total": board.total,
        "items": [item.as_dict() for item in _items(board.rows, offset + 1, metric)],
    }


def _product(product_id: str) -> Product | None:
    """The catalogue's product; None when PostgreSQL does not answer (the boards may still know it)."""
    if not _PRODUCT_ID.fullmatch(product_id):
        raise NotFound(f"unknown product '{product_id}'")
    try:
        product = Product.objects.filter(product_id=product_id).first()
    except DatabaseError:
        _catalogue_unreachable()
        return None
    if product is None:
        raise NotFound(f"unknown product '{product_id}'")
    return product


def _percentile(rank: int | None, total: int) -> float | None:
    if rank is None or not total:
        return None
    return round(100 * rank / total, 2)


@_reading
def product_rank(*, product_id: str, category: str, window: str, metric: str) -> dict:
    category_name(category)
    return _served(
        ("rank", product_id, category, window, metric),
        lambda: _product_rank(product_id=product_id, category=category, window=window, metric=metric),
    )


def _product_rank(*, product_id: str, category: str, window: str, metric: str) -> dict:
    _product(product_id)
    version = store.active_version()
    found = store.member_rank(
        version=version,
        shard=_shard(category, version),
        window=window,
        metric=metric,
        category=category,
        product_id=product_id,
    )
    rank = found.rank + 1 if found.rank is not None else None
    return {
        "productId": product_id,
        "category": category,
        "window": window,
        "metric": metric,
        "asOf": format_asof(found.asof),
        "rank": rank,
        **_score_fields(metric, found.score, found.other),
        "total": found.total,
        "percentile": _percentile(rank, found.total),
    }


@_reading
def product_ranks(*, product_id: str, window: str, metric: str) -> dict:
    """The product's rank in each of its catalogue categories, in one Redis round trip."""
    product = _product(product_id)
    try:
        if product is None:
            raise DatabaseError("the catalogue did not answer")
        categories = sorted(product.categories.values_list("slug", flat=True))
    except DatabaseError as error:
        _catalogue_unreachable()
        with _cache_lock:
            categories = _product_categories.get(product_id)
        if categories is None:
            raise Unavailable(
                "the catalogue is unavailable and this product's categories are unknown"
            ) from error
    else:
        with _cache_lock:
            _product_categories[product_id] = categories
    return _served(
        ("ranks", product_id, window, metric, tuple(categories)),
        lambda: _product_ranks(product_id=product_id, window=window, metric=metric, categories=categories),
        boards=bool(categories),  # a product in no category reads no board
    )


def _product_ranks(*, product_id: str, window: str, metric: str, categories: list[str]) -> dict:
    version = store.active_version()
    found = store.members_ranks(
        version=version,
        window=window,
        metric=metric,
        product_id=product_id,
        boards=[(_shard(c, version), c) for c in categories],
    )
    asofs = [f.asof for f in found if f.asof]
    ranks = []
    for category, f in zip(categories, found, strict=True):
        rank = f.rank + 1 if f.rank is not None else None
        ranks.append(
            {
                "category": category,
                "rank": rank,
                **_score_fields(metric, f.score, f.other),
                "total": f.total,
                "percentile": _percentile(rank, f.total),
            }
        )
    return {
        "productId": product_id,
        "window": window,
        "metric": metric,
        "asOf": format_asof(min(asofs)) if asofs else None,
        "ranks": ranks,
    }


@_reading
def product_neighbors(*, product_id: str, category: str, window: str, metric: str, n: int) -> dict:
    """The n products ranked just above and just below the product, and the product itself."""
    category_name(category)
    return _served(
        ("neighbors", product_id, category, window, metric, n),
        lambda: _product_neighbors(
            product_id=product_id, category=category, window=window, metric=metric, n=n
        ),
    )


def _product_neighbors(*, product_id: str, category: str, window: str, metric: str, n: int) -> dict:
    _product(product_id)
    version = store.active_version()
    shard = _shard(category, version)
    found = store.member_rank(
        version=version, shard=shard, window=window, metric=metric, category=category, product_id=product_id
    )
    items: list[dict] = []
    rank = None
    asof = found.asof
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
        asof = board.asof
        items = [item.as_dict() for item in _items(board.rows, start + 1, metric)]
    return {
        "productId": product_id,
        "category": category,
        "window": window,
        "metric": metric,
        "asOf": format_asof(asof),
        "rank": rank,
        "items": items,
    }


# --- for the pages ------------------------------------------------------------------


@_reading
def boards_top_many(*, limits: dict[str, int], window: str, metric: str) -> dict[str, dict]:
    """The first limits[c] products of each category c's board, each shaped like board_top's answer.

    One Redis round trip for every board (their top-100 blobs, in one
    pipeline) and one catalogue query for all the names, so a hundred
    categories' leaders cost what one does. Answers are remembered under
    board_top's keys, fresh or stale alike.
    """
    for category in limits:
        category_name(category)
    keys = {category: ("top", category, window, metric, limit, 0) for category, limit in limits.items()}
    with _cache_lock:
        wanted = [category for category, key in keys.items() if _fresh.get(key) is None]
    heads: dict[str, store.BoardSlice | None] = {}
    unread: set[str] = set()
    try:
        if wanted:
            version = store.active_version()
            read = store.board_heads(
                version=version,
                boards=[(_shard(c, version), window, metric, c, limits[c]) for c in wanted],
            )
            heads = dict(zip(wanted, read, strict=True))
    except store.StoreError:
        unread = set(wanted)
    names = _names({pid for board in heads.values() if board for pid, _, _ in board.rows})

    def answer(category: str) -> dict:
        if category in unread:
            raise store.Unreachable("not read")
        board = heads.get(category)
        if board is None:  # fresh a moment ago and no longer, or a blob to rebuild: read it alone
            return _board_top(
                category=category, window=window, metric=metric, limit=limits[category], offset=0
            )
        return {
            "category": category,
            "window": window,
            "metric": metric,
            "asOf": format_asof(board.asof),
            "total": board.total,
            "items": [
                Item(
                    rank=i + 1,
                    product_id=pid,
                    name=names.get(pid, pid),
                    **_score_fields(metric, score, other),
                ).as_dict()
                for i, (pid, score, other) in enumerate(board.rows)
            ],
        }

    return {category: _served(key, lambda c=category: answer(c)) for category, key in keys.items()}


@_reading
def product_detail(*, product_id: str) -> dict:
    """A product's name and price, as its page shows them (its id and no price while PostgreSQL is away)."""
    product = _product(product_id)
    if product is None:
        return {"productId": product_id, "name": product_id, "price": None, "stale": True}
    return {
        "productId": product.product_id,
        "name": product.name,
        "price": cents(product.price_cents),
        "stale": False,
    }


# The daily chart adds up the hourly buckets of the `all` board, where every
# sale of a product counts once whatever its categories.
DAY = 86400  # seconds
HOUR = 3600  # seconds
EPOCH_DAY = dt.date(1970, 1, 1)


def product_daily_units(*, product_id: str, days: int = 30, now: dt.datetime) -> dict:
    """Net units of a product per UTC day, for the `days` days up to the one holding `now`.

    The one read that goes to Postgres rather than Redis: the boards keep
    window totals, the hourly buckets keep the days. One query; days without
    sales are 0. No days at all while PostgreSQL does not answer.
    """
    from django.db.models import F, Sum

    from rankings.models import Bucket

    last_day = int(now.timestamp()) // DAY
    first_day = last_day - days + 1
    query = (
        Bucket.objects.filter(
            size=HOUR,
            category=ALL,
            product_id=product_id,
            start__gte=first_day * DAY,
            start__lt=(last_day + 1) * DAY,
        )
        .annotate(day=F("start") / DAY)
        .values("day")
        .annotate(units=Sum("units"))
        .values_list("day", "units")
    )
    try:
        per_day = dict(query)
    except DatabaseError:
        return {"productId": product_id, "days": [], "stale": True}
    return {
        "productId": product_id,
        "days": [
            {"date": EPOCH_DAY + dt.timedelta(days=day), "units": per_day.get(day, 0)}
            for day in range(first_day, last_day + 1)
        ],
        "stale": False,
    }

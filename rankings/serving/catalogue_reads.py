"""What the catalogue says of a product: its name, price and categories, remembered per process
(and the whole catalogue copied when it is small and read at random)."""

import contextlib
import re
import threading
import time

from django.db import DatabaseError, connection

from catalogue.models import PRODUCT_ID_PATTERN, Category, Product
from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.serving import memory
from rankings.serving.answers import (
    FRESH_SECONDS,
    NotFound,
    ProductDetail,
    Unavailable,
    catalogue_unreachable,
    money,
    reading,
)
from rankings.serving.memory import WeighedLRU, WeighedTTL
from rankings.serving.names import forget_on_push, names_current

# A product's name and price as last read, per process: a reader of random
# products among many would otherwise ask PostgreSQL on every read, which costs
# more than the Redis read that answers it. Short-lived, so that an edit shows
# within a minute, in the answers made of it too (a push is seen sooner:
# rankings.serving.names); bounded, so that memory does not grow with the catalogue.
PRODUCT_CACHE_SECONDS = 60.0 - FRESH_SECONDS  # seconds
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
# Names read from Redis's copy of them (rankings/engine/store/names.py), which brings no price: kept
# as the catalogue's rows are, so that a page's names come from memory again once read, but less
# long by what the copy may lag behind an edit (rankings.engine.names_copy), so that an edit
# still shows within the minute.
PRODUCT_NAMES_BYTES = 8 * 2**20  # bytes
PRODUCT_NAMES_SECONDS = max(PRODUCT_CACHE_SECONDS - rankings_settings.NAMES_CHANGES_SECONDS, 0.0)  # seconds
# Each product's categories as last read: a product in a few categories weighs under 1 KB.
PRODUCT_CATEGORIES_BYTES = 8 * 2**20  # bytes
# A product may be filed under any number of categories (the catalogue's editors decide): its
# ranks are read for the first this many of them by slug, one Redis read each, and the answer
# says when there are more (Ranks.more). A product page reads each rank three times, once per
# badge row, and each badge's climb: about 1 ms of Redis time per category.
PRODUCT_CATEGORIES_READ = 50  # categories

PRODUCT_ID = re.compile(PRODUCT_ID_PATTERN)
# Each product's categories as last read, for a product's ranks while PostgreSQL is away.
_product_categories = WeighedLRU(name=f"{__name__}._product_categories", maxsize=PRODUCT_CATEGORIES_BYTES)
_products = WeighedTTL(name=f"{__name__}._products", maxsize=PRODUCT_CACHE_BYTES, ttl=PRODUCT_CACHE_SECONDS)
_names = WeighedTTL(name=f"{__name__}._names", maxsize=PRODUCT_NAMES_BYTES, ttl=PRODUCT_NAMES_SECONDS)
_cache_lock = threading.Lock()


_catalogue_copied = float("-inf")  # time.monotonic() of the last copy of the whole catalogue
_catalogue_misses = 0  # lookups that missed memory since the last copy


def _catalogue_forget() -> None:
    global _catalogue_copied, _catalogue_misses
    with _cache_lock:
        _catalogue_copied, _catalogue_misses = float("-inf"), 0


memory.keep(f"{__name__}._catalogue_copied", _catalogue_forget, kind="answers", bytes=0)


def _names_forget() -> None:
    with _cache_lock:
        _products.clear()
        _names.clear()


forget_on_push(_names_forget)


# The one catalogue query of a rank read: written out, because building it through the ORM costs
# five times the query itself (0.5 ms against 0.1 ms) and a random product misses every cache.
_PRODUCT_ROW = f"SELECT name, price_cents FROM {Product._meta.db_table} WHERE product_id = %s"


def _product_row(product_id: str) -> tuple[str, int] | None:
    with connection.cursor() as cursor:
        cursor.execute(_PRODUCT_ROW, [product_id])
        return cursor.fetchone()


# The names of a page or of a product's neighbours, written out for the same reason: most of a
# neighbours read's own time went into building this query through the ORM.
_PRODUCT_ROWS = (
    f"SELECT product_id, name, price_cents FROM {Product._meta.db_table} WHERE product_id = ANY(%s)"
)


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


def catalogue_product(product_id: str) -> tuple[str, int] | None:
    """The catalogue's (name, price in cents); None when PostgreSQL does not answer (the boards may
    still know the product); NotFound for an id no product has."""
    if not PRODUCT_ID.fullmatch(product_id):
        raise NotFound(f"unknown product '{product_id}'")
    names_current()
    with _cache_lock:
        known = _products.get(product_id)
    if known is not None:
        return known
    try:
        found = _catalogue_read(product_id)
    except DatabaseError:
        catalogue_unreachable()
        return None
    if found is None:
        raise NotFound(f"unknown product '{product_id}'")
    with _cache_lock:
        _products[product_id] = found
    return found


def product_names(product_ids, *, copy_read: bool = False) -> dict[str, str]:
    """Names of the products the catalogue knows: remembered ones from memory, the rest from Redis's
    copy of them (one round trip; none when the caller has just read it: copy_read), what it lacks
    in one query."""
    names: dict[str, str] = {}
    names_current()
    with _cache_lock:
        for product_id in product_ids:
            known = _products.get(product_id)
            if known is not None:
                names[product_id] = known[0]
            elif (name := _names.get(product_id)) is not None:
                names[product_id] = name
    missing = [product_id for product_id in product_ids if product_id not in names]
    if not missing:
        return names
    copied: dict[str, str] = {}
    with contextlib.suppress(store.StoreError):  # the catalogue has them all
        copied = {} if copy_read else store.names_read(missing)
    if copied:
        with _cache_lock:
            _names.update(copied)
        names.update(copied)
        missing = [product_id for product_id in missing if product_id not in copied]
    if not missing:
        return names
    try:
        with connection.cursor() as cursor:
            cursor.execute(_PRODUCT_ROWS, [missing])
            rows = cursor.fetchall()
    except DatabaseError:
        catalogue_unreachable()
        return names
    with _cache_lock:
        for product_id, name, price in rows:
            _products[product_id] = (name, price)
    names.update((product_id, name) for product_id, name, _ in rows)
    return names


def product_category_slugs(product_id: str) -> list[str]:
    """The product's first PRODUCT_CATEGORIES_READ + 1 categories by slug (the last one only says
    there are more); as last read while PostgreSQL does not answer."""
    try:
        categories = list(
            Category.objects.filter(products__product_id=product_id)
            .order_by("slug")
            .values_list("slug", flat=True)[: PRODUCT_CATEGORIES_READ + 1]
        )
    except DatabaseError as error:
        catalogue_unreachable()
        known = categories_last_read(product_id)
        if known is None:
            raise Unavailable(
                "the catalogue is unavailable and this product's categories are unknown"
            ) from error
        return known
    with _cache_lock:
        _product_categories[product_id] = categories
    return categories


@reading
def product_detail(*, product_id: str) -> ProductDetail:
    """A product's name and price, as its page shows them (its id and no price while PostgreSQL is away)."""
    found = catalogue_product(product_id)
    if found is None:
        return ProductDetail(product_id=product_id, name=product_id, price=None, stale=True)
    name, price_cents = found
    return ProductDetail(product_id=product_id, name=name, price=money(price_cents))


def categories_last_read(product_id: str) -> list[str] | None:
    """The product's categories as last read; None when this process has not read them."""
    with _cache_lock:
        return _product_categories.get(product_id)

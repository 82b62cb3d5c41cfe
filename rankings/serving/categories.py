"""Categories as readers see them: names by slug, lists by name, the tree the boards count with;
looked up as reads ask for them and remembered per process, never loaded whole."""

import threading
import time

from django.db import DatabaseError, connection

from catalogue.models import Category
from rankings.conf import MAX_DEPTH
from rankings.engine import store
from rankings.engine.shards import ALL
from rankings.engine.tree import EMPTY, Tree, version_tree, version_trees_forget
from rankings.serving import memory
from rankings.serving.answers import CategoriesPage, NotFound, catalogue_unreachable
from rankings.serving.memory import WeighedLRU, WeighedTLRU, WeighedTTL
from rankings.serving.names import forget_on_push, names_current

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

ALL_NAME = "All products"
_UNREAD = object()  # a slug this process has not looked up (or not lately)

# Categories are looked up by slug as reads ask for them, never loaded whole: a shop may have a
# million. Each process remembers at most CATEGORY_CACHE_BYTES of names (and slugs found unknown),
# the way it remembers products.
_category_names = WeighedTLRU(
    name=f"{__name__}._category_names",
    kind="categories",
    seconds=CATEGORY_CACHE_SECONDS,
    maxsize=CATEGORY_CACHE_BYTES,
    ttu=lambda _slug, name, now: now + (CATEGORY_CACHE_SECONDS if name else CATEGORY_MISS_RELOAD_SECONDS),
    timer=time.monotonic,
)
# The names as last read, for the reads made while PostgreSQL does not answer.
_category_known = WeighedLRU(
    name=f"{__name__}._category_known", kind="categories", maxsize=CATEGORY_CACHE_BYTES
)
# The lists' totals, each a count of the table (at a million categories, a tenth of a second):
# counted at most this often per process, whatever the requests.
CATEGORY_COUNT_SECONDS = 60.0  # seconds
# Two counts, each under its SQL (a few hundred bytes).
CATEGORY_COUNTS_BYTES = 4096  # bytes
_category_counts = WeighedTTL(
    name=f"{__name__}._category_counts",
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


def _names_forget() -> None:
    with _categories_lock:
        _category_names.clear()


forget_on_push(_names_forget)


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
    names_current()
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
        catalogue_unreachable()
        with _categories_lock:
            return names | {slug: _category_known.get(slug, slug) for slug in missing}
    _categories_remember(missing, rows)
    return names | rows


def category_name(slug: str) -> str:
    """A category's name; NotFound for a slug no category has (asked again after
    CATEGORY_MISS_RELOAD_SECONDS: a flood of one made-up slug is one indexed query a second)."""
    if slug == ALL:  # the board of every product, asked for most: no lookup
        return ALL_NAME
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
        catalogue_unreachable()
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
            catalogue_unreachable()
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
        number = store.served_version()
        if number == held[0]:
            return held[1]
        tree = version_tree(number)
    except (store.StoreError, DatabaseError):
        catalogue_unreachable()
        return held[1]
    with _categories_lock:
        _tree_held[:] = [number, tree]
    return tree


def _tree_forget() -> None:
    with _categories_lock:
        _tree_held[:] = [None, EMPTY]


# One version's tree: its size is the catalogue's (tens of megabytes at a million categories).
memory.keep(f"{__name__}._tree_held", _tree_forget, kind="categories", bytes=None)
# The trees of the last versions read by this process's ingest and admin (rankings.engine.tree).
memory.keep("rankings.engine.tree._trees", version_trees_forget, kind="categories", bytes=None)

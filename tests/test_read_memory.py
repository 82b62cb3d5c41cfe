"""What a reader process remembers is bounded in bytes, whatever a client asks."""

import dataclasses
import gc
import sys
import time
import tracemalloc
from decimal import Decimal

import pytest

from catalogue.models import Category, Product
from rankings.engine import store
from rankings.serving import answers, selectors

WINDOW = "7d"
PRODUCTS = 300
MiB = 2**20


@pytest.fixture
def board(db):
    """`toys`: PRODUCTS products with long names, whole on one shard, as after a tick."""
    Category.objects.create(slug="toys", name="Toys")
    ids = [f"product-{i:05}" for i in range(PRODUCTS)]
    Product.objects.bulk_create(
        [Product(product_id=pid, name=f"{pid} " + "a long product name " * 7, price_cents=100) for pid in ids]
    )
    store.shard_layout_set(1, 1, ())
    boards = {
        (WINDOW, "units", "toys"): {pid: 1 + i for i, pid in enumerate(ids)},
        (WINDOW, "revenue", "toys"): {pid: 100 * (1 + i) for i, pid in enumerate(ids)},
    }
    store.shard_replace(
        version=1, shard=0, seq=1, as_of=float(int(time.time())), gen=store.generation(1), boards=boards
    )
    return ids


def _pages():
    """400 distinct pages of the board: every limit from 91 to 100 at 20 offsets, by two metrics."""
    return [
        {"metric": metric, "limit": limit, "offset": offset}
        for metric in ("units", "revenue")
        for limit in range(91, 101)
        for offset in range(0, 200, 10)
    ]


def test_answers_remembered_stay_within_their_bytes_however_limit_and_offset_vary(board, monkeypatch):
    """400 distinct pages of about 26 KB each, under a bound of 4 MiB (the cache's own kind, made
    smaller so that a few hundred pages pass it): a cache of answers counted in entries grows by
    about 10 MiB; one counted in bytes stays within its bound."""
    monkeypatch.setattr(answers, "_answers", type(answers._answers)(maxsize=4 * MiB))
    selectors.board_top(category="toys", window=WINDOW, metric="units", limit=100, offset=0)  # names read
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for page in _pages():
            selectors.board_top(category="toys", window=WINDOW, **page)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown <= 4 * MiB + MiB, f"grew by {grown / MiB:.1f} MiB"
    assert answers._answers.currsize <= 4 * MiB


def test_every_page_remembered_is_served_stale_while_redis_is_unreachable(board, settings):
    """Pages of every limit and offset, read once: each is answered, flagged stale, as it was."""
    pages = _pages()[::13]
    fresh = [selectors.board_top(category="toys", window=WINDOW, **page) for page in pages]
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    store.reset_clients()
    time.sleep(answers.FRESH_SECONDS)
    for page, known in zip(pages, fresh, strict=True):
        stale = selectors.board_top(category="toys", window=WINDOW, **page)
        assert stale.stale and (stale.items, stale.as_of) == (known.items, known.as_of)


def _serving_modules():
    import importlib
    import pkgutil

    import rankings.serving

    return [
        importlib.import_module(f"rankings.serving.{info.name}")
        for info in pkgutil.iter_modules(rankings.serving.__path__)
    ]


def _caches_of(module):
    """(name, cache) of every cache a module keeps at its top level: cachetools caches, and those of
    functions memoised with cachetools or functools."""
    import cachetools

    for name, value in vars(module).items():
        if getattr(value, "__module__", module.__name__) != module.__name__ and not isinstance(
            value, cachetools.Cache
        ):
            continue  # imported from elsewhere: found in its own module
        if isinstance(value, cachetools.Cache):
            yield f"{module.__name__}.{name}", value
        elif isinstance(getattr(value, "cache", None), cachetools.Cache):
            yield f"{module.__name__}.{name}", value.cache
        elif hasattr(value, "cache_info"):
            yield f"{module.__name__}.{name}", value


def test_every_cache_of_the_read_path_is_registered_with_its_bound_in_bytes():
    """One list says what a reader process remembers: a cache kept anywhere else would escape
    forget_all() and the bounds."""
    from rankings.serving import memory

    found = dict(cache for module in _serving_modules() for cache in _caches_of(module))
    registered = {entry.name: entry for entry in memory.kept()}

    assert found, "no cache found: the scan itself is broken"
    unregistered = [name for name, cache in found.items() if registered.get(name) is None]
    assert unregistered == []
    for name, cache in found.items():
        assert registered[name].cache is cache, name
        if not hasattr(cache, "cache_info"):  # a cachetools cache: weighed, its bound in bytes
            assert isinstance(cache, memory.WeighedLRU | memory.WeighedTTL | memory.WeighedTLRU), name
            assert registered[name].bytes == cache.maxsize, name


def test_forget_all_empties_every_cache_of_the_read_path():
    from rankings.serving import memory

    _serving_modules()
    caches = [entry.cache for entry in memory.kept() if isinstance(entry.cache, dict | memory.WeighedLRU)]
    weighed = [c for c in caches if hasattr(c, "maxsize") and not hasattr(c, "cache_info")]
    for i, cache in enumerate(weighed):
        cache[("filled", i)] = i
    memory.forget_all()
    assert [len(cache) for cache in weighed] == [0] * len(weighed)


def _held(value) -> int:
    """The bytes a row holds, counted the slow, obvious way: itself and each field, and a field's
    items when it is a list."""
    fields = [getattr(value, f.name) for f in dataclasses.fields(value)]
    return sys.getsizeof(value) + sum(
        sys.getsizeof(f) + (sum(map(sys.getsizeof, f)) if isinstance(f, list) else 0) for f in fields
    )


def test_the_weight_of_an_answers_rows_counts_every_field_of_every_row():
    from rankings.serving import memory

    rows = tuple(
        selectors.RankedProduct(i + 1, f"p{i}", "a name " * i, i, Decimal(i) / 100, rank_then=i % 3 or None)
        for i in range(50)
    )

    assert memory.weight(rows) == sys.getsizeof(rows) + sum(map(_held, rows))


@dataclasses.dataclass
class _Tagged:
    name: str
    tags: list


def test_rows_holding_a_container_count_what_it_holds():
    from rankings.serving import memory

    rows = [_Tagged("a", ["x" * 100, "y" * 50]), _Tagged("b", [])]

    assert memory.weight(rows) == sys.getsizeof(rows) + sum(map(_held, rows))

"""What a reader process remembers, bounded in bytes: caches whose entries weigh their
key and their value, so that no client fills one by varying what it asks."""

import dataclasses
import datetime as dt
import sys
from collections.abc import Callable
from decimal import Decimal
from functools import lru_cache
from itertools import chain
from operator import attrgetter, methodcaller

from cachetools import Cache, LRUCache, TLRUCache, TTLCache

# What cachetools keeps beside each entry (its slots in the data, size and order dicts, a link in
# the TTL caches' list), measured with tracemalloc: 130 bytes for an LRUCache, 220 for a TTLCache.
ENTRY_BYTES = 256  # bytes
_CONTAINERS = (tuple, list, set, frozenset)
# Values that refer to nothing else a cache would hold: their own size is their weight. None of them
# is tracked by the garbage collector, so their __sizeof__() is sys.getsizeof's answer, without the
# parsing of its arguments.
_LEAVES = frozenset({str, bytes, int, float, bool, type(None), Decimal, dt.datetime, dt.date})
_leaf_size = methodcaller("__sizeof__")


@lru_cache(maxsize=64)  # the value types of the program: a few dozen dataclasses
def _fields(kind: type):
    """What reads the attributes a value of this type holds: a dataclass's fields; None for any
    other type."""
    if not dataclasses.is_dataclass(kind):
        return None
    names = [field.name for field in dataclasses.fields(kind)]
    if len(names) == 1:  # attrgetter of one name answers the value, not a tuple of it
        return lambda value: (getattr(value, names[0]),)
    return attrgetter(*names)


def _items_weight(values) -> int:
    """The weight of the values of a container: a board as Redis sent it (tens of thousands of
    bytes objects) in one pass in C, and so the rows of an answer (dataclasses of one type whose
    fields are leaves: 5 µs a row value by value); anything else value by value."""
    kinds = set(map(type, values))
    if kinds <= _LEAVES:
        return sum(map(_leaf_size, values))
    if len(kinds) == 1 and (fields := _fields(kinds.pop())) is not None:
        held = list(chain.from_iterable(map(fields, values)))
        if set(map(type, held)) <= _LEAVES:
            return sum(map(sys.getsizeof, values)) + sum(map(_leaf_size, held))
    return sum(map(weight, values))


def weight(value) -> int:
    """The bytes `value` holds, counting everything it refers to (what is shared, once per
    reference: a bound, never less than the truth). A type's own objects (classes, functions,
    time zones) are not counted: they exist anyway. Values are data: no cycles."""
    kind: type = type(value)
    if kind in _LEAVES:
        return value.__sizeof__()
    size = sys.getsizeof(value)
    if kind in _CONTAINERS:
        return size + _items_weight(value)
    if kind is dict:
        return size + _items_weight(value.keys()) + _items_weight(value.values())
    if isinstance(value, type):
        return 0
    fields = _fields(kind)
    if fields is not None:
        return size + _items_weight(fields(value))
    held = getattr(value, "__dict__", None)
    return size if held is None else size + weight(held)


@dataclasses.dataclass(frozen=True, slots=True)
class Kept:
    """One thing a reader process remembers: where, its bound in bytes, its time to live."""

    name: str  # module.attribute
    kind: str  # one of KINDS
    bytes: int | None  # the bound; None: one value whose size the data decides (a version's tree)
    seconds: float | None  # how long an entry is kept at most; None: until evicted or forgotten
    clear: Callable[[], None]
    cache: object = None  # the cache itself, when it is one


# What is remembered, by kind: forget_all(kind) forgets one kind only (a test that reads again
# without the answers, but with the category names it had).
KINDS = (
    "answers",  # answers and what they are made of: product names, prices and categories, board copies
    "categories",  # category names, the lists' counts, the tree that counts
    "history",  # snapshots' ranks 24 hours before, rank histories
    "status",  # the status figures
    "process",  # what the process derives once: layouts, texts of instants, validated parameters
)
# Every cache and remembered value of the read path, by name: the one list of what a reader keeps.
_kept: dict[str, Kept] = {}


def keep(
    name: str,
    clear: Callable[[], None],
    *,
    kind: str,
    bytes: int | None,
    seconds: float | None = None,
    cache=None,
) -> None:
    """Register something a reader process remembers, forgotten by forget_all()."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    _kept[name] = Kept(name, kind, bytes, seconds, clear, cache)


def kept() -> list[Kept]:
    """Everything a reader process remembers, with its bound and time to live."""
    return list(_kept.values())


# Each entry a type and what reads its fields: well under a kilobyte.
keep(f"{__name__}._fields", _fields.cache_clear, kind="process", bytes=64 * 1024, cache=_fields)


def forget_all(*kinds: str) -> None:
    """Forget everything a reader process remembers (between tests, after a switch or a restore);
    of the `kinds` given only, when some are."""
    for entry in list(_kept.values()):
        if not kinds or entry.kind in kinds:
            entry.clear()


class _Weighed(Cache):
    """A cache bounded in bytes: `maxsize` is bytes, each entry weighs its key and its value, and an
    entry heavier than the whole cache is not kept (cachetools would refuse it with an error).

    The key being stored is held for the weighing, which cachetools calls with the value alone: callers
    hold a lock around every use of a cache, as cachetools requires anyway."""

    _key = None

    def __init__(
        self, *, name: str | None = None, kind: str = "answers", seconds: float | None = None, **kwargs
    ) -> None:
        """`name`: where the cache is kept (module.attribute), to register it as of `kind`; `seconds`:
        its entries' longest life when it is not `ttl` (a TLRU cache's); the rest are the cachetools
        cache's own, by keyword."""
        super().__init__(getsizeof=self._weigh, **kwargs)
        if name is not None:
            ttl = getattr(self, "ttl", seconds)
            keep(name, self.clear, kind=kind, bytes=int(self.maxsize), seconds=ttl, cache=self)

    def __setitem__(self, key, value) -> None:
        self._key = key
        try:
            super().__setitem__(key, value)
        except ValueError:  # heavier than the whole cache
            self.pop(key, None)
        finally:
            self._key = None

    def _weigh(self, value) -> int:
        return ENTRY_BYTES + weight(self._key) + weight(value)


class WeighedLRU(_Weighed, LRUCache):
    pass


class WeighedTTL(_Weighed, TTLCache):
    pass


class WeighedTLRU(_Weighed, TLRUCache):
    pass

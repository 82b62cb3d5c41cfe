"""What a reader process remembers, bounded in bytes: caches whose entries weigh their
key and their value, so that no client fills one by varying what it asks."""

import dataclasses
import datetime as dt
import sys
import weakref
from decimal import Decimal
from functools import cache
from operator import attrgetter

from cachetools import LRUCache, TLRUCache, TTLCache

# What cachetools keeps beside each entry (its slots in the data, size and order dicts, a link in
# the TTL caches' list), measured with tracemalloc: 130 bytes for an LRUCache, 220 for a TTLCache.
ENTRY_BYTES = 256  # bytes
_CONTAINERS = (tuple, list, set, frozenset)
# Values that refer to nothing else a cache would hold: their own size is their weight.
_LEAVES = frozenset({str, bytes, int, float, bool, type(None), Decimal, dt.datetime, dt.date})


@cache
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
    bytes objects) in one pass in C, anything else value by value."""
    if set(map(type, values)) <= _LEAVES:
        return sum(map(sys.getsizeof, values))
    return sum(map(weight, values))


def weight(value) -> int:
    """The bytes `value` holds, counting everything it refers to (what is shared, once per
    reference: a bound, never less than the truth). A type's own objects (classes, functions,
    time zones) are not counted: they exist anyway. Values are data: no cycles."""
    kind = type(value)
    size = sys.getsizeof(value)
    if kind in _LEAVES:
        return size
    if kind in _CONTAINERS:
        return size + _items_weight(value)
    if kind is dict:
        return size + _items_weight(value.keys()) + _items_weight(value.values())
    if isinstance(value, type):
        return 0
    fields = _fields(kind)
    if fields is not None:
        return size + sum(map(weight, fields(value)))
    held = getattr(value, "__dict__", None)
    return size if held is None else size + weight(held)


_every: list[weakref.ref] = []  # every cache bounded in bytes, for forget_all


def forget_all() -> None:
    """Empty every cache bounded in bytes, wherever it is kept (between tests, after a restore)."""
    for ref in _every:
        kept = ref()
        if kept is not None:
            kept.clear()


class _Weighed:
    """A cache bounded in bytes: `maxsize` is bytes, each entry weighs its key and its value, and an
    entry heavier than the whole cache is not kept (cachetools would refuse it with an error).

    The key being stored is held for getsizeof, which cachetools calls with the value alone: callers
    hold a lock around every use of a cache, as cachetools requires anyway."""

    _key = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _every.append(weakref.ref(self))

    def __setitem__(self, key, value) -> None:
        self._key = key
        try:
            super().__setitem__(key, value)
        except ValueError:  # heavier than the whole cache
            self.pop(key, None)
        finally:
            self._key = None

    def getsizeof(self, value) -> int:
        return ENTRY_BYTES + weight(self._key) + weight(value)


class WeighedLRU(_Weighed, LRUCache):
    pass


class WeighedTTL(_Weighed, TTLCache):
    pass


class WeighedTLRU(_Weighed, TLRUCache):
    pass

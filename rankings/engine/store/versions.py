"""Versions in Redis: which one serves reads, each one's layout and generation, and their removal."""

import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import cast

from redis.client import Pipeline

from rankings.engine.store.client import (
    ERRORS,
    Client,
    ResponseError,
    Unreachable,
    clustered,
    fast,
    memory_lock,
    patient,
    remember,
    remembered,
    script,
    store_error,
    translated,
)
from rankings.engine.store.keys import TEMP_MARK, active_key, gen_key, prefix, shards_key, version_pattern

# How long a reader trusts its copy of the active version; a switch-over is
# seen by every reader within this time, and both versions stay whole meanwhile.
ACTIVE_VERSION_TTL = 1.0  # seconds
# Keys SCAN visits per call: it walks the whole keyspace whatever the pattern (other prefixes'
# keys too), so a larger step costs far fewer round trips; each call stays a few milliseconds.
SCAN_COUNT = 10_000

# What a store function given `pipe=` sends its commands through: a block's transaction, or on a
# Redis Cluster the client itself (see `pipeline`).
Commands = Pipeline | Client

# The field of the readers' pointer that every push of catalogue names raises: read with the
# version, in the same round trip, so that every reader sees a push within ACTIVE_VERSION_TTL at no
# cost of its own. Its value means nothing but a change.
NAMES_FIELD = "names"

# prefix -> (the active version as last read from Redis, time.monotonic() of that read, the names
# stamp read with it): trusted for ACTIVE_VERSION_TTL, and served while Redis is unreachable. A
# plain dict, read without the lock, because every read of a board asks it first; emptied should
# it ever hold REMEMBERED_PREFIXES prefixes.
active_read: dict[str, tuple[int, float, bytes | None]] = remembered({})


def _active_forget() -> None:
    with memory_lock:
        active_read.pop(prefix(), None)


@translated
def served_version(*, fresh: bool = False) -> int:
    """The version that serves reads; when Redis is unreachable, the last one seen."""
    key = prefix()
    known = active_read.get(key)
    if known is not None and not fresh and time.monotonic() - known[1] < ACTIVE_VERSION_TTL:
        return known[0]
    try:
        try:
            value, names = fast().hmget(active_key(), ["version", NAMES_FIELD])
        except ResponseError:  # a pointer from before switches were numbered, until a tick
            value, names = fast().get(active_key()), None
    except ERRORS as error:
        if known is not None:
            return known[0]
        raise Unreachable(str(error)) from error
    version = int(value) if value else 1
    remember(active_read, key, (version, time.monotonic(), names))
    return version


def names_stamp() -> bytes | None:
    """The catalogue's names stamp as last read with the active version, without a round trip (it
    changes when a push of names commits); None before this process has read the version."""
    known = active_read.get(prefix())
    return None if known is None else known[2]


@translated
def names_changed() -> None:
    """Raise the names stamp: every reader forgets the names it remembers once it reads the version
    again (within ACTIVE_VERSION_TTL), this process at its next read."""
    patient().hincrby(active_key(), NAMES_FIELD, 1)
    _active_forget()


@translated
def active_set(version: int, epoch: int, *, pipe: Commands | None = None) -> int | None:
    """Point every reader at `version`, made active by switch `epoch` (they see it within
    ACTIVE_VERSION_TTL); refused if the pointer names a later switch (lua/active_set.lua). Returns
    the version named (with `pipe`, the pipeline's result holds it)."""
    named = script("active_set")(keys=[active_key()], args=[version, epoch], client=pipe or patient())
    if pipe is not None:
        return None
    _active_forget()
    return int(named)


@translated
def active_ensure(version: int, epoch: int) -> int:
    """Restore the readers' pointer if Redis lost it or it names an earlier switch than `epoch`."""
    return int(script("active_set")(keys=[active_key()], args=[version, epoch], client=patient()))


@contextmanager
def pipeline() -> Iterator[Commands]:
    """Commands of several store functions, each given `pipe=`, sent when the block ends in one
    MULTI/EXEC: no other client's command runs between them, and none is sent if the block raises
    or the connection drops before EXEC.

    On a Redis Cluster the keys of one block may lie on different nodes, where no MULTI reaches:
    there each command is sent as it is given, and answered before the next, so a block must give
    them in an order of which every prefix is harmless (the shard count before the pointer that
    names its version)."""
    if clustered():
        try:
            yield patient()
        except ERRORS as error:
            raise store_error(error) from error
        _active_forget()
        return
    pipe = patient().pipeline(transaction=True)
    try:
        yield pipe
        pipe.execute()
    except ERRORS as error:
        raise store_error(error) from error
    finally:
        pipe.reset()
    # The block may have moved the readers' pointer (active_set): this process sees it at once.
    _active_forget()


# A version's layout never changes, so a reader asks Redis once per version: (prefix, version) -> layout.
_layouts: dict[tuple[str, int], tuple[int, tuple[str, ...]]] = remembered({})


@translated
def shard_layout_set(
    version: int, shards: int, pinned: Sequence[str] = (), *, pipe: Commands | None = None
) -> None:
    """Record the version's layout (its shard count, then its pinned categories, comma-separated:
    slugs hold no comma) where readers find it without PostgreSQL."""
    (pipe or patient()).set(shards_key(version), ",".join([str(shards), *pinned]))


@translated
def shard_layout_get(version: int) -> tuple[int, tuple[str, ...]] | None:
    """The version's (shard count, pinned categories) as recorded in Redis; None when Redis does not hold it."""
    key = (prefix(), version)
    known = _layouts.get(key)
    if known is not None:
        return known
    value = fast().get(shards_key(version))
    if value is None:
        return None
    count, *pinned = cast(bytes, value).decode().split(",")
    layout = (int(count), tuple(pinned))
    remember(_layouts, key, layout)
    return layout


@translated
def generation(version: int) -> str:
    """The current generation token, created if missing (after Redis lost its data)."""
    token = uuid.uuid4().hex
    return generation_of(cast(bytes | None, patient().set(gen_key(version), token, nx=True, get=True)), token)


def generation_of(held: bytes | None, token: str) -> str:
    """The generation after SET NX GET of `token`: the one Redis held, else `token`, now set."""
    return held.decode() if held is not None else token


@translated
def generation_get(version: int) -> str | None:
    """The version's generation token, or None when Redis does not hold the version."""
    value = cast(bytes | None, patient().get(gen_key(version)))
    return value.decode() if value else None


@translated
def version_delete(version: int) -> int:
    """Delete every key of a version; returns how many."""
    r = patient()
    deleted = 0
    batch = []
    for key in r.scan_iter(match=version_pattern(version), count=SCAN_COUNT):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += r.unlink(*batch)
            batch = []
    if batch:
        deleted += r.unlink(*batch)
    return deleted


@translated
def keyspace_survey() -> tuple[set[int], list[str]]:
    """One SCAN of every version's keys: the versions Redis holds, and the temporary boards without
    a TTL (left by a rebuild that died before temporary boards were given one)."""
    r = patient()
    start = len(prefix()) + 2  # past "P:v"
    versions: set[int] = set()
    temporary: list[str] = []
    for raw in r.scan_iter(match=f"{prefix()}:v*", count=SCAN_COUNT):
        key = raw.decode()
        number = key[start:].split(":", 1)[0]
        if number.isdigit():
            versions.add(int(number))
        if TEMP_MARK in key:
            temporary.append(key)
    pipe = r.pipeline(transaction=False)
    for key in temporary:
        pipe.ttl(key)
    ttls = pipe.execute() if temporary else []
    return versions, [key for key, ttl in zip(temporary, ttls, strict=True) if ttl == -1]


@translated
def keys_delete(keys: list[str]) -> int:
    return patient().unlink(*keys) if keys else 0

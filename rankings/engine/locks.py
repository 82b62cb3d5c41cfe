"""PostgreSQL advisory locks: which pieces of work exclude each other, and why.

Each lock is a pair of keys (namespace, id). The namespaces are the engine's
own numbers, so that they never collide with another application's locks on
the same database, nor with each other. Session-level locks span transactions
and are released on exit even when the work raises.
"""

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from django.db import connection

# A tick holds its shard's lock while it claims, folds and applies one batch
# after another: one writer per shard, so batches are numbered without gaps.
# Anything that must see a shard between two batches (a switch-over, a
# rebuild's snapshot, a verify, a clock reset) takes the same lock.
SHARD_NAMESPACE = 0x5A1E5
# A rebuild holds this lock (id: its version number) while it works, so that a
# build whose process died is recognised (nobody holds its lock) and failed.
BUILD_NAMESPACE = SHARD_NAMESPACE + 1
# A switch-over and the expiry of versions hold this lock, so that a version
# cannot become active between expiry choosing it and deleting it.
VERSION_CHANGE_NAMESPACE = SHARD_NAMESPACE + 2
# Creating a month's partition of the sales: two ingests that need the same new
# month take turns, and the second then finds it. Its own namespace: under the
# version changes' one, an ingest would wait for a switch-over to finish.
PARTITION_NAMESPACE = SHARD_NAMESPACE + 3
# The shard layout of the work queue: an ingest holds it shared from reading the active layout
# until it commits the sales it queued under it; a switch-over that re-lays out the shards holds it
# exclusively while it re-keys the queue, so that no sale is queued under the layout it leaves.
LAYOUT_NAMESPACE = SHARD_NAMESPACE + 4
# The catalogue's tree trigger (catalogue/migrations/0004_category_parent.py) takes (this, 0) in a
# transaction that places a category under a parent, so that two moves cannot each see no cycle
# and make one. The trigger writes the number out: the catalogue does not import the engine.
TREE_NAMESPACE = SHARD_NAMESPACE + 5
# Engagement ingests share this lock while they judge an event by the retention and store it;
# dropping a day's partition takes it alone, so no ingest inserts into a day being dropped.
RETENTION_NAMESPACE = SHARD_NAMESPACE + 20

# How long a switch-over, a snapshot or a verify waits for a running tick to finish its batch.
WAIT = "30s"


@contextmanager
def _lock_timeout(cursor, timeout: str) -> Iterator[None]:
    """A statement waiting for a lock gives up after `timeout` (PostgreSQL's lock_timeout)."""
    cursor.execute("SELECT set_config('lock_timeout', %s, false)", [timeout])
    try:
        yield
    finally:
        cursor.execute("SELECT set_config('lock_timeout', '0', false)")


@contextmanager
def _held(namespace: int, key: int, *, timeout: str) -> Iterator[None]:
    """Wait (at most `timeout`) for the lock (namespace, key), hold it, release it. A free lock is
    taken in one statement; only a wait sets the lock timeout for its duration."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [namespace, key])
        (acquired,) = cursor.fetchone()
        if not acquired:
            with _lock_timeout(cursor, timeout):
                cursor.execute("SELECT pg_advisory_lock(%s, %s)", [namespace, key])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [namespace, key])


@contextmanager
def _tried(namespace: int, key: int) -> Iterator[bool]:
    """Take the lock (namespace, key) if it is free; yield whether it was taken, release it if so."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [namespace, key])
        (acquired,) = cursor.fetchone()
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [namespace, key])


def shard_try_lock(shard: int):
    """A tick's lock on its shard, without waiting: yields False when another tick holds it."""
    return _tried(SHARD_NAMESPACE, shard)


def shard_free(shard: int) -> bool:
    """Whether no other session holds the shard's tick lock, as of now: taken and let go at once.
    A tick looks before it gives a shard to a thread, which then takes the lock on its own connection."""
    with _tried(SHARD_NAMESPACE, shard) as acquired:
        return acquired


def shard_lock(shard: int, *, timeout: str = WAIT):
    """Wait for the shard's tick lock (a running tick finishes its batch first), hold it, release it."""
    return _held(SHARD_NAMESPACE, shard, timeout=timeout)


class AllShards:
    """Every shard's tick lock, held until released (by `release` or at the end of the block)."""

    def __init__(self, stack: ExitStack):
        self._stack = stack

    def release(self) -> None:
        """Let the ticks go on before the block ends (a snapshot needs the locks only to begin)."""
        self._stack.close()


@contextmanager
def all_shards_lock(shards: int, *, timeout: str = WAIT) -> Iterator[AllShards]:
    """Every shard's tick lock (shards 0..shards-1), each waited for in turn: every shard then stands
    between two batches. Should one not come, those already taken are released."""
    with ExitStack() as stack:
        for shard in range(shards):
            stack.enter_context(shard_lock(shard, timeout=timeout))
        yield AllShards(stack)


def version_change_lock(*, timeout: str = WAIT):
    """Held by a switch-over and by the expiry of versions."""
    return _held(VERSION_CHANGE_NAMESPACE, 0, timeout=timeout)


def build_lock(number: int):
    """Held by the rebuild of version `number` for as long as it works."""
    return _held(BUILD_NAMESPACE, number, timeout="0")


def build_try_lock(number: int):
    """Yields True when no process builds version `number` (its builder is gone), holding the lock."""
    return _tried(BUILD_NAMESPACE, number)


def partition_create_lock() -> None:
    """Wait for the lock of partition creation; it is held until the current transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, 0)", [PARTITION_NAMESPACE])


def layout_read_lock() -> None:
    """Share the layout lock until the current transaction ends (an ingest, before it reads the layout)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock_shared(%s, 0)", [LAYOUT_NAMESPACE])


def layout_change_lock(*, timeout: str = WAIT) -> None:
    """Hold the layout lock alone until the current transaction ends: running ingests commit first.
    Waiting longer than `timeout` raises (OperationalError) and the transaction rolls back."""
    with connection.cursor() as cursor:
        # Local to the transaction: once a wait has failed, nothing more can run in it to reset this.
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [timeout])
        cursor.execute("SELECT pg_advisory_xact_lock(%s, 0)", [LAYOUT_NAMESPACE])
        cursor.execute("SELECT set_config('lock_timeout', '0', true)")


def retention_read_lock() -> None:
    """Share the retention lock until the current transaction ends (an engagement ingest)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock_shared(%s, 0)", [RETENTION_NAMESPACE])


def retention_change_lock() -> None:
    """Hold the retention lock alone until the current transaction ends (dropping old days)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, 0)", [RETENTION_NAMESPACE])

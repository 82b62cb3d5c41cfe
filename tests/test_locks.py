"""Advisory locks: a waiting lock gives up after its timeout, and a failed attempt to take
every shard's lock gives back only what it took."""

import re
import time

import psycopg
import pytest
from django.db import OperationalError, connection

from rankings.engine import locks

from .processes import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


def _other_session() -> psycopg.Connection:
    """A second PostgreSQL session, as another process would hold one."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


def _free(other: psycopg.Connection, namespace: int, key: int) -> bool:
    """Whether another session can take the lock (taken and given back at once)."""
    (taken,) = other.execute("SELECT pg_try_advisory_lock(%s, %s)", [namespace, key]).fetchone()
    if taken:
        other.execute("SELECT pg_advisory_unlock(%s, %s)", [namespace, key])
    return taken


def _lock_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        return cursor.fetchone()[0]


def test_a_waiting_shard_lock_gives_up_after_its_timeout_and_restores_lock_timeout():
    # given a shard whose lock another session holds
    with _other_session() as other:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [locks.SHARD_NAMESPACE, 1])
        # when this session waits for it at most 200 ms
        started = time.monotonic()
        with pytest.raises(OperationalError, match="lock timeout"), locks.shard_lock(1, timeout="200ms"):
            pytest.fail("the lock was granted while another session holds it")
        # then it gives up after about that, and later statements wait as long as they need
        assert time.monotonic() - started < 5
    assert _lock_timeout() == "0"


def test_a_shard_lock_is_held_in_the_block_and_released_after_it():
    with _other_session() as other:
        with locks.shard_lock(3):
            assert not _free(other, locks.SHARD_NAMESPACE, 3)
        assert _free(other, locks.SHARD_NAMESPACE, 3)


def test_taking_every_shard_lock_that_fails_gives_back_only_what_it_took():
    """Given this session holds the version changes' lock, a failed all_shards_lock releases the shard
    locks it took, and the version changes' lock stays held."""
    with _other_session() as other:
        # given shard 1 held elsewhere
        other.execute("SELECT pg_advisory_lock(%s, %s)", [locks.SHARD_NAMESPACE, 1])
        with locks.version_change_lock():
            # when every shard's lock is asked for
            with pytest.raises(OperationalError), locks.all_shards_lock(2, timeout="200ms"):
                pytest.fail("every shard's lock was granted while another session holds shard 1's")
            # then shard 0 is free again, and the version changes' lock is still this session's
            assert _free(other, locks.SHARD_NAMESPACE, 0)
            assert not _free(other, locks.VERSION_CHANGE_NAMESPACE, 0)


def test_all_shards_lock_released_early_lets_the_ticks_go_on():
    with _other_session() as other, locks.all_shards_lock(2) as held:
        assert not _free(other, locks.SHARD_NAMESPACE, 0)
        assert not _free(other, locks.SHARD_NAMESPACE, 1)
        held.release()
        assert _free(other, locks.SHARD_NAMESPACE, 0) and _free(other, locks.SHARD_NAMESPACE, 1)


def test_every_advisory_lock_of_the_database_has_a_namespace_of_its_own_in_locks():
    """Two kinds of work that share a namespace would wait for each other for no reason; a lock
    taken in SQL (the catalogue's tree trigger) is registered beside the engine's."""
    namespaces = [value for name, value in vars(locks).items() if name.endswith("_NAMESPACE")]
    assert len(namespaces) == len(set(namespaces))
    taken = set()
    for path in [*ROOT.glob("*/migrations/*.py"), *ROOT.glob("*/migrations/sql/*.sql")]:
        taken.update(int(n) for n in re.findall(r"pg_advisory_xact_lock\((\d+)", path.read_text()))
    assert taken and taken <= set(namespaces)

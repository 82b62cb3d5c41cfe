"""A tick over a backlog ticks its shards side by side, each thread on a connection of its own.

The shards are independent (each under its own lock, with its own queue, buckets and batch
sequence), so a backlog over several shards is worked in TICK_THREADS threads. A small queue,
or a tick inside a transaction (whose sales another connection cannot see), stays on the
caller's thread and connection.
"""

import contextlib
import threading

import psycopg
import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.db import DatabaseError, connection, transaction
from django.db.backends.signals import connection_created

from rankings.engine import batches, locks
from rankings.engine import tick as ticks
from rankings.engine.shards import ALL, Layout, shard_of

from .processes import wait_until
from .rankings_helpers import Shop


@pytest.fixture
def ticked_by(monkeypatch):
    """shard -> (thread name, database backend pid) of each shard tick."""
    seen = {}
    real = batches.tick_shard

    def recorded(*, state, **kwargs):
        seen[state.shard] = (threading.current_thread().name, connection.connection.info.backend_pid)
        real(state=state, **kwargs)

    monkeypatch.setattr(batches, "tick_shard", recorded)
    return seen


def _backlog(shop: Shop, n: int) -> None:
    shop.send(*[shop.sale(f"p{i % 13}", categories=[f"c{i % 6}"], qty=1 + i % 4) for i in range(n)])


def _shop(settings, *, sales: int, parallel_from: int, threads: int = 2) -> Shop:
    """A shop with `sales` pending, ticking in `threads` threads from `parallel_from` pending rows."""
    settings.RANKINGS = {**settings.RANKINGS, "TICK_THREADS": threads, "TICK_PARALLEL_FROM": parallel_from}
    shop = Shop()
    _backlog(shop, sales)
    return shop


@pytest.mark.django_db(transaction=True)
def test_a_backlog_is_ticked_in_threads_on_their_own_connections_each_sale_once(
    settings, ticked_by, monkeypatch
):
    shop = _shop(settings, sales=240, parallel_from=100)
    # each thread's first shard waits for the other's: both threads at work at once, however the
    # machine schedules them (one thread alone would break the barrier)
    both_at_work, started = threading.Barrier(2), set()
    recording = batches.tick_shard

    def meeting(**kwargs):
        if threading.current_thread().name not in started:
            started.add(threading.current_thread().name)
            both_at_work.wait(timeout=10)
        recording(**kwargs)

    monkeypatch.setattr(batches, "tick_shard", meeting)
    report = shop.tick()
    # every shard ticked, by the pool's threads, on two connections other than the caller's
    assert report.ticked_shards == [0, 1, 2, 3]
    threads = {name for name, _ in ticked_by.values()}
    pids = {pid for _, pid in ticked_by.values()}
    assert len(threads) == 2 and not threads & {threading.current_thread().name}, threads
    assert len(pids) == 2 and connection.connection.info.backend_pid not in pids
    # each sale counted once, and the threads' connections closed when they finished
    assert report.sales == 240
    shop.assert_exact()

    def gone() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [sorted(pids)])
            return cursor.fetchone()[0] == 0

    wait_until(gone, timeout=10, what="the tick threads' connections to close")


@pytest.mark.django_db(transaction=True)
def test_a_queue_smaller_than_a_backlog_is_ticked_on_the_callers_connection(settings, ticked_by):
    shop = _shop(settings, sales=99, parallel_from=1000)  # at most 2 rows each: all's and its category's
    shop.tick()
    assert {where for where in ticked_by.values()} == {
        (threading.current_thread().name, connection.connection.info.backend_pid)
    }
    shop.assert_exact()


@pytest.mark.django_db
def test_a_tick_inside_a_transaction_stays_on_its_connection(settings, ticked_by):
    """Another connection would not see the transaction's sales: they would wait a tick, uncounted."""
    settings.RANKINGS = {**settings.RANKINGS, "TICK_THREADS": 2, "TICK_PARALLEL_FROM": 1}
    shop = Shop()
    with transaction.atomic():
        _backlog(shop, 50)
        report = shop.tick()
        assert report.sales == 50
        assert {pid for _, pid in ticked_by.values()} == {connection.connection.info.backend_pid}
    shop.assert_exact()


@pytest.mark.django_db(transaction=True)
def test_a_shard_held_elsewhere_is_busy_and_the_others_tick_in_threads(settings, ticked_by):
    shop = _shop(settings, sales=240, parallel_from=100)
    held = threading.Event()
    release = threading.Event()

    def hold_shard_2():
        from rankings.engine import locks

        try:
            with locks.shard_lock(2):
                held.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_shard_2)
    holder.start()
    try:
        assert held.wait(timeout=10)
        report = shop.tick()
    finally:
        release.set()
        holder.join()
    assert report.busy_shards == [2]
    assert report.ticked_shards == [0, 1, 3]
    # the next tick takes the held shard's sales: each counted once
    shop.advance(seconds=2)
    assert shop.tick().ticked_shards == [0, 1, 2, 3]
    shop.assert_exact()


@pytest.mark.django_db(transaction=True)
def test_a_tick_cut_short_in_one_thread_stops_the_others_after_their_shard(settings, monkeypatch):
    """The tick's time is up while one thread works the shard of `all`: the other thread finishes
    the shard it is on and takes no other; the tick raises, and the next one counts the rest."""
    shop = _shop(settings, sales=240, parallel_from=100)
    every = shard_of(ALL, Layout(4))  # first in the queue
    other_on_a_shard, cut = threading.Event(), threading.Event()
    entered = []
    real = ticks._tick_shard_isolated

    def isolated(*, shard, **kwargs):
        entered.append(shard)
        if shard == every:
            assert other_on_a_shard.wait(timeout=10), "the other thread never took a shard"
            cut.set()
            raise SoftTimeLimitExceeded()
        other_on_a_shard.set()
        assert cut.wait(timeout=10), "the shard of all was never reached"
        real(shard=shard, **kwargs)

    monkeypatch.setattr(ticks, "_tick_shard_isolated", isolated)
    with pytest.raises(SoftTimeLimitExceeded):
        shop.tick()
    # the shard of all, and the one shard the other thread was on: none of the other two
    assert len(entered) == 2 and every in entered, entered
    monkeypatch.setattr(ticks, "_tick_shard_isolated", real)
    assert shop.tick().ticked_shards == [0, 1, 2, 3]
    shop.assert_exact()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("held", [[0, 1, 2, 3], [0, 1, 3]])
def test_a_tick_opens_a_connection_only_for_a_shard_it_has_locked(settings, held):
    """Every tick task that starts during a backlog would otherwise open TICK_THREADS connections,
    busy shards or not: with many workers, ticks woken by every commit would exhaust PostgreSQL's
    connections while one tick holds the shards. The tick claims a shard (its lock) before a thread
    and its connection are given it."""
    # given a backlog on every shard, and another session holding the locks of `held`
    shop = _shop(settings, sales=240, parallel_from=100, threads=4)
    holding, release = threading.Event(), threading.Event()

    def hold():
        try:
            with contextlib.ExitStack() as stack:
                for shard in held:
                    stack.enter_context(locks.shard_lock(shard))
                holding.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    opened = []

    def count(sender, connection, **kwargs):
        opened.append(threading.current_thread().name)

    try:
        assert holding.wait(timeout=10)
        connection_created.connect(count)
        report = shop.tick()
    finally:
        connection_created.disconnect(count)
        release.set()
        holder.join()

    # then the held shards are busy, and only the free one cost a connection
    assert report.busy_shards == held
    assert len(opened) == 4 - len(held), opened
    assert report.ticked_shards == sorted(set(range(4)) - set(held))


@pytest.mark.django_db(transaction=True)
def test_a_shard_stays_locked_while_its_thread_works_though_the_ticks_own_session_ends(settings, monkeypatch):
    """The tick's own session may end while its threads work (idle_session_timeout, a dropped
    connection, pg_terminate_backend): the lock of a shard a thread is working is that thread's
    session's, so no other tick can take the shard meanwhile."""
    shop = _shop(settings, sales=240, parallel_from=100)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (ticks_session,) = cursor.fetchone()
    real = batches.tick_shard
    free_meanwhile = {}  # shard: whether another session could take its lock while it was worked
    first = threading.Lock()  # held by the first thread at a shard

    def ended_meanwhile(*, state, **kwargs):
        if first.acquire(blocking=False):
            with psycopg.connect(**_other_session()) as other:
                other.execute("SELECT pg_terminate_backend(%s)", [ticks_session])
                gone = "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)"
                wait_until(
                    lambda: other.execute(gone, [ticks_session]).fetchone()[0],
                    timeout=10,
                    what="the tick's own session to end",
                )
                (taken,) = other.execute(
                    "SELECT pg_try_advisory_lock(%s, %s)", [locks.SHARD_NAMESPACE, state.shard]
                ).fetchone()
                free_meanwhile[state.shard] = taken
        real(state=state, **kwargs)

    monkeypatch.setattr(batches, "tick_shard", ended_meanwhile)
    with contextlib.suppress(DatabaseError):
        shop.tick()  # its own session is gone: it may fail once its threads are done
    connection.close()
    assert list(free_meanwhile.values()) == [False], free_meanwhile
    # and the next tick counts every sale once
    monkeypatch.setattr(batches, "tick_shard", real)
    shop.advance(seconds=2)
    shop.tick()
    shop.assert_exact()


def _other_session() -> dict:
    """Connection arguments of a session of its own on the test database."""
    settings = connection.settings_dict
    return {
        "dbname": settings["NAME"],
        "user": settings["USER"],
        "host": settings["HOST"],
        "port": settings["PORT"],
        "password": settings["PASSWORD"],
        "autocommit": True,
    }

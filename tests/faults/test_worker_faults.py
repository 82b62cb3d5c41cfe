"""Faults of the write path's processes, with real gunicorn, Celery workers and beats.

A stream of sales is posted the whole time and the read API is read the whole
time. After each fault the write path catches up by itself, and then every
board equals the recompute from raw sales, every sale sent is stored once and
counted once, and no read failed. Run with -s to see the figures.
"""

import time

import pytest

from rankings.models import TickLog

from .stack import (
    Reader,
    SaleStream,
    Stack,
    assert_exact,
    figures,
    settle,
    show,
    token_for_ingest,
    wait_for,
    worker_backends,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.faults]

KILLS = 3


@pytest.fixture
def stack(tmp_path, fault_redis, transactional_db):
    # Small batches: a tick works through several, so there is a middle to be killed in.
    stack = Stack(tmp_path, fault_redis.url, RANKINGS_BATCH_SIZE=50, THROTTLE_INGEST="", THROTTLE_READS="")
    yield stack
    stack.close()


def _ticking(timeout: float = 30) -> None:
    wait_for(lambda: TickLog.objects.exists(), timeout, interval=0.05, what="the first tick")


def test_worker_killed_mid_tick_three_times_loses_and_doubles_nothing(stack):
    """kill -9 of the worker inside a batch's transaction; a new worker takes over."""
    # given a web process, a worker and a beat, a stream of sales and readers
    host = stack.web()
    worker = stack.worker("w0")
    stack.beat("beat")
    _ticking()
    stream = SaleStream(host, token_for_ingest(), clients=2, batch=40).start()
    reader = Reader(host).start()
    # when the worker is killed in the middle of a tick, three times
    for kill in range(1, KILLS + 1):
        time.sleep(1.0)
        # a session with a transaction id has claimed sales it has not committed yet: mid-batch
        wait_for(
            lambda: any(xid for _, xid, _ in worker_backends()), timeout=30, what="a tick inside a batch"
        )
        stack.kill9(worker)
        worker = stack.worker(f"w{kill}")
    time.sleep(1.0)
    # then the last worker catches up and everything is exact
    result, caught_up = stack.wind_down(stream, reader)
    result.update(
        **{"kills mid-batch": KILLS},
        reads=sum(reader.statuses.values()),
        **{"read errors": reader.server_errors, "catch-up s": round(caught_up, 2)},
    )
    show("kill -9 of the worker mid-tick", result)
    assert_exact(result)
    assert reader.server_errors == 0, reader.statuses


def test_two_beats_at_once_never_double_apply(stack):
    """Two schedulers send every tick twice to two workers; the shard locks keep it single."""
    host = stack.web()
    stack.worker("w1")
    stack.worker("w2")
    stack.beat("beat-1")
    second = stack.beat("beat-2")
    _ticking()
    stream = SaleStream(host, token_for_ingest(), clients=2, batch=40).start()
    reader = Reader(host).start()
    # both beats for a while, then one
    time.sleep(6)
    ticks_with_two = TickLog.objects.count()
    stack.stop(second)
    time.sleep(2)
    result, caught_up = stack.wind_down(stream, reader)
    result.update(
        **{"ticks while two beats ran": ticks_with_two},
        reads=sum(reader.statuses.values()),
        **{"read errors": reader.server_errors, "catch-up s": round(caught_up, 2)},
    )
    show("two beat schedulers at once", result)
    assert_exact(result)
    assert reader.server_errors == 0, reader.statuses


def test_tick_connection_terminated_mid_batch(stack):
    """pg_terminate_backend of the worker's session while a batch's transaction is open."""
    from django.db import connection

    host = stack.web()
    worker = stack.worker("w1")
    stack.beat("beat")
    _ticking()
    stream = SaleStream(host, token_for_ingest(), clients=2, batch=40).start()
    reader = Reader(host).start()
    terminated = 0
    for _ in range(KILLS):
        time.sleep(1.0)
        # a session with a transaction id has claimed sales it has not committed yet: mid-batch
        pid = wait_for(
            lambda: next((pid for pid, xid, _ in worker_backends() if xid), None),
            timeout=30,
            what="a tick inside a batch",
        )
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            terminated += cursor.fetchone()[0]
    ticks_before = TickLog.objects.count()
    time.sleep(1.0)
    stream.stop()
    caught_up = settle()
    ticks_after = TickLog.objects.count()
    reader.stop()
    assert worker.poll() is None, "the worker died with its connection"
    stack.stop_celery()
    result = figures(stream.sent, accepted=stream.replies["accepted"])
    result.update(
        **{
            "sessions terminated mid-batch": terminated,
            "ticks after the last termination": ticks_after - ticks_before,
        },
        reads=sum(reader.statuses.values()),
        **{"read errors": reader.server_errors, "catch-up s": round(caught_up, 2)},
    )
    show("the tick's PostgreSQL session terminated mid-batch", result)
    assert terminated == KILLS
    assert ticks_after > ticks_before, "no tick finished after the terminations"
    assert_exact(result)
    assert reader.server_errors == 0, reader.statuses

"""Faults of the write path's processes, with real gunicorn, Celery workers and beats.

A stream of sales is posted the whole time and the read API is read the whole
time. Each test first proves its fault really happened (the killed batch's
transaction was rolled back, the two beats sent ticks in the same seconds),
then that the write path caught up by itself: every board equals the recompute
from raw sales, every sale sent is stored once and counted once, and no read
failed. Run with -s to see the figures.
"""

import re

import pytest
from django.db import connection

from rankings.models import TickLog

from .stack import (
    Reader,
    SaleStream,
    Stack,
    assert_exact,
    figures,
    mid_batch,
    settle,
    show,
    token_for_ingest,
    transaction_outcome,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.faults]

KILLS = 3
# A kill that comes just after the batch committed proves nothing: it is tried
# again, up to this many times in all.
ATTEMPTS = 12
# Ticks each beat sends while both run: at two a second, some seconds of doubled ticks.
OVERLAP_TICKS = 8
# Celery beat's line for each tick it sends, and the time at its start.
TICK_SENT = "Sending due task rankings-tick"
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")


@pytest.fixture
def stack(tmp_path, fault_redis, transactional_db):
    # Small batches: a tick works through several, so there is a middle to be killed in.
    stack = Stack(
        tmp_path, fault_redis.url, rankings={"BATCH_SIZE": 50}, THROTTLE_INGEST="", THROTTLE_READS=""
    )
    yield stack
    stack.close()


def _ticking(stack: Stack, timeout: float = 30) -> None:
    wait_for(
        lambda: TickLog.objects.exists(), timeout, interval=0.05, what="the first tick", watch=stack.running()
    )


def _sent_at(lines: list[str]) -> list[str]:
    """When each line was logged, as written (the format sorts as the times do)."""
    return [m[1] for line in lines if (m := LOG_TIME.match(line))]


def test_worker_killed_mid_tick_three_times_loses_and_doubles_nothing(stack):
    """kill -9 of the worker inside a batch's transaction; a new worker takes over."""
    # given a web process, a worker and a beat, a stream of sales and readers
    host = stack.web()
    worker = stack.worker("w0")
    stack.beat("beat")
    _ticking(stack)
    stream = SaleStream(host, token_for_ingest(), clients=2, batch=40).start()
    reader = Reader(host).start()
    # when the worker is killed while a batch's transaction is open, three times
    outcomes = []
    while outcomes.count("aborted") < KILLS and len(outcomes) < ATTEMPTS:
        _, xid = mid_batch()
        worker.kill()
        # the premise: the batch the kill interrupted was rolled back, not committed
        outcomes.append(transaction_outcome(xid))
        worker = stack.worker(f"w{len(outcomes)}")
    # then the last worker takes over, catches up, and everything is exact
    result, caught_up = stack.wind_down(stream, reader)
    result.update(
        **{"kills mid-batch": outcomes.count("aborted"), "kills after a commit": outcomes.count("committed")},
        reads=sum(reader.statuses.values()),
        **{"read errors": reader.server_errors, "catch-up s": round(caught_up, 2)},
    )
    show("kill -9 of the worker mid-tick", result)
    assert outcomes.count("aborted") == KILLS, f"the kills landed mid-batch too rarely: {outcomes}"
    assert_exact(result)
    assert reader.server_errors == 0, reader.statuses


def test_two_beats_at_once_never_double_apply(stack):
    """Two schedulers send every tick twice to two workers; the shard locks keep it single."""
    host = stack.web()
    stack.worker("w1")
    stack.worker("w2")
    first = stack.beat("beat-1")
    second = stack.beat("beat-2")
    _ticking(stack)
    stream = SaleStream(host, token_for_ingest(), clients=2, batch=40).start()
    reader = Reader(host).start()
    # when both beats run for a while, then one
    wait_for(
        lambda: len(second.lines(TICK_SENT)) >= OVERLAP_TICKS,
        30,
        interval=0.05,
        what="the second beat to send its ticks",
        watch=stack.running(),
    )
    ticks_with_two = TickLog.objects.count()
    second.stop()
    # the premise: the first beat sent about as many ticks in the seconds the second was sending its own
    seconds = _sent_at(second.lines(TICK_SENT))
    overlapping = [t for t in _sent_at(first.lines(TICK_SENT)) if seconds[0] <= t <= seconds[-1]]
    # and the first beat goes on alone for a few ticks
    sent = len(first.lines(TICK_SENT))
    wait_for(
        lambda: len(first.lines(TICK_SENT)) >= sent + 4,
        30,
        interval=0.05,
        what="ticks of the first beat alone",
    )
    result, caught_up = stack.wind_down(stream, reader)
    result.update(
        **{
            "ticks sent by the second beat": len(seconds),
            "ticks the first sent meanwhile": len(overlapping),
            "ticks while two beats ran": ticks_with_two,
        },
        reads=sum(reader.statuses.values()),
        **{"read errors": reader.server_errors, "catch-up s": round(caught_up, 2)},
    )
    show("two beat schedulers at once", result)
    assert len(overlapping) >= OVERLAP_TICKS - 2, "the two beats did not run at the same time"
    assert_exact(result)
    assert reader.server_errors == 0, reader.statuses


def test_tick_connection_terminated_mid_batch(stack):
    """pg_terminate_backend of the worker's session while a batch's transaction is open."""
    host = stack.web()
    worker = stack.worker("w1")
    stack.beat("beat")
    _ticking(stack)
    stream = SaleStream(host, token_for_ingest(), clients=2, batch=40).start()
    reader = Reader(host).start()
    # when the worker's session is terminated while a batch's transaction is open, three times
    outcomes = []
    while outcomes.count("aborted") < KILLS and len(outcomes) < ATTEMPTS:
        pid, xid = mid_batch()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        # the premise: the batch the termination interrupted was rolled back, not committed
        outcomes.append(transaction_outcome(xid))
    # then the same worker goes on ticking with a new session and catches up
    ticks_before = TickLog.objects.count()
    stream.stop()
    caught_up = settle(watch=stack.running())
    ticks_after = TickLog.objects.count()
    reader.stop()
    assert worker.alive(), "the worker died with its connection\n" + worker.describe()
    stack.stop_celery()
    result = figures(stream.sent, accepted=stream.replies["accepted"])
    result.update(
        **{
            "sessions terminated mid-batch": outcomes.count("aborted"),
            "terminated after a commit": outcomes.count("committed"),
            "ticks after the last termination": ticks_after - ticks_before,
        },
        reads=sum(reader.statuses.values()),
        **{"read errors": reader.server_errors, "catch-up s": round(caught_up, 2)},
    )
    show("the tick's PostgreSQL session terminated mid-batch", result)
    assert outcomes.count("aborted") == KILLS, f"the terminations landed mid-batch too rarely: {outcomes}"
    assert ticks_after > ticks_before, "no tick finished after the terminations"
    assert_exact(result)
    assert reader.server_errors == 0, reader.statuses

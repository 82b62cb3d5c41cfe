"""Faults of Redis, the serving store: every key lost mid-stream, and Redis paused while reads go on.

Real gunicorn, Celery worker and beat; a Redis of the suite's own (see
conftest.py), so pausing it or emptying it disturbs no one else. Each test
first proves its fault met live traffic (sales and reads while the keys were
being rebuilt, reads answered while Redis was paused), then that all is exact.
"""

import os
import signal
import time

import pytest
from django.db.models import Sum

from rankings.conf import rankings_settings
from rankings.models import Engagement, TickLog

from .stack import (
    READ_PATHS,
    Reader,
    SaleStream,
    Stack,
    assert_exact,
    engagement_event,
    figures,
    rebuilt_while_flowing,
    redis_caught_up,
    settle,
    show,
    token_for_ingest,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.faults]

# Longer than a read's worst case against a stalled Redis (the throttle's two
# cache calls, the active version, the board: about 1.2 s), far shorter than
# the write path's timeout.
PAUSE_MS = 2000  # milliseconds
# The reads that answer from Redis (and so can be stale), not /v1/categories or /v1/status.
BOARD_READS = [p for p in READ_PATHS if p.startswith("/v1/products/") or p.endswith("top") or "/top?" in p]


def _start(stack: Stack, web_workers: int = 2) -> str:
    host = stack.web(workers=web_workers)
    stack.worker("w1")
    stack.beat("beat")
    wait_for(
        lambda: TickLog.objects.exists(), 30, interval=0.05, what="the first tick", watch=stack.running()
    )
    return host


def test_every_key_deleted_mid_stream_is_rebuilt_exactly(tmp_path, fault_redis, transactional_db):
    """The boards, blobs, states and generation marker all vanish; the next tick rebuilds from buckets."""
    stack = Stack(tmp_path, fault_redis.url, THROTTLE_INGEST="", THROTTLE_READS="")
    try:
        host = _start(stack)
        token = token_for_ingest()
        stream = SaleStream(host, token, clients=2, batch=40).start()
        views = SaleStream(
            host, token, clients=1, batch=200, path="/v1/engagements", make_event=engagement_event, seed=1
        ).start()
        reader = Reader(host).start()
        # given sales and views flowing and Redis holding every shard
        wait_for(lambda: stream.accepted_between(0, time.monotonic()) >= 20, 30, what="sales to flow")
        wait_for(redis_caught_up, 30, interval=0.02, what="Redis to hold every shard")
        # when every key of the prefix is deleted
        prefix = f"{fault_redis_prefix()}:*"
        keys = list(fault_redis.client.scan_iter(prefix, count=1000))
        rebuilt_before = _rebuilt_shards()
        lost_at = time.monotonic()
        fault_redis.client.delete(*keys)
        # and sales and views arrive while the boards are lost: the worker is held still until both
        # have (a rebuild can otherwise end, in a fifth of a second, before a batch of either)
        worker = next(p for p in stack.procs if p.name == "w1")
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            wait_for(
                lambda: min(s.accepted_between(lost_at, time.monotonic()) for s in (stream, views)) > 0,
                30,
                what="sales and views while the boards are lost",
            )
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        # then the ticks rebuild every shard (time to converge), while the stream goes on
        converged = rebuilt_while_flowing(stack, stream, interval=0.02)
        views_during = views.accepted_between(lost_at, converged)
        views.stop()
        result, caught_up = stack.wind_down(stream, reader)
        rebuilt = _rebuilt_shards() - rebuilt_before  # every tick has logged itself by now
        reads_during = sum(lost_at <= m[0] <= converged for m in reader.marks)
        result.update(
            **{
                "keys deleted": len(keys),
                "converge s": round(converged - lost_at, 3),
                "rebuilt shards": rebuilt,
                "batches accepted during the rebuild": stream.accepted_between(lost_at, converged),
                "reads": sum(reader.statuses.values()),
                "reads between loss and rebuild": reads_during,
                "of which empty, without asOf": sum(lost_at <= t <= converged for t in reader.no_as_of),
                "read errors": reader.server_errors,
                "catch-up s": round(caught_up, 2),
            }
        )
        show("every Redis key of the prefix deleted mid-stream", result)
        # the premise: keys were there to lose, the ticks rebuilt shards, and sales and reads went on meanwhile
        assert keys, "there was nothing in Redis to lose"
        assert rebuilt > 0, "no tick rebuilt a shard: the loss was not noticed"
        assert result["batches accepted during the rebuild"] > 0, "no sale arrived during the rebuild"
        assert views_during > 0, "no view arrived during the rebuild"
        assert Engagement.objects.count() == views.replies["accepted"] == len(views.sent)
        assert reads_during > 0, "no read happened during the rebuild"
        assert_exact(result)
        assert reader.server_errors == 0, reader.statuses
        assert not reader.stale_unknown, reader.stale_unknown[:3]
    finally:
        stack.close()


def test_redis_paused_reads_answer_stale_with_their_true_as_of(tmp_path, fault_redis, transactional_db):
    """CLIENT PAUSE: reads time out on Redis and serve their last known answers; the throttle stays out of the way."""
    stack = Stack(tmp_path, fault_redis.url, THROTTLE_INGEST="", THROTTLE_READS="1000/s")
    try:
        # A read takes up to about a second while Redis stalls (the throttle's
        # cache calls, the active version, then the board), so six web workers
        # and twelve readers of board reads only: every worker answers some.
        host = _start(stack, web_workers=6)
        stream = SaleStream(host, token_for_ingest(), clients=1, batch=40, pause=0.1).start()
        reader = Reader(host, threads=12, paths=BOARD_READS).start()
        # enough fresh answers that every gunicorn worker has very likely answered every path
        wait_for(
            lambda: reader.answered_since(0, fresh=True) >= 50 * len(BOARD_READS), 30, what="fresh answers"
        )
        # when Redis is paused
        paused_at = time.monotonic()
        fault_redis.client.execute_command("CLIENT", "PAUSE", PAUSE_MS, "ALL")
        resumed_at = paused_at + PAUSE_MS / 1000
        # then, once it is over, reads answer fresh again
        wait_for(
            lambda: time.monotonic() > resumed_at and reader.answered_since(resumed_at, fresh=True) >= 20,
            30,
            interval=0.05,
            what="fresh answers after the pause",
            watch=stack.running(),
        )
        stream.stop()
        caught_up = settle(watch=stack.running())
        reader.stop()
        stack.stop_celery()
        during = [m for m in reader.marks if paused_at <= m[0] <= resumed_at]
        result = figures(stream.sent, accepted=stream.replies["accepted"])
        result.update(
            **{
                "reads": sum(reader.statuses.values()),
                "reads answered during the pause": len(during),
                "stale answers": reader.stale,
                "stale answers with a false asOf": len(reader.stale_unknown),
                "503 (nothing known)": reader.statuses[503],
                "read errors": reader.server_errors,
                "slowest read s": round(reader.slowest, 2),
                "catch-up s": round(caught_up, 2),
            }
        )
        show(f"Redis paused {PAUSE_MS} ms while reads go on", result)
        # the premise: reads were answered while Redis was paused, and some of them noticed
        assert during, "no read was answered during the pause"
        assert reader.stale > 0, "no read noticed the pause"
        assert reader.server_errors == 0, reader.statuses
        assert not reader.stale_unknown, reader.stale_unknown[:3]
        assert_exact(result)
    finally:
        stack.close()


def _rebuilt_shards() -> int:
    """Shards the ticks logged so far rebuilt from the buckets."""
    return TickLog.objects.aggregate(n=Sum("rebuilt_shards"))["n"] or 0


def fault_redis_prefix() -> str:

    return rankings_settings.KEY_PREFIX

"""Faults of Redis, the serving store: every key lost mid-stream, and Redis paused while reads go on.

Real gunicorn, Celery worker and beat; a Redis of the suite's own (see
conftest.py), so pausing it or emptying it disturbs no one else.
"""

import time

import pytest

from rankings.models import TickLog

from .stack import (
    READ_PATHS,
    Reader,
    SaleStream,
    Stack,
    assert_exact,
    figures,
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
    wait_for(lambda: TickLog.objects.exists(), 30, interval=0.05, what="the first tick")
    return host


def test_every_key_deleted_mid_stream_is_rebuilt_exactly(tmp_path, fault_redis, transactional_db):
    """The boards, blobs, states and generation marker all vanish; the next tick rebuilds from buckets."""
    stack = Stack(tmp_path, fault_redis.url, THROTTLE_INGEST="", THROTTLE_READS="")
    try:
        host = _start(stack)
        stream = SaleStream(host, token_for_ingest(), clients=2, batch=40).start()
        reader = Reader(host).start()
        time.sleep(2)
        wait_for(redis_caught_up, 30, interval=0.02, what="Redis to hold every shard")
        # when every key of the prefix is deleted
        prefix = f"{fault_redis_prefix()}:*"
        keys = list(fault_redis.client.scan_iter(prefix, count=1000))
        lost_at = time.monotonic()
        fault_redis.client.delete(*keys)
        # then the ticks rebuild every shard (time to converge), while the stream goes on
        wait_for(redis_caught_up, 60, interval=0.02, what="the rebuild")
        converged = time.monotonic() - lost_at
        time.sleep(2)
        result, caught_up = stack.wind_down(stream, reader)
        result.update(
            **{
                "keys deleted": len(keys),
                "converge s": round(converged, 3),
                "rebuilt shards": sum(TickLog.objects.values_list("rebuilt_shards", flat=True)),
                "reads": sum(reader.statuses.values()),
                "reads between loss and rebuild": sum(
                    lost_at <= m[0] <= lost_at + converged for m in reader.marks
                ),
                "of which empty, without asOf": sum(
                    lost_at <= t <= lost_at + converged for t in reader.no_as_of
                ),
                "read errors": reader.server_errors,
                "catch-up s": round(caught_up, 2),
            }
        )
        show("every Redis key of the prefix deleted mid-stream", result)
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
        time.sleep(3)  # every gunicorn worker answers every path at least once
        # when Redis is paused
        paused_at = time.monotonic()
        fault_redis.client.execute_command("CLIENT", "PAUSE", PAUSE_MS, "ALL")
        time.sleep(PAUSE_MS / 1000 + 2)
        stream.stop()
        caught_up = settle()
        reader.stop()
        stack.stop_celery()
        during = [m for m in reader.marks if paused_at <= m[0] <= paused_at + PAUSE_MS / 1000]
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
        assert reader.server_errors == 0, reader.statuses
        assert reader.stale > 0, "no read noticed the pause"
        assert not reader.stale_unknown, reader.stale_unknown[:3]
        assert_exact(result)
    finally:
        stack.close()


def fault_redis_prefix() -> str:
    from django.conf import settings

    return settings.RANKINGS["KEY_PREFIX"]

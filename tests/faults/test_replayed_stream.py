"""20,000 events delivered three times (the stream, then two replays) by 4 concurrent clients.

Clients post to gunicorn while a Celery worker and beat tick; copies of one
batch are often in flight at the same moment from different clients. Every
event is stored once, every copy after the first is counted a duplicate, and
the boards equal the recompute. The ingest throttle stays at its default rate.
"""

import http.client
import json
import random
import threading
import time

import pytest

from rankings.models import TickLog

from .stack import (
    Reader,
    Stack,
    assert_exact,
    figures,
    post_json,
    sale_event,
    settle,
    show,
    token_for_ingest,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.faults]

EVENTS = 20_000
DELIVERIES = 3  # the stream and two replays
CLIENTS = 4
BATCH = 500


def test_twenty_thousand_events_replayed_twice_by_four_clients(tmp_path, fault_redis, transactional_db):
    # given the events, cut into batches, each batch to be posted three times in a shuffled order
    rng = random.Random(6)
    now = time.time()
    events = [sale_event(rng, f"r-{i}", now, spread=20 * 86400) for i in range(EVENTS)]
    batches = [events[i : i + BATCH] for i in range(0, EVENTS, BATCH)]
    posts = [batch for batch in batches for _ in range(DELIVERIES)]
    rng.shuffle(posts)
    stack = Stack(tmp_path, fault_redis.url, THROTTLE_READS="")
    try:
        host = stack.web()
        stack.worker("w1")
        stack.beat("beat")
        wait_for(lambda: TickLog.objects.exists(), 30, interval=0.05, what="the first tick")
        token = token_for_ingest()
        reader = Reader(host).start()
        # when four clients post them concurrently
        totals = {"accepted": 0, "duplicates": 0, "rejected": 0, "not 200": 0}
        lock = threading.Lock()
        work = iter(posts)

        def client():
            conn = http.client.HTTPConnection(host, timeout=60)
            while True:
                with lock:
                    batch = next(work, None)
                if batch is None:
                    break
                status, body = post_json(conn, "/v1/sales", {"events": batch}, token)
                with lock:
                    if status != 200:
                        totals["not 200"] += 1
                        continue
                    reply = json.loads(body)
                    totals["accepted"] += reply["accepted"]
                    totals["duplicates"] += reply["duplicates"]
                    totals["rejected"] += len(reply["rejected"])
            conn.close()

        started = time.monotonic()
        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        posting = time.monotonic() - started
        # then every event is stored once, the rest are duplicates, and every board is exact
        caught_up = settle()
        reader.stop()
        stack.stop_celery()
        result = figures({e["id"]: e for e in events}, accepted=totals["accepted"])
        result.update(
            **{
                "deliveries": EVENTS * DELIVERIES,
                "replays": DELIVERIES - 1,
                "clients": CLIENTS,
                "duplicates": totals["duplicates"],
                "rejected": totals["rejected"],
                "posts not 200": totals["not 200"],
                "posting s": round(posting, 1),
                "reads": sum(reader.statuses.values()),
                "read errors": reader.server_errors,
                "catch-up s": round(caught_up, 2),
            }
        )
        show("20,000 events replayed twice from 4 clients", result)
        assert totals["not 200"] == 0 and totals["rejected"] == 0, totals
        assert totals["duplicates"] == EVENTS * (DELIVERIES - 1)
        assert_exact(result)
        assert reader.server_errors == 0, reader.statuses
    finally:
        stack.close()

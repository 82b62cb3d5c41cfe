"""20,000 events delivered three times (the stream, then two replays) by 4 concurrent clients.

Clients post to gunicorn while a Celery worker and beat tick; copies of one
batch are often in flight at the same moment from different clients. Every
event is stored once, every copy after the first is counted a duplicate, and
the boards equal the recompute. The test proves its premise too: some batch had
two copies in flight at once, and ticks ran while the copies were posted. The ingest throttle stays at its default rate.
"""

import http.client
import json
import random
import threading
import time

import pytest
from django.utils import timezone

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
        in_flight: dict[int, list[tuple[int, float, float]]] = {}  # batch -> (client, sent, answered)

        def client(n: int):
            conn = http.client.HTTPConnection(host, timeout=60)
            while True:
                with lock:
                    batch = next(work, None)
                if batch is None:
                    break
                sent = time.monotonic()
                status, body = post_json(conn, "/v1/sales", {"events": batch}, token)
                with lock:
                    in_flight.setdefault(id(batch), []).append((n, sent, time.monotonic()))
                    if status != 200:
                        totals["not 200"] += 1
                        continue
                    reply = json.loads(body)
                    totals["accepted"] += reply["accepted"]
                    totals["duplicates"] += reply["duplicates"]
                    totals["rejected"] += len(reply["rejected"])
            conn.close()

        started, posting_from = time.monotonic(), timezone.now()
        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        posting, posting_to = time.monotonic() - started, timezone.now()
        # then every event is stored once, the rest are duplicates, and every board is exact
        caught_up = settle()
        # (a tick that started while the clients posted, whenever it finished)
        ticks_while_posting = TickLog.objects.filter(started_at__range=(posting_from, posting_to)).count()
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
                "batches with copies in flight at once": _overlapping(in_flight),
                "ticks while posting": ticks_while_posting,
                "reads": sum(reader.statuses.values()),
                "read errors": reader.server_errors,
                "catch-up s": round(caught_up, 2),
            }
        )
        show("20,000 events replayed twice from 4 clients", result)
        # the premise: copies of a batch raced each other, and ticks ran while they did
        assert result["batches with copies in flight at once"] > 0, (
            "no two copies of a batch were in flight at once"
        )
        assert ticks_while_posting > 0, "no tick ran while the copies were posted"
        assert totals["not 200"] == 0 and totals["rejected"] == 0, totals
        assert totals["duplicates"] == EVENTS * (DELIVERIES - 1)
        assert_exact(result)
        assert reader.server_errors == 0, reader.statuses
    finally:
        stack.close()


def _overlapping(in_flight: dict[int, list[tuple[int, float, float]]]) -> int:
    """Batches of which two copies from different clients were being posted at the same moment."""
    raced = 0
    for copies in in_flight.values():
        raced += any(
            a[0] != b[0] and a[1] < b[2] and b[1] < a[2]
            for i, a in enumerate(copies)
            for b in copies[i + 1 :]
        )
    return raced

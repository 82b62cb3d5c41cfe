"""The real write path: a Celery worker and beat against Redis make a posted sale visible."""

import time

import pytest
from django.utils import timezone

from .processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def test_a_posted_sale_appears_in_top_within_seconds(worker_and_beat, ingest_api, api):
    # given a running worker and beat
    # when a sale is posted
    reply = ingest_api.post(
        "/v1/sales",
        {
            "events": [
                {
                    "id": "live-1",
                    "ts": timezone.now().isoformat(),
                    "productId": "p-live",
                    "categories": ["toys"],
                    "qty": 3,
                }
            ]
        },
        format="json",
    )
    assert reply.json()["accepted"] == 1
    posted = time.monotonic()

    # then /top shows it within a few ticks (the worker and beat were ready before the post)
    def top_items():
        reply = api.get("/v1/categories/toys/top?window=1h")
        return reply.json()["items"] if reply.status_code == 200 else []  # 503 until the first tick

    items = wait_until(top_items, timeout=5, what="the sale in /top", watch=worker_and_beat)
    assert [(i["productId"], i["units"]) for i in items] == [("p-live", 3)]
    print(f"visible after {time.monotonic() - posted:.2f} s")

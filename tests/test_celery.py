"""The real write path: a Celery worker and beat against Redis make a posted sale visible."""

import subprocess
import sys
import time

import pytest
from django.utils import timezone

from .processes import ROOT, django_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


@pytest.fixture
def worker_and_beat(tmp_path):
    env = django_env(RANKINGS_TICK_SECONDS=0.5)
    celery = [sys.executable, "-m", "celery", "-A", "salesrank_site"]
    procs = [
        subprocess.Popen(
            [*celery, "worker", "--pool", "solo", "--loglevel", "WARNING"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [*celery, "beat", "--loglevel", "WARNING", "--schedule", str(tmp_path / "beat-schedule")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
        ),
    ]
    yield
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


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
    # then /top shows it within a few seconds
    items = []
    while time.monotonic() - posted < 20 and not items:
        items = api.get("/v1/categories/toys/top?window=1h").json()["items"]
        time.sleep(0.1)
    assert [(i["productId"], i["units"]) for i in items] == [("p-live", 3)]
    print(f"visible after {time.monotonic() - posted:.2f} s")

"""GET /metrics: the Prometheus text for a token with rankings.view_status or a caller from
METRICS_ALLOW; totals equal to what the ingest replies said, gauges of the engine's state now;
GET /healthz and GET /readyz for anyone."""

import datetime as dt
import math
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from catalogue.models import Category
from rankings.conf import rankings_settings
from rankings.engine import counts, store
from rankings.engine.tick import TICK_SECONDS_BOUNDS
from rankings.ingest import batch
from rankings.ingest.engagement import engagements_ingest
from rankings.ingest.sales import sales_ingest
from rankings.models import MetricCount, Sale, ShardState
from rankings.operations import metrics
from rankings.operations.tokens import token_create
from rankings.serving import memory

from . import processes
from .processes import wait_until
from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)

OUTSIDE = "203.0.113.9"  # an address of no network METRICS_ALLOW names by default


def _client(*permissions: str) -> APIClient:
    user = get_user_model().objects.create_user(f"reader-{'-'.join(permissions) or 'none'}")
    for codename in permissions:
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="rankings")
        )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=user)}")
    return client


def _scrape(client: APIClient | None = None, **extra) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value of a fresh scrape (not the second-old one a process keeps)."""
    memory.forget_all("status")
    reply = (client or APIClient()).get("/metrics", **extra)
    assert reply.status_code == 200, reply.content
    assert reply["Content-Type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.content.decode())
        for sample in family.samples
    }


def _ticked_now() -> Shop:
    shop = Shop(now=timezone.now().replace(microsecond=0))
    shop.send(shop.sale("p1", qty=2))
    shop.tick()
    return shop


# --- who may read ---------------------------------------------------------------------


def test_an_anonymous_caller_outside_the_allowed_addresses_is_refused_with_403():
    reply = APIClient().get("/metrics", REMOTE_ADDR=OUTSIDE)

    assert reply.status_code == 403
    assert "METRICS_ALLOW" in reply.json()["error"]
    assert b"salesrank_" not in reply.content


def test_a_token_without_view_status_is_refused_with_403():
    reply = _client("add_sale").get("/metrics", REMOTE_ADDR=OUTSIDE)

    assert reply.status_code == 403


def test_a_token_with_view_status_reads_the_metrics_from_any_address():
    figures = _scrape(_client("view_status"), REMOTE_ADDR=OUTSIDE)

    assert figures[("salesrank_postgres_up", ())] == 1


def test_a_caller_from_an_allowed_network_reads_without_a_token(settings):
    # given a network of the operator's own, and the loopback no longer allowed
    settings.RANKINGS = {**settings.RANKINGS, "METRICS_ALLOW": ["10.20.0.0/16"]}
    # then a caller of that network reads, and one of the loopback does not
    assert _scrape(REMOTE_ADDR="10.20.3.4")[("salesrank_redis_up", ())] == 1
    assert APIClient().get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403


def test_the_loopback_reads_by_default():
    assert _scrape(REMOTE_ADDR="::1")[("salesrank_postgres_up", ())] == 1
    assert _scrape(REMOTE_ADDR="127.0.0.1")[("salesrank_postgres_up", ())] == 1


def test_the_endpoints_answer_whatever_host_the_caller_names(settings):
    """Probes and scrapers call a process by its address: ALLOWED_HOSTS does not stop them."""
    settings.ALLOWED_HOSTS = ["ranks.example.com"]
    client = APIClient()

    assert client.get("/healthz", HTTP_HOST="10.0.3.7:8000").status_code == 200
    assert client.get("/metrics", HTTP_HOST="10.0.3.7:8000").status_code == 200
    assert client.get("/v1/categories", HTTP_HOST="10.0.3.7:8000").status_code == 400


# --- the ingest totals ---------------------------------------------------------------------


def _sales_batch(shop: Shop) -> list:
    first = shop.sale("p1", event_id="o-1")
    return [
        first,
        shop.sale("p2", event_id="o-2"),
        first,  # a resend: a duplicate
        shop.sale("p3", event_id="o-1", qty=7),  # the same id with other content: rejected
        shop.sale("p4", qty=0),  # invalid: rejected
    ]


def test_the_sales_totals_equal_what_the_replies_said():
    # given two batches through the API and one through the import's path
    shop = Shop(now=timezone.now().replace(microsecond=0))
    ingest = _client("add_sale")
    replies = [ingest.post("/v1/sales", {"events": _sales_batch(shop)}, format="json").json()]
    replies.append(
        ingest.post("/v1/sales", {"events": [shop.sale("p5"), shop.sale("p1", qty=-1)]}, format="json").json()
    )
    resent = shop.sale("p6")
    imported = sales_ingest(events=[resent, resent], source="import")
    # when the metrics are scraped
    figures = _scrape()
    # then each outcome's total is the sum of what the replies said
    said = {
        "accepted": sum(r["accepted"] for r in replies) + imported.accepted,
        "duplicate": sum(r["duplicates"] for r in replies) + imported.duplicates,
        "rejected": sum(len(r["rejected"]) for r in replies) + len(imported.rejected),
    }
    assert said == {"accepted": 4, "duplicate": 2, "rejected": 3}
    for outcome, events in said.items():
        assert figures[("salesrank_sales_ingested_total", (("outcome", outcome),))] == events


def test_the_engagement_totals_are_counted_by_kind():
    # given views, wishes, a resent view, a view too old to keep, an event of no known kind and a
    # wish under a view's id
    shop = _ticked_now()
    events = [
        shop.engagement("p1", "view", event_id="v-1"),
        shop.engagement("p1", "view", event_id="v-1"),
        shop.engagement("p2", "wish"),
        shop.engagement("p2", "view", ago=dt.timedelta(days=60)),
        {**shop.engagement("p3"), "kind": "like"},
        shop.engagement("p4", "wish", event_id="v-1"),  # another event's id: rejected when stored
    ]
    reply = _client("add_engagement").post("/v1/engagements", {"events": events}, format="json").json()
    assert (reply["accepted"], reply["duplicates"], len(reply["rejected"])) == (3, 1, 2)
    # when the metrics are scraped, then each event is counted under its kind
    figures = _scrape()
    counted = {
        (dict(labels)["kind"], dict(labels)["outcome"]): value
        for (name, labels), value in figures.items()
        if name == "salesrank_engagements_ingested_total" and value
    }
    assert counted == {
        ("view", "accepted"): 2,
        ("view", "duplicate"): 1,
        ("wish", "accepted"): 1,
        ("unknown", "rejected"): 1,
        ("wish", "rejected"): 1,
    }


def test_a_batch_that_dies_after_it_was_counted_leaves_neither_its_sales_nor_its_counts():
    """The totals are written in the transaction that stores the events: a process that dies before
    the commit loses both, so the totals never count what no reply said."""
    shop = Shop(now=timezone.now().replace(microsecond=0))
    counted = counts.counts_add

    def count_then_die(name, amounts):
        counted(name, amounts)
        raise ConnectionError("the process died before the commit")

    # given a batch whose process dies right after counting it
    with mock.patch.object(batch, "counts_add", count_then_die), pytest.raises(ConnectionError):
        sales_ingest(events=[shop.sale("p1"), shop.sale("p2")])
    # when the client sends it again, and it is stored
    assert sales_ingest(events=[shop.sale("p1", event_id="s1"), shop.sale("p2", event_id="s2")]).accepted == 2
    # then the sales and the totals are those of the one batch that was answered
    assert Sale.objects.count() == 2
    figures = _scrape()
    assert figures[("salesrank_sales_ingested_total", (("outcome", "accepted"),))] == 2
    assert figures[("salesrank_sales_ingested_total", (("outcome", "duplicate"),))] == 0


def test_the_totals_stay_a_fixed_number_of_rows_however_many_batches():
    shop = Shop(now=timezone.now().replace(microsecond=0))
    for n in range(30):
        sales_ingest(events=[shop.sale(f"p{n}"), {"id": "bad"}])
        engagements_ingest(events=[shop.engagement("p1"), shop.engagement("p1", "wish")])
        connection.close()  # another session: another server process, perhaps another stripe

    # sale, view, wish and unknown kinds, 3 outcomes, each in at most STRIPES rows
    assert MetricCount.objects.filter(name=batch.INGESTED).count() <= 4 * 3 * counts.STRIPES
    assert _scrape()[("salesrank_sales_ingested_total", (("outcome", "rejected"),))] == 30


# --- the engine's state ---------------------------------------------------------------


def test_every_tick_is_counted_in_the_duration_histogram():
    shop = _ticked_now()
    shop.advance(seconds=1)
    shop.tick()

    figures = _scrape()

    assert figures[("salesrank_tick_duration_seconds_count", ())] == 2
    assert figures[("salesrank_tick_duration_seconds_bucket", (("le", "+Inf"),))] == 2
    assert 0 < figures[("salesrank_tick_duration_seconds_sum", ())] < 60
    cumulative = [
        figures[("salesrank_tick_duration_seconds_bucket", (("le", repr(b)),))] for b in TICK_SECONDS_BOUNDS
    ]
    assert cumulative == sorted(cumulative)


def test_pending_events_are_those_no_tick_has_counted_yet():
    # given sales and views stored and not ticked
    shop = _ticked_now()
    shop.send(shop.sale("p1"), shop.sale("p2", categories=("books", "toys")))
    shop.engage(shop.engagement("p1"), shop.engagement("p1"), shop.engagement("p2", "wish"))
    # then they are pending, each counted once
    figures = _scrape()
    assert {
        kind: figures[("salesrank_pending_events", (("kind", kind),))] for kind in ("sale", "view", "wish")
    } == {
        "sale": 2,
        "view": 2,
        "wish": 1,
    }
    # and a tick counts them
    shop.tick()
    assert _scrape()[("salesrank_pending_events", (("kind", "sale"),))] == 0


def test_pending_events_are_counted_up_to_a_bound(monkeypatch):
    shop = _ticked_now()
    shop.send(*(shop.sale(f"p{n}") for n in range(5)))
    monkeypatch.setattr(metrics, "PENDING_COUNTED", 3)

    assert _scrape()[("salesrank_pending_events", (("kind", "sale"),))] == 3


def test_a_failing_shard_is_flagged_and_the_others_are_not():
    _ticked_now()
    ShardState.objects.filter(shard=1).update(failures=3, last_error="boom")

    figures = _scrape()

    flagged = {
        dict(labels)["shard"]: value
        for (name, labels), value in figures.items()
        if name == "salesrank_shard_failing"
    }
    assert flagged == {"0": 0, "1": 1, "2": 0, "3": 0}


def test_the_boards_age_is_the_wall_clock_behind_the_oldest_shard(redis_client):
    # given every shard ticked as of a minute ago
    shop = Shop(now=timezone.now().replace(microsecond=0) - dt.timedelta(minutes=1))
    shop.send(shop.sale("p1"))
    shop.tick()
    # then the boards are a minute old
    assert 60 <= _scrape()[("salesrank_boards_age_seconds", ())] < 70
    # and when a shard's state is lost from Redis, its boards have no age until a tick rebuilds them
    redis_client.delete(store.state_key(store.served_version(), 2))
    assert _scrape()[("salesrank_boards_age_seconds", ())] == math.inf


def test_the_snapshot_age_is_the_time_since_the_hour_every_shard_last_recorded():
    # given ticks that crossed an hour boundary half an hour ago
    now = timezone.now().replace(microsecond=0)
    hour = now.replace(minute=0, second=0) - dt.timedelta(hours=1 if now.minute < 30 else 0)
    shop = Shop(now=hour - dt.timedelta(minutes=1))
    shop.send(shop.sale("p1"))
    shop.tick()
    shop.now = hour + dt.timedelta(seconds=5)
    shop.tick()
    # then the snapshot's age is the time since that hour
    age = _scrape()[("salesrank_snapshot_age_seconds", ())]
    assert (now - hour).total_seconds() <= age < (now - hour).total_seconds() + 60


def test_redis_memory_is_shown_per_server_with_its_limit():
    figures = _scrape()

    used = {
        dict(labels)["node"]: v
        for (name, labels), v in figures.items()
        if name == "salesrank_redis_used_memory_bytes"
    }
    limits = {
        dict(labels)["node"]: v
        for (name, labels), v in figures.items()
        if name == "salesrank_redis_max_memory_bytes"
    }
    expected = store.memory_used()
    assert set(used) == set(limits) == {node.node for node in expected}
    assert all(value > 0 for value in used.values())


def test_a_scrape_reads_the_same_few_statements_however_large_the_shop(django_assert_max_num_queries):
    """The totals are a few rows, the queues counted to a bound, the shards one row each: nothing
    grows with the categories, the products or the sales."""
    _ticked_now()
    Category.objects.bulk_create([Category(slug=f"c{n}", name=f"c{n}") for n in range(2000)])
    memory.forget_all("status")
    with CaptureQueriesContext(connection) as queries:
        assert APIClient().get("/metrics").status_code == 200
    assert len(queries) <= 8, [q["sql"] for q in queries.captured_queries]


def test_a_scrape_is_made_once_a_second_per_process():
    client = APIClient()
    client.get("/metrics")
    with CaptureQueriesContext(connection) as queries:
        for _ in range(5):
            assert client.get("/metrics").status_code == 200
    assert len(queries) == 0


# --- probes -------------------------------------------------------------------------------


def test_liveness_answers_anyone_without_a_query_or_a_figure():
    with CaptureQueriesContext(connection) as queries:
        reply = APIClient().get("/healthz", REMOTE_ADDR=OUTSIDE)

    assert reply.status_code == 200
    assert reply.json() == {"status": "ok"}
    assert len(queries) == 0


def test_readiness_is_200_once_the_boards_are_fresh_and_503_before():
    # before any tick: no boards
    memory.forget_all("status")
    reply = APIClient().get("/readyz", REMOTE_ADDR=OUTSIDE)
    assert reply.status_code == 503
    assert reply.json()["checks"]["postgres"] == reply.json()["checks"]["redis"] == "ok"
    assert reply.json()["checks"]["boards"] != "ok"
    # after a tick now
    _ticked_now()
    memory.forget_all("status")
    reply = APIClient().get("/readyz", REMOTE_ADDR=OUTSIDE)
    assert reply.status_code == 200
    assert reply.json() == {"checks": {"postgres": "ok", "redis": "ok", "boards": "ok"}}


def test_readiness_fails_when_the_boards_are_older_than_the_setting(settings):
    # given boards ticked two minutes ago, and a readiness bound of one
    shop = Shop(now=timezone.now().replace(microsecond=0) - dt.timedelta(minutes=2))
    shop.send(shop.sale("p1"))
    shop.tick()
    settings.RANKINGS = {**settings.RANKINGS, "READY_MAX_AGE_SECONDS": 60}
    memory.forget_all("status")
    # then the process is not ready, and says why in words, not figures
    reply = APIClient().get("/readyz")
    assert reply.status_code == 503
    boards = reply.json()["checks"]["boards"]
    assert boards.startswith("stale")
    assert not any(character.isdigit() for character in boards)


@pytest.mark.processes
def test_readiness_fails_while_redis_is_stopped_and_recovers_once_it_is_back_and_ticked(own_redis, tmp_path):
    # given boards ticked just now on a Redis of the test's own
    shop = _ticked_now()
    assert APIClient().get("/readyz").status_code == 200
    # when that Redis stops, then the process is not ready, and says it is Redis
    own_redis.kill()
    wait_until(lambda: APIClient().get("/readyz").status_code == 503, timeout=10, what="readiness to fail")
    checks = APIClient().get("/readyz").json()["checks"]
    assert (checks["postgres"], checks["redis"]) == ("ok", "unreachable")
    # when it comes back empty on the same address, it is still not ready: the boards are gone
    again = processes.redis_server(
        tmp_path, name="redis-again", port=int(own_redis.address.rsplit(":", 1)[1])
    )
    try:
        wait_until(
            lambda: APIClient().get("/readyz").json()["checks"]["redis"] == "ok",
            timeout=10,
            what="Redis to answer",
        )
        assert APIClient().get("/readyz").status_code == 503
        # and once a tick has rebuilt them, it is ready again
        shop.advance(seconds=1)
        shop.tick()
        wait_until(
            lambda: APIClient().get("/readyz").status_code == 200, timeout=10, what="readiness to recover"
        )
    finally:
        again.kill()


def test_an_allowed_address_that_is_no_network_stops_the_start(settings):
    settings.RANKINGS = {**settings.RANKINGS, "METRICS_ALLOW": ["10.0.0.0/33"]}

    with pytest.raises(ImproperlyConfigured, match="METRICS_ALLOW: '10.0.0.0/33'"):
        rankings_settings.validate()


def test_readiness_is_checked_once_a_second_per_process():
    _ticked_now()
    client = APIClient()
    client.get("/readyz")
    with CaptureQueriesContext(connection) as queries:
        for _ in range(5):
            assert client.get("/readyz").status_code == 200
    assert len(queries) == 0


def test_behind_a_proxy_the_clients_own_address_decides(settings):
    """A proxy on the same machine forwards every client from the loopback: with NUM_PROXIES set,
    the address it appends to X-Forwarded-For is the one METRICS_ALLOW is checked against."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    client = APIClient()

    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=OUTSIDE).status_code == 403
    assert (
        client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 200
    )

"""GET /v1/status: a liveness answer for anyone, the figures only for holders of rankings.view_status."""

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from rankings.models import IngestLog
from rankings.operations import status
from rankings.operations.tokens import token_create

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)

LIVENESS = {"status", "asOf"}


def _token_client(*permissions, username="reader") -> APIClient:
    user = get_user_model().objects.create_user(username)
    for codename in permissions:
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="rankings")
        )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=user)}")
    return client


def _ticked_now() -> Shop:
    shop = Shop(now=timezone.now().replace(microsecond=0))
    shop.send(shop.sale("p1", qty=2))
    shop.tick()
    return shop


def test_anonymous_callers_get_only_a_liveness_answer(api):
    """No sales rate, no totals, no backlog: only whether the boards are live, and as of when."""
    # given boards ticked just now
    shop = _ticked_now()
    # when anyone asks
    reply = api.get("/v1/status")
    # then
    assert reply.status_code == 200
    body = reply.json()
    assert set(body) == LIVENESS
    assert body["status"] == "ok"
    assert body["asOf"] == shop.now.isoformat().replace("+00:00", "Z")


def test_a_token_without_view_status_gets_the_liveness_answer_only(ingest_api):
    _ticked_now()

    body = ingest_api.get("/v1/status").json()

    assert set(body) == LIVENESS


def test_a_token_or_staff_session_with_view_status_gets_the_figures(admin_client):
    # given a token holding rankings.view_status, and a staff session of a superuser
    _ticked_now()
    operator = _token_client("view_status")
    # when each asks
    by_token = operator.get("/v1/status").json()
    by_session = admin_client.get("/v1/status").json()
    # then both see the figures beside the liveness answer
    for body in (by_token, by_session):
        assert set(body) >= LIVENESS
        assert {"pendingSales", "lagSeconds", "salesPerSecond", "accepted", "windows"} <= set(body)
        assert body["accepted"] == 1


def test_liveness_says_stale_when_the_boards_stopped_moving(api):
    """Ticks stopped ten minutes ago: Redis answers, but what it holds is old."""
    Shop(now=timezone.now().replace(microsecond=0) - dt.timedelta(minutes=10)).tick()

    assert api.get("/v1/status").json()["status"] == "stale"


def test_liveness_says_down_when_redis_is_unreachable(api, own_redis):
    _ticked_now()
    own_redis.kill()
    own_redis.wait()

    reply = api.get("/v1/status")

    assert reply.status_code == 200
    assert reply.json() == {"status": "down", "asOf": None}


def test_the_figures_are_cached_for_a_second(admin_client):
    """A burst of status calls costs the figures' queries once, not once per call."""
    _ticked_now()
    admin_client.get("/v1/status")  # the figures, computed once

    with CaptureQueriesContext(connection) as queries:
        for _ in range(5):
            assert admin_client.get("/v1/status").status_code == 200

    assert not [q for q in queries if "rankings_ingestlog" in q["sql"]]


def test_the_totals_do_not_add_up_the_whole_ingest_log():
    """Totals cover a bounded span of the log (its recent rows), never every row ever written."""
    # given one batch logged now and a thousand logged long ago
    _ticked_now()
    old = timezone.now() - dt.timedelta(days=30)
    IngestLog.objects.bulk_create(
        [IngestLog(source="api", accepted=5, duplicates=1, rejected=1) for _ in range(1000)]
    )
    IngestLog.objects.exclude(accepted=1).update(at=old)
    # when
    figures = status.status_read()
    # then only the recent batch is counted
    assert (figures["accepted"], figures["duplicates"], figures["rejected"]) == (1, 0, 0)
    assert figures["totalsSeconds"] == status.TOTALS_SPAN.total_seconds()


def test_the_lag_counts_a_shard_whose_ticks_stopped_though_all_has_counted_its_sales():
    """A queue no worker consumes shows in the lag, though the `all` board (on another shard) is current."""
    from rankings.engine.shards import ALL, active
    from rankings.engine.tick import tick

    # given a sale in a category whose shard is not `all`'s, received a minute ago
    layout = active().layout
    category = next(f"c{i}" for i in range(100) if layout.shard_of(f"c{i}") != layout.shard_of(ALL))
    shop = Shop(now=timezone.now().replace(microsecond=0))
    shop.send(shop.sale("p1", categories=[category]))
    # when only `all`'s shard is ticked, a minute later
    shop.advance(minutes=1)
    tick(now=shop.now, shards=[layout.shard_of(ALL)])
    figures = status.status_read()
    # then no sale waits for `all`, but the lag is that of the sale the other shard has yet to count
    assert figures["pendingSales"] == 0
    assert figures["lagSeconds"] > 0
    # and once that shard ticks too, there is no lag
    tick(now=shop.now)
    assert status.status_read()["lagSeconds"] == 0.0


class RedisCommands:
    """Counts the commands sent to the ranking store by name, pipelined ones included."""

    def __init__(self, monkeypatch):
        import redis

        self.sent: dict[str, int] = {}
        counter = self
        original_command = redis.Redis.execute_command
        original_pipeline = redis.client.Pipeline.execute

        def execute_command(self, *args, **options):
            counter.add(args[0])
            return original_command(self, *args, **options)

        def execute(self, *args, **options):
            for command, _ in self.command_stack:
                counter.add(command[0])
            return original_pipeline(self, *args, **options)

        monkeypatch.setattr(redis.Redis, "execute_command", execute_command)
        monkeypatch.setattr(redis.client.Pipeline, "execute", execute)

    def add(self, name) -> None:
        name = name.decode() if isinstance(name, bytes) else str(name)
        self.sent[name.upper()] = self.sent.get(name.upper(), 0) + 1


def test_the_board_figures_survey_a_bounded_share_of_redis(monkeypatch, redis_client):
    """At a million categories the boards are tens of millions of keys: the figures read a bounded
    number of them and extrapolate, never a ZCARD per board."""
    from rankings.engine import store

    # given 4,000 boards of the active version, one member each
    _ticked_now()
    boards = 4000
    pipe = redis_client.pipeline(transaction=False)
    for i in range(boards):
        pipe.zadd(store.board_key(1, 0, "30d", "units", f"c{i}"), {"p1": -1})
    pipe.execute()
    # and a survey bounded at a quarter of the keyspace
    monkeypatch.setattr(store.survey, "SCAN_COUNT", 100)
    monkeypatch.setattr(store.survey, "SURVEY_KEYS", sum(1 for _ in redis_client.scan_iter(count=1000)) // 4)
    commands = RedisCommands(monkeypatch)
    # when the figures are read
    figures = status.status_read()["windows"]["30d"]
    # then a share of the boards was read, and the rest estimated from it
    assert commands.sent.get("ZCARD", 0) < boards / 2
    assert (
        commands.sent.get("SCAN", 0) * store.survey.SCAN_COUNT
        <= store.survey.SURVEY_KEYS + 2 * store.survey.SCAN_COUNT
    )
    assert figures["estimated"] is True
    assert 0.7 * boards < figures["boards"] < 1.3 * boards
    assert 0.7 * boards < figures["members"] < 1.3 * boards


def test_the_board_figures_are_exact_when_the_survey_sees_every_key(monkeypatch, redis_client):
    from rankings.engine import store

    _ticked_now()
    # The survey counts every key of the database, other prefixes' too: a Redis shared with other
    # runs (another test worker's thousands of boards, a benchmark's names) may hold more keys than
    # it surveys by default.
    monkeypatch.setattr(store.survey, "SURVEY_KEYS", redis_client.dbsize() + 1_000_000)
    keys = list(redis_client.scan_iter(f"{store.prefix()}:v1:*:b:7d:*"))

    figures = status.status_read()["windows"]["7d"]

    assert keys and figures == {
        "boards": len(keys),
        "members": sum(redis_client.zcard(key) for key in keys),
        "estimated": False,
    }


def test_figures_of_a_survey_stopped_at_its_bound_are_estimates_whatever_the_key_count(
    monkeypatch, redis_client
):
    from rankings.engine import store

    # given a keyspace of 50 boards and a survey bounded at 10 keys
    _ticked_now()
    boards = [store.board_key(1, 0, "30d", "units", f"c{i}") for i in range(50)]
    for key in boards:
        redis_client.zadd(key, {"p1": -1})
    client = type(store.fast())
    monkeypatch.setattr(client, "scan_iter", lambda self, *args, **kwargs: iter(k.encode() for k in boards))
    monkeypatch.setattr(store.survey, "SURVEY_KEYS", 10)
    # and a key count that fell below what the survey saw (other clients deleting keys meanwhile)
    monkeypatch.setattr(client, "dbsize", lambda self, **kwargs: 1)

    figures = status.status_read()["windows"]["30d"]

    assert figures["estimated"] is True


def test_a_backlog_is_counted_up_to_a_bound(monkeypatch):
    """A backlog of millions (a large import before the ticks catch up) is when the operator polls
    the figures most: each read counts at most PENDING_COUNTED queue rows, never the whole queue."""
    # given 300 sales and 300 views received and not yet counted
    shop = Shop(now=timezone.now().replace(microsecond=0))
    shop.send(*(shop.sale(f"p{i}") for i in range(300)))
    shop.engage(*(shop.engagement(f"p{i}") for i in range(300)))
    monkeypatch.setattr(status, "PENDING_COUNTED", 100, raising=False)
    # when the figures are read
    figures = status.status_read()
    # then each backlog shows as the bound: at least that many
    assert figures["pendingSales"] == 100
    assert figures["engagement"]["pending"] == 100


def test_the_lag_costs_one_statement_per_queue_whatever_the_number_of_shards(settings):
    """Up to 256 shards: the oldest pending sale and event of each are found in one statement per
    queue (each shard's first row through the queue's key), not one per shard, once a second."""
    # given sales and views waiting on every one of the shards
    shop = Shop(now=timezone.now().replace(microsecond=0))
    shop.send(*(shop.sale(f"p{i}", categories=[f"c{i}"]) for i in range(40)))
    shop.engage(*(shop.engagement(f"p{i}", categories=[f"c{i}"]) for i in range(40)))
    # when the figures are read
    with CaptureQueriesContext(connection) as queries:
        figures = status.status_read()
    # then
    assert figures["lagSeconds"] >= 0 and figures["engagement"]["lagSeconds"] >= 0
    for queue in ("rankings_pendingsale", "rankings_pendingengagement"):
        assert len([q for q in queries if queue in q["sql"]]) <= 2, queue  # the lag, the backlog

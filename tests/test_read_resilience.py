"""Reads stay up: cache headers, ETag/304, and the last known answer while Redis is down."""

import time

import pytest

from rankings import store

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)


def test_reads_carry_cache_control_and_an_etag_and_answer_304(api):
    Shop().tick()
    first = api.get("/v1/categories/all/top")

    assert "max-age=2" in first["Cache-Control"]
    again = api.get("/v1/categories/all/top", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304


def test_with_redis_stopped_reads_serve_the_last_known_answer_flagged_stale(api, own_redis):
    # given a board that was read once while Redis was up
    shop = Shop()
    shop.send(shop.sale("p1", qty=2))
    shop.tick()
    fresh = api.get("/v1/categories/toys/top").json()
    assert fresh["stale"] is False and fresh["items"][0]["productId"] == "p1"
    # when Redis stops
    own_redis.kill()
    own_redis.wait()
    time.sleep(1.1)  # past the in-process freshness
    reply = api.get("/v1/categories/toys/top")
    # then the last known answer is served with its true asOf and a stale marker
    assert reply.status_code == 200
    body = reply.json()
    assert body["stale"] is True
    assert body["asOf"] == fresh["asOf"] and body["items"] == fresh["items"]
    assert "Stale" in reply["Warning"]


def test_with_redis_stopped_and_nothing_known_the_answer_is_503(api, own_redis):
    Shop().tick()
    own_redis.kill()
    own_redis.wait()

    reply = api.get("/v1/categories/all/top?window=30d")
    assert reply.status_code == 503
    assert reply.json()["error"]


def test_status_answers_with_redis_stopped(api, admin_client, own_redis):
    Shop().tick()
    own_redis.kill()
    own_redis.wait()
    store.reset_clients()

    anyone = api.get("/v1/status")
    operator = admin_client.get("/v1/status")

    assert anyone.status_code == 200 and anyone.json()["status"] == "down"
    assert operator.status_code == 200 and operator.json()["redis"] == "unreachable"


def test_a_board_whose_shard_redis_lost_is_not_served_as_empty_and_fresh(api, redis_client, settings):
    # given a board that was never read by this process, and Redis then emptied
    shop = Shop()
    shop.send(shop.sale("p1", qty=2))
    shop.tick()
    redis_client.delete(*redis_client.keys(settings.RANKINGS["KEY_PREFIX"] + ":*"))
    # when it is read before the next tick rebuilds it
    reply = api.get("/v1/categories/toys/top")
    # then the answer says it is unavailable instead of showing an empty list as the truth
    assert reply.status_code == 503
    shop.tick()
    assert api.get("/v1/categories/toys/top").json()["items"][0]["productId"] == "p1"


@pytest.mark.parametrize(
    "url", ["/v1/categories/not%20a%20slug/top", "/v1/nothing-here", "/v1/products/a/b/rank"]
)
def test_every_error_under_v1_is_json(api, url):
    reply = api.get(url)

    assert reply.status_code == 404
    assert reply.json()["error"]

"""Reads stay up: cache headers, ETag/304, and the last known answer while Redis is down."""

import time

import pytest

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

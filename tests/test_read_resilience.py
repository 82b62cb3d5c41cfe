"""Reads stay up: cache headers, ETag/304, and the last known answer while Redis is down."""

import socket
import time

import pytest
from django.db import connection
from django.utils import timezone

from catalogue.models import Category, Product
from rankings.engine import store
from rankings.engine.names_copy import names_mended

from .rankings_helpers import Shop, run_keys

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
    redis_client.delete(*run_keys(redis_client))
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


# --- when PostgreSQL is away ------------------------------------------------------------


@pytest.fixture
def database_down(transactional_db):
    """The test's database connection pointed at a local port where nothing listens, for the block."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        saved = dict(connection.settings_dict)

        def down():
            connection.close()
            connection.settings_dict.update(HOST="127.0.0.1", PORT=str(closed.getsockname()[1]))

        yield down
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


@pytest.fixture
def catalogue_shop():
    toys = Category.objects.create(slug="toys", name="Toys")
    for product_id, name in (("p1", "Yo-yo"), ("p2", "Kite"), ("p3", "Top, never sold")):
        Product.objects.create(product_id=product_id, name=name, price_cents=100).categories.set([toys])
    shop = Shop(now=timezone.now().replace(microsecond=0))
    shop.send(shop.sale("p1", qty=2), shop.sale("p2", qty=1))
    shop.tick()
    return shop


def test_with_postgres_down_reads_serve_what_redis_holds_with_ids_for_names(
    api, catalogue_shop, database_down
):
    # given categories read once while PostgreSQL was up
    assert api.get("/v1/categories").status_code == 200
    # when PostgreSQL goes away
    database_down()
    top = api.get("/v1/categories/toys/top")
    rank = api.get("/v1/products/p2/rank?category=toys")
    neighbours = api.get("/v1/products/p2/neighbors?category=toys&n=1")
    # then the boards are served from Redis, marked stale, with product ids in place of names
    for reply in (top, neighbours):
        assert reply.status_code == 200, reply.content
        assert reply.json()["stale"] is True and "Stale" in reply["Warning"]
    assert [(i["productId"], i["name"]) for i in top.json()["items"]] == [("p1", "p1"), ("p2", "p2")]
    # and a ranked product's rank, which names nothing, is what Redis says now
    assert rank.status_code == 200, rank.content
    assert (rank.json()["rank"], rank.json()["stale"]) == (2, False)
    # while an unranked one needs the catalogue to tell "not ranked" from "no such product"
    unranked = api.get("/v1/products/p3/rank?category=toys")
    assert unranked.status_code == 200, unranked.content
    assert (unranked.json()["rank"], unranked.json()["stale"]) == (None, True)


def test_with_postgres_down_what_cannot_be_known_is_a_503_json(
    api, ingest_api, catalogue_shop, database_down
):
    """A product's categories never read by this process, or a token to look up: 503, not 500."""
    database_down()

    ranks = api.get("/v1/products/p1/ranks")
    with_token = ingest_api.get("/v1/categories/toys/top")

    for reply in (ranks, with_token):
        assert reply.status_code == 503
        assert reply.json()["error"]


def test_with_postgres_down_names_come_from_their_copy_in_redis(api, catalogue_shop, database_down):
    # given categories read once while PostgreSQL was up, and the product names copied to Redis
    assert api.get("/v1/categories").status_code == 200
    names_mended(["p1", "p2", "p3"])
    # when PostgreSQL goes away
    database_down()
    top = api.get("/v1/categories/toys/top")
    neighbours = api.get("/v1/products/p2/neighbors?category=toys&n=1")
    # then the boards come with their names, and nothing in them is stale
    for reply in (top, neighbours):
        assert reply.status_code == 200, reply.content
        assert reply.json()["stale"] is False
        assert [(i["productId"], i["name"]) for i in reply.json()["items"]] == [
            ("p1", "Yo-yo"),
            ("p2", "Kite"),
        ]


def test_with_postgres_down_pages_render_with_ids_for_names(client, catalogue_shop, database_down):
    database_down()

    for url in ("/", "/c/toys/", "/p/p2/", "/c/all/"):
        reply = client.get(url)
        html = reply.content.decode()
        assert reply.status_code == 200, url
        assert reply.context["freshness"]["stale"] is True, url
        assert "These rankings may be out of date" in html and "Traceback" not in html
    assert '<a href="/p/p1/">p1</a>' in client.get("/c/toys/").content.decode()

"""What moves through the API: rankThen on /top, movers, rank history and new releases."""

import datetime as dt

import pytest

from catalogue.models import Category, Product
from rankings.serving import memory

from .conftest import built_once_for_the_class
from .rankings_helpers import START, Shop

pytestmark = pytest.mark.django_db(transaction=True)

DAY_LATER = START + dt.timedelta(hours=24, minutes=30)


def _iso(instant: dt.datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


def _two_days_shop() -> Shop:
    """Yesterday at noon p0 > p1 > p2 > p3 in toys; today p3 leads, p2 is second, p5 is new."""
    toys = Category.objects.create(slug="toys", name="Toys")
    for i, name in enumerate(["Kite", "Yo-yo", "Puzzle", "Robot", "Ball", "Drone"]):
        Product.objects.create(product_id=f"p{i}", name=name, price_cents=100).categories.set([toys])
    shop = Shop()
    shop.send(*[shop.sale(f"p{i}", qty=qty) for i, qty in enumerate([10, 5, 3, 1])])
    shop.tick()
    shop.now = DAY_LATER
    shop.send(shop.sale("p3", qty=20), shop.sale("p2", qty=4), shop.sale("p5", qty=2), shop.sale("p0", qty=1))
    shop.tick()
    return shop


@pytest.fixture
def shop():
    """A shop of the test's own, for a test that sends and ticks."""
    return _two_days_shop()


shop_once = built_once_for_the_class(_two_days_shop)


def test_new_releases_leave_when_their_release_turns_30_days_old(api, shop):
    # the editor dates p0 forty days back: no longer new
    Product.objects.filter(product_id="p0").update(released_at=START - dt.timedelta(days=40))
    body = api.get("/v1/categories/toys/new?window=1d").json()
    assert [(i["rank"], i["productId"], i["releasedAt"]) for i in body["items"]] == [
        (1, "p3", _iso(START)),
        (2, "p2", _iso(START)),
        (3, "p5", _iso(DAY_LATER)),
    ]
    assert body["total"] == 3
    # a late sale of p5 an hour before yesterday's noon moves its release back
    shop.send(shop.sale("p5", qty=1, ago=DAY_LATER - START + dt.timedelta(hours=1)))
    # 30 days after noon yesterday: p3 and p2 are still new (exactly 30 days), p5 no longer
    shop.now = START + dt.timedelta(days=30)
    shop.tick()
    memory.forget_all("answers")
    body = api.get("/v1/categories/toys/new?window=30d").json()
    assert [i["productId"] for i in body["items"]] == ["p3", "p2"]
    # one second later, neither
    shop.now += dt.timedelta(seconds=1)
    shop.tick()
    memory.forget_all("answers")  # what a reader remembers for half a second
    assert api.get("/v1/categories/toys/new?window=30d").json()["items"] == []


@pytest.mark.django_db
class TestMovesOfOneShop:
    """What the shop's two days show, built once for the tests that only read it: each finds the
    database and Redis as the build left them, whatever the previous test wrote."""

    @pytest.fixture
    def shop(self, shop_once):
        return shop_once.restored()

    def test_top_items_carry_their_rank_24_hours_before(self, api, shop):
        body = api.get("/v1/categories/toys/top?window=1d").json()
        assert [(i["productId"], i["rank"], i["rankThen"]) for i in body["items"]] == [
            ("p3", 1, 4),
            ("p2", 2, 3),
            ("p5", 3, None),
            ("p0", 4, 1),
        ]
        # no snapshots of the 30-day window: unknown
        body = api.get("/v1/categories/toys/top?window=30d").json()
        assert all(item["rankThen"] is None for item in body["items"])

    def test_movers_unranked_first_then_by_gain(self, api, shop):
        body = api.get("/v1/categories/toys/movers?window=1d&metric=units").json()
        assert body["then"] == _iso(START)
        assert body["asOf"] == _iso(DAY_LATER)
        assert body["total"] == 3
        assert [(i["productId"], i["rank"], i["rankThen"], i["gainPercent"]) for i in body["items"]] == [
            ("p5", 3, None, None),
            ("p3", 1, 4, 300),
            ("p2", 2, 3, 50),
        ]
        assert body["items"][1]["name"] == "Robot" and body["items"][1]["units"] == 20

    def test_movers_refuse_a_window_without_snapshots_and_unknown_categories(self, api, shop):
        assert api.get("/v1/categories/toys/movers?window=1h").status_code == 400
        assert api.get("/v1/categories/toys/movers?limit=0").status_code == 400
        assert api.get("/v1/categories/nope/movers").status_code == 404

    def test_history_has_a_point_per_hour_and_null_where_unranked(self, api, shop):
        body = api.get("/v1/products/p3/history?category=toys&window=1d&days=2").json()
        assert body["productId"] == "p3" and body["category"] == "toys" and body["window"] == "1d"
        points = body["points"]
        assert [p["at"] for p in points] == [_iso(START + dt.timedelta(hours=h)) for h in range(25)]
        # ranked fourth while yesterday's noon sales were in the day's window, then the window emptied
        # (today's sales came at 12:30, after the last snapshot)
        assert [p["rank"] for p in points] == [4] * 24 + [None]
        assert len(api.get("/v1/products/p3/history?category=toys&window=1d&days=1").json()["points"]) == 24

    def test_history_refuses_bad_parameters(self, api, shop):
        assert api.get("/v1/products/p3/history?category=toys&days=33").status_code == 400
        assert api.get("/v1/products/p3/history?category=toys&window=30d").status_code == 400
        assert api.get("/v1/products/p3/history").status_code == 400
        assert api.get("/v1/products/nope/history?category=toys").status_code == 404
        assert api.get("/v1/products/p3/history?category=nope").status_code == 404

    def test_the_movers_and_new_releases_pages(self, client, shop):
        movers = client.get("/c/toys/movers/?window=1d").content.decode()
        assert "#3, previously unranked" in movers and "#1, was #4 (+300%)" in movers
        assert client.get("/c/toys/movers/?window=30d").status_code == 400
        assert client.get("/c/nope/movers/").status_code == 404
        new = client.get("/c/toys/new/?window=1d")
        assert new.status_code == 200
        assert [row.item.product_id for row in new.context["items"]] == ["p3", "p2", "p5", "p0"]
        assert client.get("/c/toys/new/?page=2").status_code == 404

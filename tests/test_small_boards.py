"""A small category costs Redis its boards and nothing more: no blob while a board is no larger
than the blob's ranks, no key at all for a window without its sales; reads answer as before."""

import datetime as dt

import pytest

from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.engine.shards import active
from rankings.serving import selectors

from .rankings_helpers import Shop
from .redis_round_trips import RedisRoundTrips

pytestmark = pytest.mark.django_db(transaction=True)


def _keys(redis_client, category: str) -> set[str]:
    """The board and blob keys of a category, as (kind, window, metric)."""
    found = set()
    for raw in redis_client.scan_iter(f"{rankings_settings.KEY_PREFIX}:v*:*:{category}", count=1000):
        kind, window, metric = raw.decode().rsplit(":", 4)[1:4]
        found.add((kind, window, metric))
    return found


def test_a_category_with_no_sale_in_a_window_has_no_keys_for_it(redis_client):
    # given a sale two days ago in toys, and one now in kites
    shop = Shop()
    shop.send(
        shop.sale("p1", categories=["toys"], amount="2.00", ago=dt.timedelta(days=2)),
        shop.sale("p2", categories=["kites"], amount="3.00"),
    )
    shop.tick()
    # then toys has boards for the 7-day and 30-day windows only, and no blob
    assert _keys(redis_client, "toys") == {("b", w, m) for w in ("7d", "30d") for m in ("units", "revenue")}
    # and a sale that leaves every window leaves no key behind
    shop.advance(days=31)
    shop.tick()
    assert _keys(redis_client, "toys") == set()
    assert _keys(redis_client, "kites") == set()
    shop.assert_exact()


def test_a_board_has_a_blob_only_while_it_is_larger_than_its_ranks(redis_client):
    shop = Shop()
    # given a board of exactly the blob's ranks: no blob
    shop.send(*[shop.sale(f"p{i:03}", qty=1 + i) for i in range(store.BLOB_SIZE)])
    shop.tick()
    assert ("t", "7d", "units") not in _keys(redis_client, "toys")
    # when one more product sells: a blob
    shop.send(shop.sale("p999", qty=1))
    shop.advance(seconds=1)
    shop.tick()
    assert ("t", "7d", "units") in _keys(redis_client, "toys")
    shop.assert_exact()


@pytest.mark.parametrize("size", [3, store.BLOB_SIZE + 5])
def test_first_ranks_read_the_same_with_or_without_a_blob(size, api):
    # given a board of `size` products, product i sold i + 1 units at 2.00 each
    shop = Shop()
    shop.send(*[shop.sale(f"p{i:03}", qty=1 + i, amount=f"{2 * (1 + i)}.00") for i in range(size)])
    shop.tick()
    # when the first page is read alone, and among many boards at once
    alone = api.get("/v1/categories/toys/top?limit=50").json()["items"]
    many = selectors.boards_top_many(limits={"toys": 50, "all": 3}, window="7d", metric="units")
    # then both give ranks, units and revenue in ranking order, from both metrics' boards
    expected = [(f"p{i:03}", 1 + i, 2 * (1 + i)) for i in reversed(range(size))][:50]
    assert [(r["productId"], r["units"], float(r["revenue"])) for r in alone] == expected
    assert [(r.product_id, r.units, r.revenue) for r in many["toys"].items] == expected
    assert many["toys"].total == size


@pytest.mark.single_redis
def test_heads_of_many_boards_are_one_round_trip_small_or_large(monkeypatch):
    # given a board with a blob, one without, and one with no key at all
    shop = Shop()
    shop.send(*[shop.sale(f"p{i:03}", categories=["big"], qty=1 + i) for i in range(store.BLOB_SIZE + 1)])
    shop.send(shop.sale("q1", categories=["small"], qty=4))
    shop.tick()
    layout, version = active().layout, store.served_version()
    boards = [(layout.shard_of(c), "7d", "units", c, 10) for c in ("big", "small", "none")]
    # when their heads are read
    trips = RedisRoundTrips(monkeypatch)
    heads = store.board_heads(version=version, boards=boards)
    # then in one round trip, each as it stands
    assert trips.count == 1
    assert [h.total for h in heads] == [store.BLOB_SIZE + 1, 1, 0]
    assert heads[0].rows[0] == ("p100", 101, 0)
    assert heads[1].rows == [("q1", 4, 0)]

"""The tick against the batch recompute: order, ties, windows, duplicates, late sales, backlog, Redis loss."""

import datetime as dt

import pytest
from django.db import transaction

from rankings.conf import rankings_settings
from rankings.engine import batches
from rankings.engine.shards import ALL, Layout, shard_of
from rankings.models import Bucket, ShardState

from .rankings_helpers import START, Shop

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = dt.timedelta(hours=1)
MINUTE = dt.timedelta(minutes=1)


def test_ordering_is_score_descending_then_product_id_ascending():
    """b 9, a 6, c 5; equal scores by productId; a score back at zero leaves the board."""
    # given
    shop = Shop()
    shop.send(
        shop.sale("a", qty=6),
        shop.sale("b", qty=9),
        shop.sale("c", qty=5),
        shop.sale("d", qty=5),
        shop.sale("e", qty=2, event_id="e-sale"),
    )
    shop.send(shop.sale("e", qty=-2, returnOf="e-sale"))
    # when
    shop.tick()
    # then
    assert shop.top() == [("b", 9), ("a", 6), ("c", 5), ("d", 5)]
    shop.assert_exact()


def test_a_tie_and_a_one_unit_difference():
    """A one-unit lead always wins; a tie is broken by productId, never by time."""
    shop = Shop()
    shop.send(shop.sale("z", qty=3), shop.sale("a", qty=3), shop.sale("m", qty=4))
    shop.tick()
    assert shop.top() == [("m", 4), ("a", 3), ("z", 3)]
    shop.advance(minutes=1)
    shop.send(shop.sale("z", qty=1))
    shop.tick()
    assert shop.top() == [("m", 4), ("z", 4), ("a", 3)]
    shop.assert_exact()


def test_a_product_in_two_categories_ranks_in_both():
    """A sale in two categories counts once in each, and once in `all`."""
    shop = Shop()
    shop.send(
        shop.sale("p1", categories=["toys", "gifts"], qty=2), shop.sale("p2", categories=["gifts"], qty=5)
    )
    shop.tick()
    assert shop.top("toys") == [("p1", 2)]
    assert shop.top("gifts") == [("p2", 5), ("p1", 2)]
    assert shop.top("all") == [("p2", 5), ("p1", 2)]
    shop.assert_exact()


def test_the_window_slides_and_old_hours_are_subtracted():
    """The 1d window forgets a sale 24 hours after its hour began."""
    shop = Shop()
    shop.send(shop.sale("old", qty=5))
    shop.tick()
    shop.advance(hours=23)
    shop.send(shop.sale("new", qty=1))
    shop.tick()
    assert shop.top(window="1d") == [("old", 5), ("new", 1)]
    shop.advance(hours=1)
    shop.tick()
    assert shop.top(window="1d") == [("new", 1)]
    assert shop.top(window="7d") == [("old", 5), ("new", 1)]
    shop.assert_exact()


def test_three_minute_buckets_walk_out_of_the_hour():
    """Three minute buckets leave the 1h window one by one."""
    shop = Shop(now=dt.datetime(2026, 3, 2, 12, 0, 30, tzinfo=dt.UTC))
    for product in ("first", "second", "third"):
        shop.send(shop.sale(product, qty=1))
        shop.tick()
        shop.advance(minutes=1)
    assert shop.top(window="1h") == [("first", 1), ("second", 1), ("third", 1)]
    shop.advance(minutes=57)  # 13:00:30: the 12:00 bucket has left
    shop.tick()
    assert shop.top(window="1h") == [("second", 1), ("third", 1)]
    shop.advance(minutes=1)
    shop.tick()
    assert shop.top(window="1h") == [("third", 1)]
    shop.advance(minutes=1)
    shop.tick()
    assert shop.top(window="1h") == []
    shop.assert_exact()


def test_duplicates_are_ignored_and_too_old_sales_are_counted_as_dropped():
    """A resent event counts once; a sale older than every window is stored and counted as dropped."""
    shop = Shop()
    sale = shop.sale("p1", qty=2)
    shop.send(sale)
    assert shop.send(sale).duplicates == 1
    shop.send(shop.sale("ancient", qty=7, ago=dt.timedelta(days=31)))
    report = shop.tick()
    assert report.too_old == 1
    assert shop.top("toys", window="30d") == [("p1", 2)]
    assert sum(ShardState.objects.values_list("too_old", flat=True)) == 1
    shop.assert_exact()


def test_a_late_sale_still_inside_the_window_is_counted():
    """Ten hours late, it lands in its own hour and expires with it."""
    shop = Shop()
    shop.tick()
    shop.send(shop.sale("late", qty=3, ago=10 * HOUR))
    shop.tick()
    assert shop.top(window="1d") == [("late", 3)]
    assert shop.top(window="1h") == []
    shop.advance(hours=14)
    shop.tick()
    assert shop.top(window="1d") == []
    shop.assert_exact()


def test_one_batch_that_moves_the_clock_forward_many_hours_adds_before_it_expires():
    """Sales of old hours and a clock jump in one tick leave nothing that expired (add before expire)."""
    shop = Shop()
    shop.tick()
    shop.advance(hours=30)
    shop.send(
        shop.sale("expired", qty=4, ago=29 * HOUR),  # its hour left the 1d window during the jump
        shop.sale("kept", qty=2, ago=2 * HOUR),
    )
    shop.tick()
    assert shop.top(window="1d") == [("kept", 2)]
    assert shop.top(window="7d") == [("expired", 4), ("kept", 2)]
    shop.assert_exact()


def test_a_sale_ahead_of_the_clock_enters_the_window_when_its_bucket_does():
    """A sale up to five minutes ahead waits in its bucket until the window reaches it."""
    shop = Shop(now=dt.datetime(2026, 3, 2, 12, 58, 0, tzinfo=dt.UTC))
    shop.send(shop.sale("soon", qty=1, ago=-dt.timedelta(minutes=4)))
    shop.tick()
    assert shop.top(window="1d") == []
    shop.advance(minutes=3)
    shop.tick()
    assert shop.top(window="1d") == [("soon", 1)]
    shop.assert_exact()


def test_a_backlog_is_worked_in_bounded_batches(settings):
    """Incremental in batches of 3 equals the recompute."""
    settings.RANKINGS = {**settings.RANKINGS, "BATCH_SIZE": 3}
    shop = Shop()
    shop.send(
        *[shop.sale(f"p{i % 4}", categories=[f"c{i % 3}"], qty=1 + i % 5, ago=i * HOUR) for i in range(40)]
    )
    report = shop.tick()
    assert report.batches >= 40 // 3
    shop.assert_exact()


def test_a_backlog_is_claimed_whole_up_to_the_batch_size(settings, monkeypatch):
    """120 sales in batches of at most 48: 48, 48, then the 24 left, each claim as large as it may be."""
    settings.RANKINGS = {**settings.RANKINGS, "BATCH_SIZE": 48}
    claims = []
    real_claim = batches._claim

    def claim(cursor, params, **kwargs):
        claimed = real_claim(cursor, params, **kwargs)
        claims.append((params["shard"], params["limit"], claimed))
        return claimed

    monkeypatch.setattr(batches, "_claim", claim)
    # Off the hour: a tick that crosses an hour claims up to it first (rankings/engine/snapshots.py).
    shop = Shop(now=START + dt.timedelta(minutes=1))
    shop.send(
        *[shop.sale(f"p{i % 7}", categories=["toys"], qty=1 + i % 5, ago=i * MINUTE) for i in range(120)]
    )
    shop.tick()
    every = shard_of(ALL, Layout(4))
    assert [(limit, claimed) for shard, limit, claimed in claims if shard == every] == [
        (48, 48),
        (48, 48),
        (48, 24),
    ]
    shop.assert_exact()


def test_ticks_inside_one_enclosing_transaction_count_each_sale_once():
    """Two ticks in one outer transaction (nothing commits between them): the second claims only
    its own sales, not the first's again."""
    shop = Shop()
    with transaction.atomic():
        shop.send(shop.sale("p1", qty=2))
        shop.tick()
        shop.advance(minutes=1)
        shop.send(shop.sale("p2", qty=1))
        shop.tick()
    assert shop.top() == [("p1", 2), ("p2", 1)]
    shop.assert_exact()


def test_lost_redis_data_is_rebuilt_by_the_next_tick(redis_client, settings):
    """Every key of the prefix deleted, then a tick: the boards come back from the buckets."""
    shop = Shop()
    shop.send(*[shop.sale(f"p{i}", qty=i + 1, ago=i * HOUR) for i in range(10)])
    shop.tick()
    before = shop.top(window="30d")
    redis_client.delete(*redis_client.scan_iter(rankings_settings.KEY_PREFIX + ":*"))
    assert shop.top(window="30d") == []
    report = shop.tick()
    assert report.rebuilt_shards == rankings_settings.SHARDS
    assert shop.top(window="30d") == before
    shop.assert_exact()


def test_the_clock_may_not_go_backwards():
    from rankings.engine.tick import ClockWentBackwards

    shop = Shop()
    shop.tick()
    shop.advance(seconds=-1)
    with pytest.raises(ClockWentBackwards):
        shop.tick()


def test_revenue_is_exact_to_the_cent_and_net_of_refunds():
    shop = Shop()
    shop.send(shop.sale("p1", qty=3, amount="10.00", event_id="o1"), shop.sale("p2", qty=1, amount="6.67"))
    shop.send(shop.sale("p1", qty=-1, returnOf="o1"))  # refund 3.33
    shop.tick()
    assert shop.top(metric="revenue") == [("p1", 667), ("p2", 667)]
    assert shop.top(metric="units") == [("p1", 2), ("p2", 1)]
    shop.assert_exact()


def test_the_fold_writes_no_bucket_that_pruning_would_delete():
    """Minute buckets are kept 2 hours: a sale 3 hours old goes into its hour bucket only."""
    shop = Shop()
    shop.send(shop.sale("old", ago=3 * HOUR), shop.sale("new", ago=30 * MINUTE))
    shop.tick()
    folded = set(Bucket.objects.filter(category="toys").values_list("product_id", "size"))
    assert folded == {("old", 3600), ("new", 3600), ("new", 60)}
    shop.assert_exact()


def test_a_tick_within_the_minute_reads_no_bucket_and_one_across_reads_each_window_by_the_index():
    """The net change reads the buckets only for a range that moved, and each through the shard's
    index: with the bucket table's statistics, a join of the windows with it was planned as a scan
    of the shard's every bucket."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    shop = Shop(now=START + dt.timedelta(minutes=1, seconds=10))
    shop.send(*[shop.sale(f"p{i}", categories=[f"c{i % 40}"], qty=1) for i in range(400)])
    shop.tick()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE rankings_bucket")
    shop.advance(seconds=5)
    shop.send(shop.sale("p1", categories=["c1"], qty=2))
    with CaptureQueriesContext(connection) as within:
        shop.tick()
    nets = [q["sql"] for q in within.captured_queries if "tick_facts f ON" in q["sql"]]
    assert nets and not any("rankings_bucket" in sql for sql in nets)
    shop.advance(minutes=1)
    shop.send(shop.sale("p2", categories=["c2"], qty=3))
    with CaptureQueriesContext(connection) as across:
        shop.tick()
    nets = [q["sql"] for q in across.captured_queries if "tick_facts f ON" in q["sql"]]
    assert nets
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + nets[0])
        plan = "\n".join(row for (row,) in cursor.fetchall())
    assert "Seq Scan on rankings_bucket" not in plan
    shop.assert_exact()

"""Rank alerts judged at each hourly snapshot: each rule fires exactly when it should, once per hour,
in the tick that records the hour, and never again for an hour a rebuild rewrites."""

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalogue.models import Product
from rankings.conf import rankings_settings
from rankings.engine import batches
from rankings.engine.prune import prune
from rankings.engine.shards import Layout, active
from rankings.models import Alert, AlertAttempt, AlertFiring, SnapshotHour
from rankings.operations import backfill
from rankings.operations.alerts import alert_create

from .rankings_helpers import START, Shop

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = dt.timedelta(hours=1)
URL = "https://hooks.example.com/ranks"


def _alert(
    product: str, rule: str, number: int, category: str = "toys", window: str = "1d", metric: str = "units"
):
    user, _ = get_user_model().objects.get_or_create(username="seller")
    alert, _ = alert_create(
        user=user,
        product_id=product,
        category=category,
        window=window,
        metric=metric,
        rule=rule,
        number=number,
        url=URL,
    )
    return alert


def _fired() -> list[tuple]:
    """Every firing: (product, rule, number, hour, type, rank, rank before), in order."""
    return sorted(
        (f.alert.product_id, f.alert.rule, f.alert.number, f.at, f.kind, f.rank, f.rank_before)
        for f in AlertFiring.objects.select_related("alert")
    )


def test_each_rule_fires_when_the_rank_crosses_its_line_and_not_otherwise():
    """At 12:00 toys ranks p1, p2, p3; by 13:00 p3 sold most: p3, p1, p2. Only the rules that the move
    makes true fire; a product already in the top N does not enter it, one still in it does not leave."""
    shop = Shop()
    shop.send(
        shop.sale("p1", qty=5),
        shop.sale("p2", qty=3),
        shop.sale("p3", qty=1),
        shop.sale("p4", categories=["games"]),
    )
    alerts = [
        ("p3", "enters", 1),  # 3 -> 1: fires
        ("p1", "enters", 3),  # 1 -> 2: in the top 3 before and after: no
        ("p1", "leaves", 1),  # 1 -> 2: fires
        ("p2", "leaves", 2),  # 2 -> 3: fires
        ("p2", "leaves", 3),  # 2 -> 3: still in the top 3: no
        ("p3", "climbs", 2),  # 3 -> 1: fires
        ("p3", "climbs", 3),  # rose 2 places, not 3: no
        ("p2", "falls", 1),  # 2 -> 3: fires
        ("p1", "climbs", 1),  # fell: no
        ("p4", "enters", 5),  # never on the toys board: no
    ]
    for alert in alerts:
        _alert(*alert)
    shop.tick()  # 12:00: the first hour, nothing to compare with
    assert _fired() == []
    shop.advance(minutes=30)
    shop.send(shop.sale("p3", qty=10))
    shop.advance(minutes=30)
    shop.tick()  # 13:00
    at = START + HOUR
    assert _fired() == sorted(
        [
            ("p3", "enters", 1, at, "rank.entered", 1, 3),
            ("p1", "leaves", 1, at, "rank.left", 2, 1),
            ("p2", "leaves", 2, at, "rank.left", 3, 2),
            ("p3", "climbs", 2, at, "rank.climbed", 1, 3),
            ("p2", "falls", 1, at, "rank.fell", 3, 2),
        ]
    )


def test_equal_scores_are_ranked_by_product_id_when_judging(settings):
    """`a` reaches `b`'s two units: tied, `a` ranks first by its id, so it enters the top 1 and `b`
    leaves it; `c` falls from second to third (and, in the top 2 before, does not enter it)."""
    shop = Shop()
    shop.send(shop.sale("b", qty=2), shop.sale("c", qty=1))
    Product.objects.create(product_id="a", name="A")  # in the catalogue, not sold yet
    for alert in [("a", "enters", 1), ("b", "leaves", 1), ("c", "enters", 2), ("c", "falls", 1)]:
        _alert(*alert)
    shop.tick()
    shop.advance(minutes=10)
    shop.send(shop.sale("a", qty=2))
    shop.advance(minutes=50)
    shop.tick()
    at = START + HOUR
    assert _fired() == sorted(
        [
            ("a", "enters", 1, at, "rank.entered", 1, None),
            ("b", "leaves", 1, at, "rank.left", 2, 1),
            ("c", "falls", 1, at, "rank.fell", 3, 2),
        ]
    )


def test_an_unranked_product_counts_as_past_the_snapshot_depth(settings):
    """With snapshots 3 deep, p4 (rank 4 on the board) is in none: it climbs from 4 to 1, three places;
    p3 falls out of the snapshot, from 3 to past it (4): one place."""
    settings.RANKINGS = {**settings.RANKINGS, "SNAPSHOT_DEPTH": 3}
    shop = Shop()
    shop.send(shop.sale("p1", qty=9), shop.sale("p2", qty=8), shop.sale("p3", qty=7), shop.sale("p4", qty=6))
    for alert in [("p4", "climbs", 3), ("p4", "climbs", 2), ("p3", "falls", 1), ("p3", "falls", 2)]:
        _alert(*alert)
    shop.tick()
    shop.advance(minutes=30)
    shop.send(shop.sale("p4", qty=10))
    shop.advance(minutes=30)
    shop.tick()
    at = START + HOUR
    assert _fired() == sorted(
        [
            ("p4", "climbs", 3, at, "rank.climbed", 1, None),
            ("p4", "climbs", 2, at, "rank.climbed", 1, None),
            ("p3", "falls", 1, at, "rank.fell", None, 3),
        ]
    )


def test_an_outage_of_several_hours_judges_each_hour_once_in_order():
    """One tick five and a half hours late crosses 13:00 to 17:00: p2 passes p1 by 14:00 (a sale at
    13:20) and falls behind again by 16:00 (p1's sale at 15:40); each hour is judged against the one
    before it, so p2 enters at 14:00 and leaves at 16:00, each once; a later tick adds nothing."""
    shop = Shop()
    shop.send(shop.sale("p1", qty=5), shop.sale("p2", qty=1))
    _alert("p2", "enters", 1)
    _alert("p2", "leaves", 1)
    _alert("p1", "falls", 1)
    shop.tick()  # 12:00
    shop.advance(hours=5, minutes=30)
    shop.send(
        shop.sale("p2", qty=10, ago=dt.timedelta(hours=4, minutes=10)),  # 13:20
        shop.sale("p1", qty=20, ago=dt.timedelta(hours=1, minutes=50)),  # 15:40
    )
    shop.tick()  # 17:30
    assert _fired() == sorted(
        [
            ("p2", "enters", 1, START + 2 * HOUR, "rank.entered", 1, 2),
            ("p1", "falls", 1, START + 2 * HOUR, "rank.fell", 2, 1),
            ("p2", "leaves", 1, START + 4 * HOUR, "rank.left", 2, 1),
        ]
    )
    shop.advance(minutes=20)
    shop.tick()
    assert len(_fired()) == 3


def test_an_alert_is_judged_from_the_engine_hour_after_it_was_made():
    """Made at 12:30 (the engine's clock), an alert is judged at 13:00 and later, not at hours a late
    tick crosses from before it was made."""
    shop = Shop()
    shop.send(shop.sale("p1", qty=5), shop.sale("p2", qty=1))
    shop.tick()  # 12:00
    shop.advance(minutes=30)
    shop.tick()  # 12:30
    _alert("p2", "enters", 1)
    shop.send(shop.sale("p2", qty=10, ago=dt.timedelta(minutes=20)))  # 12:10, counted at 13:00
    shop.advance(hours=1)
    shop.tick()  # 13:30
    assert _fired() == [("p2", "enters", 1, START + HOUR, "rank.entered", 1, 2)]
    assert Alert.objects.get().since == START + dt.timedelta(minutes=30)


def test_a_rebuild_that_rewrites_history_fires_no_old_alert_again():
    """A late sale of 12:10 arrives after 13:00 was judged: the rebuild's history puts it in 13:00
    (p2 first), unlike the live snapshot. Nothing fires for 13:00 again, and 14:00 is judged once,
    against the rebuilt 13:00 (p2 first then and still: nothing)."""
    shop = Shop()
    shop.send(shop.sale("p1", qty=5), shop.sale("p2", qty=1))
    _alert("p2", "enters", 1)
    shop.tick()  # 12:00
    shop.advance(hours=1)
    shop.tick()  # 13:00: nothing moved
    shop.send(shop.sale("p2", qty=10, ago=dt.timedelta(minutes=50)))  # 12:10, late
    shop.advance(minutes=10)
    shop.tick()
    backfill.version_build(activate=True)
    assert _fired() == []
    shop.advance(minutes=50)
    shop.tick()  # 14:00
    assert _fired() == []
    assert SnapshotHour.objects.filter(version=2).count() == 3


def test_an_hour_recorded_again_fires_nothing_twice():
    """A clock reset forgets the hours after it and the next tick records them again: their firings
    already exist and stay one each."""
    shop = Shop()
    shop.send(shop.sale("p1", qty=5), shop.sale("p2", qty=1))
    _alert("p2", "enters", 1)
    shop.tick()
    shop.send(shop.sale("p2", qty=10))
    shop.advance(hours=2)
    shop.tick()  # 13:00 and 14:00
    fired = _fired()
    assert len(fired) == 1
    batches.clock_reset(to=START + dt.timedelta(minutes=30))
    shop.tick()
    assert _fired() == fired


def test_alerts_follow_their_boards_to_another_shard_count():
    """A switch to 16 shards re-keys each alert to its category's new shard: the next hour judges it."""
    shop = Shop()
    categories = [f"c{i}" for i in range(12)]
    shop.send(
        *[shop.sale("p1", categories=[c], qty=5) for c in categories],
        *[shop.sale("p2", categories=[c], qty=1) for c in categories],
    )
    for category in categories:
        _alert("p2", "enters", 1, category=category)
    shop.tick()  # 12:00
    backfill.version_build(layout=Layout(16), activate=True)
    layout = active().layout
    assert sorted(Alert.objects.values_list("category", "shard")) == sorted(
        (c, layout.shard_of(c)) for c in categories
    )
    shop.advance(minutes=10)
    shop.send(*[shop.sale("p2", categories=[c], qty=10) for c in categories])
    shop.advance(minutes=50)
    shop.tick()  # 13:00 on 16 shards
    assert len(_fired()) == len(categories)


@pytest.mark.usefixtures("partitions_dropped")  # the prune makes the coming months' partitions of sales
def test_firings_and_attempts_past_their_keep_are_pruned(settings):
    """The prune deletes the firings of hours more than ALERTS_KEEP_SECONDS (at least the retries' day
    plus a day) behind the engine's clock, their attempts first, and keeps the later ones."""
    settings.RANKINGS = {**settings.RANKINGS, "ALERTS_KEEP_SECONDS": 0, "ALERTS_RETRY_SECONDS": 3600}
    shop = Shop()
    shop.send(shop.sale("p1", qty=5), shop.sale("p2", qty=1))
    alert = _alert("p2", "enters", 1)
    shop.tick()
    shop.send(shop.sale("p2", qty=10))
    shop.advance(hours=1)
    shop.tick()  # 13:00: fires
    old = AlertFiring.objects.get()
    AlertAttempt.objects.create(firing=old, alert=alert, at=START + HOUR, status=500)
    recent = AlertFiring.objects.create(alert=alert, at=START + 26 * HOUR, kind="rank.left")
    AlertAttempt.objects.create(firing=recent, alert=alert, at=START + 26 * HOUR, status=200)
    shop.advance(hours=25, minutes=1)  # 13:00 is now more than 25 hours (3,600 s + a day) behind
    shop.tick()
    report = prune()
    assert report.deleted["alert_firings"] == 1
    assert list(AlertFiring.objects.values_list("id", flat=True)) == [recent.id]
    assert list(AlertAttempt.objects.values_list("firing_id", flat=True)) == [recent.id]


def test_judging_is_one_statement_per_take_whatever_the_alerts():
    """Three alerts or thirty, on one board or many: each shard judges an hour in one statement."""
    shop = Shop()
    categories = [f"c{i}" for i in range(10)]
    shop.send(*[shop.sale(f"p{i}", categories=[c], qty=i + 1) for i, c in enumerate(categories)])

    def judged(alerts: int) -> int:
        for i in range(alerts):
            _alert(f"p{i % 10}", "climbs", 1 + i // 10, category=categories[i % 10])
        shop.advance(hours=1)
        with CaptureQueriesContext(connection) as queries:
            shop.tick()
        return sum("INSERT INTO rankings_alertfiring" in q["sql"] for q in queries.captured_queries)

    shop.tick()
    few, many = judged(3), judged(27)
    assert few == many == rankings_settings.SHARDS

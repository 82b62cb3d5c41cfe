"""Hourly snapshots: exact as of each hour however late the tick that crosses it, pruned after 32
days, and complete after a tick killed between two hours."""

import datetime as dt
import functools

import pytest

from rankings.conf import rankings_settings
from rankings.engine.prune import prune
from rankings.engine.recompute import snapshots_recompute
from rankings.engine.shards import Layout, active
from rankings.models import Sale, Snapshot, SnapshotMark
from rankings.operations import backfill
from rankings.operations.status import status_read

from .processes import django_env, python
from .rankings_helpers import START, Shop

HOUR = 3600


def _stored() -> dict:
    """The active version's snapshots."""
    return {
        (int(at.timestamp()), window, metric, category): products
        for at, window, metric, category, products in Snapshot.objects.filter(
            version=active().number
        ).values_list("at", "window", "metric", "category", "products")
    }


def _last_sale_id() -> int:
    return Sale.objects.order_by("-id").values_list("id", flat=True).first() or 0


def _hours(first: dt.datetime, last: dt.datetime) -> list[int]:
    return list(range(int(first.timestamp()), int(last.timestamp()) + 1, HOUR))


def _assert_marked(hours: list[int]):
    shards = rankings_settings.SHARDS
    assert set(SnapshotMark.objects.values_list("shard", "at")) == {
        (s, dt.datetime.fromtimestamp(h, dt.UTC)) for s in range(shards) for h in hours
    }


@pytest.mark.django_db(transaction=True)
def test_a_late_tick_snapshots_each_hour_it_crossed_as_of_that_hour():
    """A tick three and a half hours late: each hour holds the sales counted by then, and a sale of
    ten minutes after an hour is not in that hour's snapshot though the same tick claims it."""
    shop = Shop()
    shop.send(shop.sale("p1", categories=["toys"], qty=5), shop.sale("p2", categories=["toys"], qty=3))
    shop.tick()  # at 12:00: the first snapshot
    earlier = _last_sale_id()
    shop.advance(hours=3, minutes=30)
    shop.send(
        shop.sale("p3", categories=["toys"], qty=9, ago=dt.timedelta(hours=3, minutes=20)),  # 12:10
        shop.sale("p4", categories=["toys"], qty=1, ago=dt.timedelta(hours=1, minutes=30)),  # 14:00
        shop.sale("p2", categories=["toys"], qty=7, ago=dt.timedelta(minutes=5)),  # 15:25
    )
    shop.tick()  # at 15:30: crosses 13:00, 14:00, 15:00
    shop.assert_exact()
    hours = _hours(START, START + dt.timedelta(hours=3))
    expected = snapshots_recompute(hours=hours[:1], earlier_sale_id=0)
    expected.update(snapshots_recompute(hours=hours[1:], earlier_sale_id=earlier))
    assert _stored() == expected
    _assert_marked(hours)
    at = {h: _stored().get((h, "1d", "units", "toys")) for h in hours}
    assert at[hours[0]] == ["p1", "p2"]
    assert at[hours[1]] == ["p3", "p1", "p2"]  # 12:10's sale, not yet 15:25's
    assert at[hours[2]] == ["p3", "p1", "p2", "p4"]  # 14:00 counts at 14:00
    assert at[hours[3]] == ["p3", "p1", "p2", "p4"]


@pytest.mark.django_db(transaction=True)
def test_snapshots_older_than_32_days_are_pruned():
    shop = Shop()
    shop.send(shop.sale("p1", categories=["toys"], qty=5))
    shop.tick()
    shop.advance(hours=2)
    shop.tick()
    assert Snapshot.objects.filter(at=START).exists()
    shop.advance(days=32, minutes=30)  # START is now 32 days and 2.5 hours behind
    shop.send(shop.sale("p1", categories=["toys"], qty=1))
    shop.tick()
    report = prune()
    assert report.deleted["snapshots"] > 0
    cutoff = shop.now - dt.timedelta(days=32)
    assert not Snapshot.objects.filter(at__lt=cutoff).exists()
    assert not SnapshotMark.objects.filter(at__lt=cutoff).exists()
    assert Snapshot.objects.filter(at__gte=cutoff).exists()


# A tick in a child process that dies (os._exit) when it is about to take, or has just taken, the
# snapshots of its `n`th group of hours (here each hour is a group of its own: every hour has sales
# to step to first); the steps before it are committed.
_CRASHING_TICK = """
import os, datetime as dt, django
django.setup()
from rankings.engine import snapshots, tick

point, n = {point!r}, {n!r}
real_take = snapshots.take
taken = []

def take_then_die(**kwargs):
    if point == "before-snapshot" and len(taken) == n - 1:
        os._exit(9)
    result = real_take(**kwargs)
    taken.append(kwargs["hours"])
    if point == "after-snapshot" and len(taken) == n:
        os._exit(9)
    return result

snapshots.take = take_then_die
tick.tick(now=dt.datetime.fromisoformat({now!r}))
"""


@pytest.mark.processes
@pytest.mark.parametrize("point", ["before-snapshot", "after-snapshot"])
@pytest.mark.django_db(transaction=True)
def test_a_tick_killed_between_two_hours_leaves_no_snapshot_missing_or_wrong(point):
    # given one good tick, then sales in each of the five hours that follow
    shop = Shop()
    shop.send(*[shop.sale(f"p{i}", categories=[f"c{i % 3}"], qty=1 + i) for i in range(6)])
    shop.tick()
    earlier = _last_sale_id()
    shop.advance(hours=5, minutes=30)
    shop.send(
        *[
            shop.sale(f"p{i % 8}", categories=[f"c{i % 3}"], qty=1 + i % 4, ago=dt.timedelta(minutes=11 * i))
            for i in range(30)
        ]
    )
    # when a tick that crosses five hours dies at its third
    child = python(_CRASHING_TICK.format(point=point, n=3, now=shop.now.isoformat()), env=django_env())
    assert child.wait(timeout=60) == 9
    assert SnapshotMark.objects.exclude(at=START).exists(), "the tick died before its first hour"
    # then the next tick takes the rest, and every hour is as of itself
    shop.tick()
    shop.assert_exact()
    hours = _hours(START, START + dt.timedelta(hours=5))
    expected = snapshots_recompute(hours=hours[:1], earlier_sale_id=0)
    expected.update(snapshots_recompute(hours=hours[1:], earlier_sale_id=earlier))
    assert _stored() == expected
    _assert_marked(hours)


@pytest.mark.django_db(transaction=True)
def test_the_status_gives_the_last_snapshot_and_the_store_size(admin_client):
    shop = Shop()
    shop.send(shop.sale("p1", categories=["toys"], qty=5))
    shop.tick()
    shop.advance(hours=2, minutes=5)
    shop.tick()
    summary = status_read()["snapshots"]
    assert summary["lastAt"] == START + dt.timedelta(hours=2)
    assert summary["bytes"] > 0
    reply = admin_client.get("/admin/rankings/rankingversion/status/")
    assert reply.status_code == 200
    assert "Last hourly snapshot" in reply.content.decode()


@pytest.mark.django_db(transaction=True)
def test_snapshots_go_on_across_a_rebuild_and_switch_to_another_shard_count():
    """The rebuilt version's history (from the sales: the hours ticked so far, as the ticks took
    them, no late sale among them) is served from the switch on, and the new layout's shards take
    the next hours, none missing, none twice."""
    shop = Shop()
    shop.send(*[shop.sale(f"p{i}", categories=[f"c{i % 5}"], qty=1 + i) for i in range(10)])
    shop.tick()
    earlier = _last_sale_id()
    shop.advance(hours=1, minutes=30)
    shop.send(
        *[
            shop.sale(f"p{i}", categories=[f"c{i % 3}"], qty=2, ago=dt.timedelta(minutes=9 * i))
            for i in range(10)
        ]
    )
    shop.tick()  # 13:00
    backfill.version_build(layout=Layout(16), activate=True)
    before_switch = _last_sale_id()
    shop.advance(hours=2)
    shop.send(
        *[
            shop.sale(f"p{i}", categories=[f"c{i % 4}"], qty=3, ago=dt.timedelta(minutes=13 * i))
            for i in range(10)
        ]
    )
    shop.tick()  # 14:00 and 15:00, on 16 shards
    shop.assert_exact()
    hours = _hours(START, START + dt.timedelta(hours=3))
    expected = snapshots_recompute(hours=hours[:1], earlier_sale_id=0)
    expected.update(snapshots_recompute(hours=hours[1:2], earlier_sale_id=earlier))
    expected.update(snapshots_recompute(hours=hours[2:], earlier_sale_id=before_switch))
    assert _stored() == expected
    marks = set(SnapshotMark.objects.values_list("shard", "at"))
    instant = functools.partial(dt.datetime.fromtimestamp, tz=dt.UTC)
    assert {(s, instant(h)) for s in range(4) for h in hours[:2]} <= marks
    assert {(s, instant(h)) for s in range(16) for h in hours[2:]} <= marks

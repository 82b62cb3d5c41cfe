"""Rebuild into a new version, compare, switch and switch back: exact, and never a broken read."""

import datetime as dt
import threading

import pytest

from rankings.conf import rankings_settings
from rankings.engine import hourly, store
from rankings.engine.shards import active, shard_count
from rankings.models import RankingVersion
from rankings.operations import backfill, board_stream, compare
from rankings.serving import memory, selectors

from .processes import django_env, python
from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)


def _history(shop: Shop, n: int, tag: str):
    shop.send(
        *[
            shop.sale(
                f"p{i % 11}",
                categories=[f"c{i % 4}"] + ([f"c{(i + 1) % 4}"] if i % 5 == 0 else []),
                qty=1 + i % 4,
                amount=f"{1 + i % 7}.25",
                ago=dt.timedelta(minutes=13 * i),
                event_id=f"{tag}-{i}",
            )
            for i in range(n)
        ]
    )


def test_a_rebuild_sums_windows_of_hours_and_days_from_the_hour_buckets_exact_at_every_bound(settings):
    """Sales, returns, views and wishes exactly on and just off each bound of a window of minutes, of
    hours and of days, and exactly on hours between them; some still queued: every board the
    rebuild writes equals the batch recompute (windows of whole hours are summed from the hour
    buckets, the others by PostgreSQL)."""
    settings.RANKINGS = {
        **settings.RANKINGS,
        "WINDOWS": {"1h": (60, 60), "1d": (3600, 24), "3d": (86400, 3)},
        "SNAPSHOT_WINDOWS": ("1d",),
    }
    shop = Shop(now=dt.datetime(2026, 3, 4, 12, 20, 30, tzinfo=dt.UTC))
    day_start = dt.datetime(2026, 3, 2, tzinfo=dt.UTC)  # the 3-day window's first instant
    bounds = [
        shop.now.replace(minute=0, second=0),  # the hour of the instant: its bucket's start
        shop.now.replace(minute=0, second=0) - dt.timedelta(hours=23),  # the 1-day window's start
        day_start,
        shop.now.replace(second=0) - dt.timedelta(minutes=59),  # the 1-hour window's start
        dt.datetime(2026, 3, 3, 7, tzinfo=dt.UTC),  # an hour in the middle
    ]
    instants = [
        t + d
        for t in bounds
        for d in (dt.timedelta(0), -dt.timedelta(microseconds=1), dt.timedelta(seconds=1))
    ]
    events = []
    for i, t in enumerate(instants):
        ago = shop.now - t
        events.append(
            shop.sale(
                f"p{i % 5}",
                categories=["c1"] if i % 2 else ["c1", "c2"],
                qty=1 + i % 3,
                ago=ago,
                event_id=f"b{i}",
            )
        )
    shop.send(*events)
    shop.send(
        *[
            shop.sale(
                "p0", categories=["c1", "c2"], qty=-1, ago=shop.now - t, returnOf="b0", event_id=f"r{i}"
            )
            for i, t in enumerate(instants[:1])
        ]
    )
    shop.engage(
        *[
            shop.engagement(
                f"p{i % 4}", kind="wish" if i % 3 else "view", categories=["c2"], ago=shop.now - t
            )
            for i, t in enumerate(instants)
        ]
    )
    shop.tick()
    shop.send(shop.sale("p3", categories=["c2"], qty=2, event_id="queued"))  # not claimed yet
    shop.advance(minutes=39, seconds=30)  # counted exactly at the end of the hour the boards are at
    shop.send(shop.sale("p4", categories=["c2"], qty=3, event_id="queued-on-the-hour"))
    # when the rebuild is switched to
    backfill.version_build(activate=True)
    # then every board of every window equals the recompute, before and after the queued sale counts
    shop.assert_exact()
    shop.tick()
    shop.assert_exact()


def test_a_rebuild_keeps_a_sale_whose_queued_return_nets_its_product_to_nothing():
    """A sale claimed and its return still queued at the snapshot: the product nets to nothing in
    the sales, but the live board holds it until the return is claimed, and so must the rebuild's;
    a tick that then claims the return with another sale of it (net nothing) leaves it there."""
    shop = Shop()
    shop.send(shop.sale("p1", categories=["c1"], qty=1, event_id="sold"))
    shop.send(shop.sale("p2", categories=["c1"], qty=2, event_id="other"))
    shop.tick()
    shop.advance(minutes=5)
    shop.send(shop.sale("p1", categories=["c1"], qty=-1, returnOf="sold", event_id="returned"))
    # when a rebuild whose snapshot holds the return unclaimed is switched to
    backfill.version_build(activate=True)
    # then it holds the sale, as the live version did, before and after a tick that nets nothing
    shop.assert_exact()
    shop.send(shop.sale("p1", categories=["c1"], qty=1, event_id="again"))
    shop.tick()
    shop.assert_exact()
    assert ("p1", 1.0) in shop.top("c1", window="1d")


def test_a_rebuild_during_ingestion_and_ticks_equals_the_live_version_after_switch_over():
    # given a live version with history
    shop = Shop()
    _history(shop, 200, "old")
    shop.tick()
    # when sales and ticks go on while the rebuild runs
    stop = threading.Event()
    errors = []

    def keep_selling():
        from django.db import connection

        try:
            other = Shop(now=shop.now)
            n = 0
            while not stop.is_set():
                n += 1
                other.send(other.sale(f"p{n % 13}", categories=["c1"], qty=1, event_id=f"during-{n}"))
                other.advance(seconds=7)
                other.tick()
        except Exception as error:  # surfaced below
            errors.append(error)
        finally:
            connection.close()

    seller = threading.Thread(target=keep_selling)
    seller.start()
    try:
        version = backfill.version_build()
    finally:
        stop.set()
        seller.join()
    assert not errors, errors
    assert version.state == RankingVersion.State.READY
    # then after the switch every board equals the recompute, and the comparison shows no difference
    differing = [c for c in compare.versions_compare(number=version.number) if not c.equal]
    assert differing == []
    backfill.version_switch(number=version.number)
    assert store.served_version(fresh=True) == version.number
    report = Shop().assert_exact()
    assert report.members > 0


def test_a_reader_never_sees_a_missing_empty_or_mixed_board_during_the_switch():
    shop = Shop()
    _history(shop, 120, "old")
    shop.tick()
    expected = selectors.board_top(category="c0", window="30d", metric="units", limit=50, offset=0).items
    version = backfill.version_build()
    answers, stop = [], threading.Event()

    def read():
        from django.db import connection

        while not stop.is_set():
            memory.forget_all("answers")
            answers.append(
                selectors.board_top(category="c0", window="30d", metric="units", limit=50, offset=0)
            )
        connection.close()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        backfill.version_switch(number=version.number)
        store.versions.active_read.clear()
        for _ in range(50):  # keep reading past the readers' version cache
            if len(answers) > 200:
                break
            threading.Event().wait(0.05)
    finally:
        stop.set()
        reader.join()
    assert len(answers) > 10
    assert all(a.items == expected for a in answers)


def test_switching_back_restores_the_old_version_caught_up():
    shop = Shop()
    _history(shop, 60, "old")
    shop.tick()
    version = backfill.version_build(activate=True)
    shop.advance(minutes=30)
    _history(shop, 30, "after-switch")
    shop.tick()
    backfill.version_switch(number=1)
    assert store.served_version(fresh=True) == 1
    shop.assert_exact()
    assert RankingVersion.objects.get(number=version.number).state == RankingVersion.State.RETIRED


_CRASHING_BUILD = """
import os, django
django.setup()
from rankings.operations import backfill
from rankings.conf import rankings_settings
from rankings.engine import hourly, store
real = store.boards_swap
done = []
def swap_then_die(load, **kwargs):
    real(load, **kwargs)
    done.append(kwargs["shard"])
    if len(done) == 2:
        os._exit(9)
store.boards_swap = swap_then_die
backfill.version_build()
"""


def test_a_crash_in_the_middle_of_a_rebuild_leaves_the_live_version_untouched():
    shop = Shop()
    _history(shop, 80, "old")
    shop.tick()
    child = python(_CRASHING_BUILD, env=django_env())
    assert child.wait(timeout=60) == 9
    half_built = RankingVersion.objects.get(state=RankingVersion.State.BUILDING)
    assert backfill.versions_fail_abandoned() == [half_built.number]
    half_built.refresh_from_db()
    assert half_built.state == RankingVersion.State.FAILED
    assert store.generation_get(half_built.number) is None
    assert store.served_version(fresh=True) == 1
    shop.assert_exact()


def test_retired_versions_are_deleted_after_the_grace_period(settings):
    shop = Shop()
    _history(shop, 20, "old")
    shop.tick()
    backfill.version_build(activate=True)
    assert backfill.versions_expire() == []
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=rankings_settings.VERSION_GRACE_SECONDS + 1)
    assert backfill.versions_expire(now=later) == [1]
    assert store.generation_get(1) is None
    with pytest.raises(backfill.VersionError):
        backfill.version_switch(number=1)


def test_a_switch_back_during_expiry_never_deletes_the_active_version(monkeypatch, settings):
    # given version 2 active and version 1 retired longer ago than the grace period
    shop = Shop()
    _history(shop, 20, "old")
    shop.tick()
    backfill.version_build(activate=True)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=rankings_settings.VERSION_GRACE_SECONDS + 1)
    # when an operator switches back to version 1 after expiry listed it and before it deletes it
    real_delete = store.version_delete
    switches, outcomes = [], []

    def switch_back():
        from django.db import connection

        try:
            backfill.version_switch(number=1)
            outcomes.append("switched")
        except backfill.VersionError as error:
            outcomes.append(str(error))
        finally:
            connection.close()

    def switch_back_then_delete(number):
        switch = threading.Thread(target=switch_back)
        switch.start()
        switches.append(switch)
        switch.join(timeout=3)  # the switch finishes here unless expiry holds it off
        return real_delete(number)

    monkeypatch.setattr(store, "version_delete", switch_back_then_delete)
    backfill.versions_expire(now=later)
    for switch in switches:
        switch.join()
    # then whichever version is active is whole in Redis and serves exact boards
    served = store.served_version(fresh=True)
    assert active().number == served
    assert store.generation_get(served) is not None
    shop.assert_exact()


def test_a_ready_version_never_switched_to_is_deleted_after_its_keep(settings):
    # given a rebuilt version that nobody switched to
    shop = Shop()
    _history(shop, 20, "old")
    shop.tick()
    ready = backfill.version_build()
    # when expiry runs within the keep, then it stays
    assert backfill.versions_expire() == []
    assert store.generation_get(ready.number) is not None
    # when expiry runs after the keep, then it is deleted; the active version is not
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=rankings_settings.VERSION_READY_KEEP_SECONDS + 1)
    assert backfill.versions_expire(now=later) == [ready.number]
    assert RankingVersion.objects.get(number=ready.number).state == RankingVersion.State.DELETED
    assert store.generation_get(ready.number) is None
    assert store.generation_get(1) is not None
    shop.assert_exact()
    # and a deleted version cannot be switched to
    with pytest.raises(backfill.VersionError):
        backfill.version_switch(number=ready.number)


def test_expiry_deletes_the_keys_left_by_failed_versions_and_dead_rebuilds(redis_client):
    # given a failed version whose keys Redis still holds (its cleanup could not reach Redis),
    # and a temporary board without a TTL (left by a rebuild of an older release)
    shop = Shop()
    _history(shop, 20, "old")
    shop.tick()
    RankingVersion.objects.create(number=7, state=RankingVersion.State.FAILED, shards=shard_count())
    store.generation(7)
    store.shard_replace(
        version=7, shard=0, seq=1, as_of=1.0, gen="g", boards={("7d", "units", "x"): {"p": 1}}
    )
    prefix = settings_prefix()
    leaked = f"{prefix}:v1:{{s0}}:b:7d:units:x:rebuild:dead"
    running = f"{prefix}:v1:{{s0}}:b:7d:units:y:rebuild:live"
    redis_client.zadd(leaked, {"p": -1})
    redis_client.zadd(running, {"p": -1})
    redis_client.expire(running, 600)
    # when expiry runs
    backfill.versions_expire()
    # then the failed version's keys and the leaked temporary key are gone; a running rebuild's stays
    assert list(redis_client.scan_iter(f"{prefix}:v7:*")) == []
    assert not redis_client.exists(leaked)
    assert redis_client.exists(running)
    assert store.generation_get(1) is not None
    shop.assert_exact()


def settings_prefix() -> str:
    from rankings.conf import rankings_settings

    return rankings_settings.KEY_PREFIX


def test_a_rebuild_written_in_many_small_pieces_from_both_connections_is_exact(monkeypatch):
    # given a live version with history, some of it not yet claimed by a tick
    shop = Shop()
    _history(shop, 120, "old")
    shop.tick()
    _history(shop, 15, "pending")
    # when the rebuild splits the categories' sums in many parts by product, adds up and writes
    # every few rows, so that each board arrives in several pieces, some of them side by side
    monkeypatch.setattr(backfill, "PARTS", 5)
    monkeypatch.setattr(board_stream, "WRITE_ROWS", 3)
    monkeypatch.setattr(hourly, "TOTALS_ROWS", 2)  # the boards of whole hours added up two rows at a time
    version = backfill.version_build(activate=True)
    # then it counted every sale stored, and after the switch every board equals the recompute
    assert version.sales == 135
    assert store.served_version(fresh=True) == version.number
    shop.tick()
    shop.assert_exact()

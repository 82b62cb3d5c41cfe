"""The tick's liveness and safety: a failing shard is isolated, a switch is never undone,
one window transition never becomes one unbounded step."""

import datetime as dt
from contextlib import contextmanager

import pytest
import redis
from django.db import connection
from django.utils import timezone

from rankings.conf import rankings_settings
from rankings.engine import locks, store
from rankings.engine.shards import ALL, active, shard_of
from rankings.models import Batch, PendingSale, ShardState
from rankings.operations import backfill
from rankings.operations.status import status_read

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)


def _slug_on_a_shard(prefix: str, avoid: set[int]) -> str:
    for i in range(1000):
        slug = f"{prefix}{i}"
        if shard_of(slug, active().layout) not in avoid:
            return slug
    raise AssertionError("no slug found")


@pytest.fixture
def categories():
    """A category on a shard of its own (not the one of `all`), and one on another shard."""
    all_shard = shard_of(ALL, active().layout)
    poison = _slug_on_a_shard("poison", {all_shard})
    healthy = _slug_on_a_shard("healthy", {shard_of(poison, active().layout)})
    return poison, healthy


@contextmanager
def _buckets_refusing(category: str):
    """A real database error for every fold of the category's sales: a CHECK on the bucket table."""
    assert category.isalnum()
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE rankings_bucket ADD CONSTRAINT poison_check CHECK (category <> '{category}') NOT VALID"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE rankings_bucket DROP CONSTRAINT IF EXISTS poison_check")


def _backoff_elapsed(shard: int) -> None:
    ShardState.objects.filter(shard=shard).update(retry_at=timezone.now() - dt.timedelta(seconds=1))


def _backoff_pending(shard: int) -> None:
    """The shard's retry time a minute away: its first wait is seconds, which a loaded machine can
    spend on the checks between two ticks."""
    ShardState.objects.filter(shard=shard).update(retry_at=timezone.now() + dt.timedelta(minutes=1))


def test_a_shard_whose_fold_fails_is_isolated_retried_with_backoff_and_recovers_exactly(categories):
    """Given a shard whose batch raises a database error, a tick still advances every other shard
    exactly; the failing one is rolled back, reported with its error and a growing backoff,
    is not retried before its time, and ticks exactly once the cause is gone."""
    poison, healthy = categories
    poison_shard = shard_of(poison, active().layout)
    shop = Shop()
    shop.send(shop.sale("a", categories=[poison, healthy], qty=2), shop.sale("b", categories=[healthy]))
    shop.tick()
    shop.advance(minutes=5)
    shop.send(shop.sale("c", categories=[poison, healthy], qty=4), shop.sale("d", categories=[healthy]))

    with _buckets_refusing(poison):
        # when
        before = timezone.now()
        report = shop.tick()
        after = timezone.now()
        # then the other shards advanced and are exact
        assert report.failed_shards == [poison_shard]
        for state in ShardState.objects.exclude(shard=poison_shard):
            assert state.as_of == shop.now
            assert state.failures == 0
        assert not PendingSale.objects.exclude(shard=poison_shard).exists()
        assert shop.top(healthy) == [("c", 4), ("a", 2), ("b", 1), ("d", 1)]
        assert shop.top(ALL, window="1h") == [("c", 4), ("a", 2), ("b", 1), ("d", 1)]
        shop.assert_exact()
        # and the failing one was rolled back and is reported with a backoff
        failing = ShardState.objects.get(shard=poison_shard)
        assert failing.as_of == shop.now - dt.timedelta(minutes=5)
        assert PendingSale.objects.filter(shard=poison_shard).count() == 1
        assert shop.top(poison) == [("a", 2)]
        assert failing.failures == 1 and "poison_check" in failing.last_error
        first_wait = rankings_settings.SHARD_RETRY_SECONDS
        assert before + dt.timedelta(seconds=first_wait) <= failing.retry_at
        assert failing.retry_at <= after + dt.timedelta(seconds=first_wait)
        [reported] = status_read()["failingShards"]
        assert reported == {
            "shard": poison_shard,
            "failures": 1,
            "error": failing.last_error,
            "retryAt": failing.retry_at,
        }

        # when ticked again before its retry time, the shard is left alone
        _backoff_pending(poison_shard)
        shop.advance(minutes=1)
        report = shop.tick()
        assert report.failed_shards == [] and report.backing_off_shards == [poison_shard]
        assert ShardState.objects.get(shard=poison_shard).failures == 1

        # when retried and failing again, the wait doubles
        _backoff_elapsed(poison_shard)
        before = timezone.now()
        report = shop.tick()
        failing = ShardState.objects.get(shard=poison_shard)
        assert report.failed_shards == [poison_shard] and failing.failures == 2
        assert failing.retry_at >= before + dt.timedelta(seconds=2 * first_wait)

    # when the cause is gone and the backoff has elapsed
    _backoff_elapsed(poison_shard)
    shop.advance(minutes=1)
    report = shop.tick()
    # then the shard catches up exactly and is no longer reported
    assert report.failed_shards == []
    recovered = ShardState.objects.get(shard=poison_shard)
    assert (recovered.failures, recovered.last_error, recovered.retry_at) == (0, "", None)
    assert recovered.as_of == shop.now
    assert not PendingSale.objects.exists()
    assert shop.top(poison) == [("c", 4), ("a", 2)]
    assert status_read()["failingShards"] == []
    shop.assert_exact()


def test_an_overflowing_fold_fails_only_its_shard(categories):
    """Given a bucket near the bigint limit (written behind the engine's back), a sale whose fold
    overflows it fails only that shard; the others tick."""
    poison, healthy = categories
    poison_shard = shard_of(poison, active().layout)
    shop = Shop()
    shop.send(shop.sale("a", categories=[poison], amount="1.00"), shop.sale("b", categories=[healthy]))
    shop.tick()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE rankings_bucket SET revenue_cents = 9223372036854775000 WHERE category = %s", [poison]
        )
    shop.send(shop.sale("a", categories=[poison], amount="99.00"), shop.sale("e", categories=[healthy]))

    report = shop.tick()

    assert report.failed_shards == [poison_shard]
    assert "out of range" in ShardState.objects.get(shard=poison_shard).last_error
    assert shop.top(healthy) == [("b", 1), ("e", 1)]
    assert not PendingSale.objects.exclude(shard=poison_shard).exists()


def test_a_redis_error_in_one_shard_leaves_its_batch_for_the_retry(categories, monkeypatch):
    """Given Redis refusing one shard's batch, the other shards apply theirs; the committed batch
    is replayed once the shard is retried, and boards are exact."""
    poison, healthy = categories
    poison_shard = shard_of(poison, active().layout)
    shop = Shop()
    shop.send(shop.sale("a", categories=[poison], qty=3), shop.sale("b", categories=[healthy], qty=2))
    real_apply = store.batch_apply

    def refuse_one_shard(**kwargs):
        if kwargs["shard"] == poison_shard:
            raise redis.ConnectionError("connection reset by peer")
        return real_apply(**kwargs)

    monkeypatch.setattr(store, "batch_apply", refuse_one_shard)
    report = shop.tick()
    assert report.failed_shards == [poison_shard]
    assert Batch.objects.filter(shard=poison_shard, applied=False).count() == 1
    assert shop.top(healthy) == [("b", 2)]

    monkeypatch.setattr(store, "batch_apply", real_apply)
    _backoff_elapsed(poison_shard)
    report = shop.tick()
    assert report.failed_shards == [] and report.rebuilt_shards == 0
    assert shop.top(poison) == [("a", 3)]
    assert not Batch.objects.filter(applied=False).exists()
    shop.assert_exact()


def test_the_admin_status_page_lists_failing_shards(admin_client, categories):
    poison, _ = categories
    shop = Shop()
    shop.send(shop.sale("a", categories=[poison]))
    with _buckets_refusing(poison):
        shop.tick()
    page = admin_client.get("/admin/rankings/rankingversion/status/").content.decode()
    assert "Failing shards" in page and "poison_check" in page


# --- a switch-over during a tick -----------------------------------------------------------------------


def test_a_switch_committed_after_a_tick_started_gets_the_ticks_batches():
    """Given a version switch that commits after a tick began but before it locked its first shard,
    the tick writes to the new version and the readers' pointer stays on it."""
    shop = Shop()
    shop.send(shop.sale("p1", qty=2))
    shop.tick()
    version = backfill.version_build()
    shop.advance(minutes=1)
    shop.send(shop.sale("p2", qty=3))
    real_lock = locks.shard_try_lock
    switched = []

    @contextmanager
    def switch_first(shard):
        if not switched:
            switched.append(backfill.version_switch(number=version.number))
        with real_lock(shard) as acquired:
            yield acquired

    locks.shard_try_lock = switch_first
    try:
        shop.tick()
    finally:
        locks.shard_try_lock = real_lock

    assert store.served_version(fresh=True) == version.number
    assert shop.top() == [("p2", 3), ("p1", 2)]
    shop.assert_exact()


@pytest.mark.parametrize("direction", ["forward", "back"])
def test_a_tick_that_read_the_version_before_a_switch_never_moves_the_pointer_back(direction, monkeypatch):
    """Given a switch (to a newer version, or back to an older number) that commits after a tick read
    the active version, the pointer names the switched-to version afterwards."""
    shop = Shop()
    shop.send(shop.sale("p1", qty=2))
    shop.tick()
    version = backfill.version_build(activate=direction == "back")
    target = version.number if direction == "forward" else 1
    real_ensure = store.active_ensure
    switched = []

    def switch_then_ensure(*args, **kwargs):
        if not switched:
            switched.append(backfill.version_switch(number=target))
        return real_ensure(*args, **kwargs)

    monkeypatch.setattr(store, "active_ensure", switch_then_ensure)
    shop.advance(minutes=1)
    shop.tick()

    assert switched
    assert store.served_version(fresh=True) == target
    monkeypatch.setattr(store, "active_ensure", real_ensure)
    shop.tick()
    assert store.served_version(fresh=True) == target
    shop.assert_exact()


def test_the_pointer_is_restored_when_redis_lost_it():
    shop = Shop()
    shop.send(shop.sale("p1", qty=2))
    version = backfill.version_build(activate=True)
    store.patient().delete(store.active_key())
    store.reset_clients()
    shop.tick()
    assert store.served_version(fresh=True) == version.number
    shop.assert_exact()


# --- bounded steps ------------------------------------------------------------------------------------


@pytest.fixture
def small_steps(settings):
    settings.RANKINGS = {**settings.RANKINGS, "MAX_BATCH_CHANGES": 7}
    return 7


def test_a_large_transition_is_applied_in_bounded_steps_exactly(small_steps):
    """Given 20 products that all leave every window at once, the transition is recorded as several
    batches of at most MAX_BATCH_CHANGES changes with consecutive sequence numbers; only the last
    one carries the new instant; boards equal the recompute."""
    shop = Shop()
    shop.send(*[shop.sale(f"p{i:02}", categories=["toys"], qty=1 + i, amount="2.50") for i in range(20)])
    shop.tick()
    shard = shard_of("toys", active().layout)
    seq_before = ShardState.objects.get(shard=shard).seq
    old_now = shop.now
    shop.advance(days=31)

    shop.tick()

    batches = list(Batch.objects.filter(shard=shard, seq__gt=seq_before).order_by("seq"))
    assert len(batches) > 1
    assert [b.seq for b in batches] == list(range(seq_before + 1, seq_before + 1 + len(batches)))
    assert all(len(b.changes) <= small_steps for b in batches)
    # 20 products x 2 metrics x 4 windows, each leaving its board once
    assert sum(len(b.changes) for b in batches) == 20 * 2 * 4
    assert [b.as_of for b in batches] == [old_now] * (len(batches) - 1) + [shop.now]
    assert all(b.applied for b in batches)
    assert float(store.shard_state(1, shard)["asof"]) == shop.now.timestamp()
    assert shop.top() == []
    shop.assert_exact()

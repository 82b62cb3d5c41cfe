"""The tick woken when sales commit: what it sends, when it sends nothing, and the race with a running tick.

A commit sends the tick of each group of shards its sales are queued for, unless that
group's woken tick is pending already; the woken tick lifts the mark when it starts, and
after ticking wakes again any of its shards that received sales meanwhile. The real
processes (a worker without a beat) are at the end.
"""

import threading
import time

import pytest
from celery import current_app
from django.db import connection, transaction
from django.utils import timezone

from rankings import tasks
from rankings.engine import batches, partitions, store
from rankings.engine import tick as ticks
from rankings.engine.shards import ALL, Layout, shard_of
from rankings.models import PendingSale

from .rankings_helpers import Shop

QUEUES = ["q:ticks.0", "q:ticks.1", "q:ticks.2", "q:ticks.3"]


@pytest.fixture
def wake(settings):
    # A new dict: the settings fixture restores attributes, not changes inside them.
    settings.RANKINGS = {**settings.RANKINGS, "TICK_WAKE": True}


@pytest.fixture(autouse=True)
def _partitions_forgotten(monkeypatch):
    """Commit callbacks run inside the test's transaction would leave the partitions it created (and
    rolls back) remembered as existing: this test's are forgotten with it."""
    monkeypatch.setattr(partitions, "_known", set())


@pytest.fixture
def sent(monkeypatch):
    """The woken tick tasks: (queue, shards, woken group), recorded instead of sent."""
    calls = []

    def send_task(name, *, kwargs, queue, expires):
        assert name == tasks.tick_shards.name
        calls.append((queue, kwargs["shards"], kwargs.get("woken")))

    monkeypatch.setattr(current_app, "send_task", send_task)
    return calls


def _pending() -> set[int]:
    return set(PendingSale.objects.values_list("shard", flat=True))


@pytest.mark.django_db
def test_a_burst_of_commits_sends_one_tick_per_group_of_their_shards(
    settings, wake, sent, django_capture_on_commit_callbacks
):
    # given 4 shards over 4 tick queues: toys, books and `all` live in three of them
    settings.RANKINGS = {**settings.RANKINGS, "TICK_QUEUES": QUEUES}
    toys, books, every = (shard_of(slug, Layout(4)) for slug in ("toys", "books", ALL))
    assert len({toys, books, every}) == 3
    shop = Shop()
    # when five batches of sales in toys and books commit one after another
    for _ in range(5):
        with django_capture_on_commit_callbacks(execute=True):
            shop.send(shop.sale("p1", categories=["toys"]), shop.sale("p2", categories=["books"]))
    # then each of the three groups was sent one tick, on its own queue, and the fourth none
    assert sorted(sent) == sorted((QUEUES[s], [s], s) for s in (toys, books, every))


@pytest.mark.django_db
def test_nothing_is_sent_when_nothing_is_stored_or_the_transaction_rolls_back(
    wake, sent, django_capture_on_commit_callbacks
):
    shop = Shop()
    first = shop.sale("p1")
    with django_capture_on_commit_callbacks(execute=True):
        shop.send(first)
    assert len(sent) == 1
    store.wake_release(0)  # as the woken tick does when it starts
    # a batch of duplicates only stores nothing: no wake
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        shop.send(first)
    assert callbacks == []
    # sales whose transaction rolls back wake nothing
    with (
        django_capture_on_commit_callbacks(execute=True) as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        shop.send(shop.sale("p2"))
        raise RuntimeError("rolled back")
    assert callbacks == [] and len(sent) == 1


@pytest.mark.django_db
def test_a_quiet_system_sends_nothing(wake, sent):
    """No sale: the beat's ticks tick, and nothing is woken (no spinning)."""
    shop = Shop()
    for _ in range(3):
        tasks.tick_shards(shards=[0, 1, 2, 3])
    assert sent == []
    assert shop.top("toys") == []


@pytest.mark.django_db
def test_a_woken_tick_lifts_its_mark_so_the_next_commit_wakes_again(
    wake, sent, django_capture_on_commit_callbacks
):
    shop = Shop()
    with django_capture_on_commit_callbacks(execute=True):
        shop.send(shop.sale("p1"))
    assert sent == [(tasks.rankings_settings.TICK_QUEUES[0], [0, 1, 2, 3], 0)]
    # while that tick waits in its queue, another commit sends nothing
    with django_capture_on_commit_callbacks(execute=True):
        shop.send(shop.sale("p2"))
    assert len(sent) == 1
    # when it runs, it counts both, and a commit after it started wakes the group again
    tasks.tick_shards(shards=[0, 1, 2, 3], woken=0)
    assert _pending() == set()
    with django_capture_on_commit_callbacks(execute=True):
        shop.send(shop.sale("p3"))
    assert len(sent) == 2


@pytest.mark.django_db(transaction=True)
def test_a_sale_committed_while_its_shards_tick_runs_is_woken_after_it(wake, sent, monkeypatch):
    """The race: a sale commits after the running tick's last claim of its shard; its wake reaches
    another worker while the running tick still holds the shard, and that worker skips it as busy.
    The running tick, once it has let the shard go, finds the sale and wakes the group again."""
    shop = Shop(now=timezone.now())
    every = shard_of(ALL, Layout(4))
    reports = {}  # thread name: the report of the tick it ran
    real_tick, real_tick_shard = ticks.tick, batches.tick_shard

    def recording_tick(**kwargs):
        report = real_tick(**kwargs)
        reports[threading.current_thread().name] = report
        return report

    def other_worker(shards, woken):
        try:  # a connection of its own, so the running tick's lock is held against it
            tasks.tick_shards(shards=shards, woken=woken)
        finally:
            connection.close()

    def tick_shard_then_a_sale_commits(*, state, **kwargs):
        real_tick_shard(state=state, **kwargs)
        if state.shard == every and "other" not in reports:
            shop.send(shop.sale("late", categories=["toys"]))  # autocommit: woken at once
            _, shards, woken = sent[-1]
            worker = threading.Thread(target=other_worker, args=(shards, woken), name="other")
            worker.start()
            worker.join()

    monkeypatch.setattr(ticks, "tick", recording_tick)
    monkeypatch.setattr(batches, "tick_shard", tick_shard_then_a_sale_commits)
    shop.send(shop.sale("first", categories=["toys"]))
    assert len(sent) == 1
    tasks.tick_shards(shards=[0, 1, 2, 3], woken=0)
    # the premise: the late sale woke another worker, which found the shard of `all` busy
    assert len(sent) >= 2 and every in reports["other"].busy_shards
    assert every in reports["MainThread"].ticked_shards
    # then the running tick woke the group again when it was done, and that tick counts the sale
    assert len(sent) == 3, sent
    monkeypatch.setattr(batches, "tick_shard", real_tick_shard)
    assert every in _pending()
    _, shards, woken = sent[-1]
    tasks.tick_shards(shards=shards, woken=woken)
    assert _pending() == set()
    assert dict(shop.top("toys", window="1h")) == {"first": 1, "late": 1}
    shop.assert_exact()


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_committed_sale_is_visible_without_a_beat(tmp_path, wake):
    """A worker and no beat: only the wake can make the sale visible."""
    from . import processes

    env = processes.django_env(RANKINGS_TICK_WAKE="1")
    worker = processes.celery_worker(tmp_path, env, args=["--without-mingle", "--without-gossip"])
    try:
        shop = Shop(now=timezone.now())
        posted = time.monotonic()
        shop.send(shop.sale("woken", categories=["toys"]))
        processes.wait_until(
            lambda: shop.top("toys", window="1h") == [("woken", 1)],
            timeout=10,
            what="the woken tick to count the sale",
            watch=[worker],
        )
        print(f"visible after {time.monotonic() - posted:.2f} s")
        assert _pending() == set()
    finally:
        processes.stop_all([worker])

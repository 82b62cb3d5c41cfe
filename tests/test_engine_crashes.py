"""Crash safety: a tick process really killed at chosen points, concurrent ticks, lost Redis.

The histories mix sales with engagement events (views and wishes, with and
without ids). After each fault, one normal tick must leave every board of every
metric equal to the recompute.
"""

import signal
import subprocess

import pytest

from rankings.engine import store
from rankings.models import Batch, PendingEngagement, PendingSale, ShardState

from .processes import django_env, manage, python, wait_until
from .rankings_helpers import Shop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

# Runs one tick in a child process whose hook calls os._exit at the chosen point.
_CRASHING_TICK = """
import os, datetime as dt, django
django.setup()
from rankings.engine import batches, tick
from rankings.engine import store

point = {point!r}
real_apply = store.batch_apply
real_shard = batches.tick_shard
shards_done = []
applied = []

def apply_then_die(**kwargs):
    if point == "after-postgres-commit":
        os._exit(9)
    result = real_apply(**kwargs)
    applied.append(kwargs["seq"])
    if point == "after-redis-apply" or (point == "between-steps" and len(applied) == 2):
        os._exit(9)
    return result

def shard_then_die(**kwargs):
    if point == "between-shards" and shards_done:
        os._exit(9)
    real_shard(**kwargs)
    shards_done.append(kwargs["state"].shard)

store.batch_apply = apply_then_die
batches.tick_shard = shard_then_die
tick.tick(now=dt.datetime.fromisoformat({now!r}))
"""


def _history(shop: Shop, n: int = 60):
    shop.send(
        *[
            shop.sale(
                f"p{i % 7}", categories=[f"c{i % 5}", f"c{(i + 2) % 5}"], qty=1 + i % 3, ago=shop_ago(i)
            )
            for i in range(n)
        ]
    )
    shop.engage(
        *[
            shop.engagement(
                f"p{i % 9}",
                kind="wish" if i % 4 == 0 else "view",
                categories=[f"c{i % 5}"],
                ago=shop_ago(i // 3),
                event_id=f"v{shop.now.timestamp():.0f}-{i}" if i % 2 else None,
            )
            for i in range(3 * n)
        ]
    )


def _locks_of_the_dead_released() -> None:
    """Wait until PostgreSQL has ended the killed process's sessions: until then their shard locks
    are held, and the next tick skips those shards as busy (on a loaded machine, a while)."""
    from django.db import connection

    def released():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
            )
            return cursor.fetchone()[0]

    wait_until(released, timeout=30, what="the killed tick's sessions ended")


def shop_ago(i):
    import datetime as dt

    return dt.timedelta(minutes=7 * i)


# (boards split, shards ticked side by side in threads as over a backlog)
@pytest.mark.parametrize(("split", "threads"), [("", 1), ("all:3,c1:2", 1), ("", 2)])
@pytest.mark.parametrize("point", ["after-postgres-commit", "after-redis-apply", "between-shards"])
def test_a_tick_killed_at_any_point_is_made_good_by_the_next(point, split, threads, settings):
    # given a history, one good tick, and more sales (with boards split, or not)
    settings.RANKINGS = {**settings.RANKINGS, "SPLIT": split}
    shop = Shop()
    _history(shop)
    shop.tick()
    shop.advance(hours=2)
    _history(shop, 30)
    # when a tick process dies at the chosen point
    env = django_env(RANKINGS_TICK_THREADS=threads, rankings={"TICK_PARALLEL_FROM": 1})
    child = python(_CRASHING_TICK.format(point=point, now=shop.now.isoformat()), env=env)
    assert child.wait(timeout=60) == 9
    _locks_of_the_dead_released()
    if point != "between-shards":
        assert Batch.objects.filter(applied=False).exists()
    # then the next normal tick replays what was committed (no rebuild) and every board is exact
    report = shop.tick()
    assert report.rebuilt_shards == 0
    assert not Batch.objects.filter(applied=False).exists()
    assert not PendingSale.objects.exists()
    assert not PendingEngagement.objects.exists()
    report = shop.assert_exact()
    assert len(report.as_of) == (9 if split else 4)  # the split boards' parts have shards of their own


def test_a_tick_killed_between_the_steps_of_one_transition_is_replayed_exactly():
    """A transition split into bounded steps (batches of at most 7 changes): the process dies after
    the second step reached Redis; the next tick applies the remaining steps once, in order."""
    shop = Shop()
    shop.send(*[shop.sale(f"p{i:02}", categories=["toys"], qty=1 + i, amount="2.50") for i in range(20)])
    shop.tick()
    shop.advance(days=31)
    env = django_env(rankings={"MAX_BATCH_CHANGES": 7})
    child = python(_CRASHING_TICK.format(point="between-steps", now=shop.now.isoformat()), env=env)
    assert child.wait(timeout=60) == 9
    # the first shard to tick has two of its steps in Redis, the rest committed but not applied,
    # and readers still see its old instant
    left = Batch.objects.filter(applied=False).order_by("seq")
    assert left.count() > 1, "the transition was not split into steps"
    assert float(store.shard_state(1, left[0].shard)["asof"]) < shop.now.timestamp()
    report = shop.tick()
    assert report.rebuilt_shards == 0
    assert not Batch.objects.filter(applied=False).exists()
    shop.assert_exact()


def test_kill_9_of_a_running_rankings_tick():
    """SIGKILL in the middle of a long tick (batches of 20); the next tick repairs everything."""
    shop = Shop()
    _history(shop, 600)
    child = manage(
        "rankings_tick",
        "--now",
        shop.now.isoformat(),
        env=django_env(rankings={"BATCH_SIZE": 20}),
        stdout=subprocess.DEVNULL,
    )
    # wait until it has committed some batches (or ended), then kill it mid-stream
    wait_until(
        lambda: ShardState.objects.filter(seq__gt=3).exists() or child.poll() is not None,
        timeout=30,
        what="the tick to commit a few batches",
    )
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
    assert PendingSale.objects.exists(), "the tick finished before it was killed; make the backlog larger"
    shop.tick()
    shop.assert_exact()


def test_four_concurrent_ticks_never_double_apply():
    shop = Shop()
    _history(shop, 400)
    children = [
        manage(
            "rankings_tick",
            "--now",
            shop.now.isoformat(),
            env=django_env(rankings={"BATCH_SIZE": 25}),
            stdout=subprocess.DEVNULL,
        )
        for _ in range(4)
    ]
    assert [c.wait(timeout=120) for c in children] == [0, 0, 0, 0]
    shop.tick()  # covers shards that every child found busy
    assert not PendingSale.objects.exists()
    shop.assert_exact()

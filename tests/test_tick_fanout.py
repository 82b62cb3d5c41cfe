"""The tick fanned out over queues: which shards each task ticks, and `rankings_tick --shards`.

The beat's tick sends the tick of shard s to queue s mod the queue count, with the
active version's shard count; each task ticks only its shards, skipping one the
active version does not have (it was resharded between the sending and the run).
The real processes (workers on different queues at once) are in test_tick_workers.
"""

import datetime as dt
import os
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from rankings import tasks
from rankings.engine import batches
from rankings.engine.shards import ALL, Layout, shard_of
from rankings.engine.tick import ClockWentBackwards, tick
from rankings.models import PendingSale, ShardState, TickLog

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db

QUEUES = ["q:ticks.0", "q:ticks.1", "q:ticks.2", "q:ticks.3"]


def _settings(settings, **rankings) -> None:
    # A new dict: the settings fixture restores attributes, not changes inside them.
    settings.RANKINGS = {**settings.RANKINGS, **rankings}


@pytest.fixture
def sent(monkeypatch):
    """The tick tasks the beat's tick sends: (queue, shards, expires), instead of sending them."""
    calls = []

    def apply_async(*, kwargs, queue, expires):
        calls.append((queue, kwargs["shards"], expires))

    monkeypatch.setattr(tasks.tick_shards, "apply_async", apply_async)
    return calls


@pytest.mark.django_db(False)
def test_shard_s_goes_to_queue_s_mod_the_queue_count():
    assert tasks.tick_groups(8, QUEUES[:3]) == [
        ("q:ticks.0", [0, 3, 6]),
        ("q:ticks.1", [1, 4, 7]),
        ("q:ticks.2", [2, 5]),
    ]
    assert tasks.tick_groups(4, QUEUES[:1]) == [("q:ticks.0", [0, 1, 2, 3])]
    # a queue left without a shard is sent nothing
    assert tasks.tick_groups(2, QUEUES) == [("q:ticks.0", [0]), ("q:ticks.1", [1])]


def test_the_beats_tick_sends_each_queue_its_shards_of_the_active_version(settings, sent):
    # given an install of 6 shards and 4 tick queues
    _settings(settings, SHARDS=6, TICK_QUEUES=QUEUES, TICK_EXPIRES_SECONDS=6.0)
    # when the beat's tick runs
    tasks.tick()
    # then each queue gets one task with its shards, which expires like the beat's tick
    assert sent == [
        ("q:ticks.0", [0, 4], 6.0),
        ("q:ticks.1", [1, 5], 6.0),
        ("q:ticks.2", [2], 6.0),
        ("q:ticks.3", [3], 6.0),
    ]


def test_with_one_queue_the_beats_tick_sends_every_shard_to_it(settings, sent):
    _settings(settings, TICK_QUEUES=QUEUES[:1])
    tasks.tick()
    assert [(queue, shards) for queue, shards, _ in sent] == [("q:ticks.0", [0, 1, 2, 3])]


def _pending_shards() -> set[int]:
    return set(PendingSale.objects.values_list("shard", flat=True))


def test_a_tick_of_some_shards_leaves_the_others_pending_and_logs_which_it_ticked():
    # given sales in toys and books, which live in two shards other than the one of `all`
    shop = Shop()
    toys, books, every = (shard_of(slug, Layout(4)) for slug in ("toys", "books", ALL))
    assert len({toys, books, every}) == 3
    shop.send(shop.sale("p1", categories=["toys"]), shop.sale("p2", categories=["books"]))
    # when only the shards of toys and `all` tick
    report = tick(now=shop.now, shards=[toys, every])
    # then those are done, books still waits, and the log names what this tick covered
    assert report.ticked_shards == sorted([toys, every])
    assert _pending_shards() == {books}
    assert shop.top("toys") == [("p1", 1)]
    assert shop.top("books") == []
    assert TickLog.objects.get().shards == sorted([toys, every])
    # and a tick of the rest makes every board exact
    shop.advance(seconds=2)
    assert tick(now=shop.now, shards=[books]).ticked_shards == [books]
    assert _pending_shards() == set()
    shop.assert_exact()


def test_the_tick_task_ticks_the_shards_it_is_given():
    shop = Shop()
    toys = shard_of("toys", Layout(4))
    shop.send(shop.sale("p1", categories=["toys"]))
    tasks.tick_shards(shards=[toys])
    assert _pending_shards() == {shard_of(ALL, Layout(4))}
    assert TickLog.objects.get().shards == [toys]


def test_a_shard_beyond_the_count_read_under_its_lock_is_skipped(monkeypatch):
    """The count changed between choosing the shards and taking the lock: the shard is left alone."""
    shop = Shop()
    shop.send(shop.sale("p1", categories=["toys"]))
    # given a tick that chose its shards under a count of 8 while the active version has 4
    monkeypatch.setattr(batches, "shard_count_checked", lambda: 8)
    # when it is asked for shards 3 and 5
    report = tick(now=shop.now, shards=[3, 5])
    # then it ticks 3 and leaves 5 alone: no state, no error
    assert report.ticked_shards == [3]
    assert not report.failed_shards
    assert not ShardState.objects.filter(shard=5).exists()


def test_a_tick_of_some_shards_checks_only_their_clocks():
    """Another machine's clock a little ahead moved other shards on: these shards still tick."""
    shop = Shop()
    toys, books = shard_of("toys", Layout(4)), shard_of("books", Layout(4))
    tick(now=shop.now + dt.timedelta(seconds=1), shards=[toys])
    shop.send(shop.sale("p1", categories=["books"]))
    assert tick(now=shop.now, shards=[books]).ticked_shards == [books]
    with pytest.raises(ClockWentBackwards):
        tick(now=shop.now, shards=[toys])


def test_rankings_tick_shards_ticks_only_those(capsys):
    shop = Shop()
    toys, books = shard_of("toys", Layout(4)), shard_of("books", Layout(4))
    shop.send(shop.sale("p1", categories=["toys"]), shop.sale("p2", categories=["books"]))
    call_command("rankings_tick", "--shards", f"{toys},{toys}")
    assert f"shards ticked: [{toys}]" in capsys.readouterr().out
    assert books in _pending_shards() and toys not in _pending_shards()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("0,x", "not a comma-separated list of shard numbers: '0,x'"),
        ("", "not a comma-separated list of shard numbers: ''"),
        ("0,4", "--shards [4] not among the active version's shards 0 to 3"),
        ("-1,2", "--shards [-1] not among the active version's shards 0 to 3"),
    ],
)
def test_rankings_tick_refuses_shards_that_are_not_the_active_versions(value, error):
    with pytest.raises(CommandError, match=error.replace("[", r"\[").replace("]", r"\]")):
        call_command("rankings_tick", f"--shards={value}")
    assert not TickLog.objects.exists()


@pytest.mark.processes
@pytest.mark.django_db(False)
def test_a_worker_without_queues_consumes_the_default_queue_and_every_tick_queue():
    """What the Procfile's worker consumes, as Celery itself sees it with RANKINGS_TICK_QUEUES=3."""
    code = (
        "from salesrank_site.celery import app; "
        "print(' '.join(sorted(app.amqp.queues.consume_from or app.amqp.queues)))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "salesrank_site.settings", "SECRET_KEY": "test-only-key"}
    env.update(RANKINGS_KEY_PREFIX="shop", RANKINGS_TICK_QUEUES="3", READ_DOT_ENV="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["shop:tasks", "shop:ticks.0", "shop:ticks.1", "shop:ticks.2"]

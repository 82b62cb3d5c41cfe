"""The tick fanned out over real Celery workers consuming different queues.

Each test sends the beat's tick itself (so that it knows how many tick tasks
are out), over a backlog of pending sales worked in small batches, so that a
tick lasts long enough for the workers to tick at the same time. Each test
first proves its premise from the workers' own logs and the tick log (the two
workers really ticked at once, each only its own shards; the third worker took
the shards whose tick was waiting), then that nothing was lost or applied
twice: every board equals the recompute from raw sales, and every shard's
batches are numbered without a gap.
"""

import datetime as dt
import re

import pytest
import redis as redis_lib
from django.utils import timezone

from rankings import tasks
from rankings.conf import rankings_settings
from rankings.ingest.sales import sales_ingest
from rankings.models import Batch, PendingSale, ShardState, TickLog
from salesrank_site.settings import tick_queue_names

from . import processes
from .processes import wait_until
from .rankings_helpers import Shop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

# Pending sales a tick claims per batch: a backlog takes many batches, so a tick lasts.
BATCH_SIZE = 25
# Twelve categories over the four shards: c5, c7 -> 0; c1, c3, c8, c10 (and `all`) -> 1; c4, c6 -> 2; the rest -> 3.
CATEGORIES = 12
# Long enough for the ticks of a backlog on a loaded machine.
DONE_SECONDS = 120  # seconds
TICKED = re.compile(r"ticked shards \[([\d, ]*)\]")


@pytest.fixture
def worker(tmp_path):
    """Starts a Celery worker consuming the given queues, ready; all stopped at the end."""
    env = processes.django_env(rankings={"BATCH_SIZE": BATCH_SIZE}, LOG_LEVEL="INFO")
    quiet = ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    started = []

    def start(name: str, queues: list[str]) -> processes.Process:
        process = processes.celery_worker(tmp_path, env, name=name, queues=queues, args=quiet, wait=False)
        started.append(process)
        return process.wait_ready()

    yield start
    processes.stop_all(started)


def _tick_queues(settings, count: int) -> list[str]:
    """`count` tick queues of this run; a waiting tick does not expire during the test."""
    names = tick_queue_names(rankings_settings.KEY_PREFIX, count)
    settings.RANKINGS = {**settings.RANKINGS, "TICK_QUEUES": names, "TICK_EXPIRES_SECONDS": 600}
    return names


def _sell(count: int, tag: str) -> None:
    """`count` sales of the last hour over every category (and so every shard), pending."""
    now = timezone.now()
    events = [
        {
            "id": f"{tag}-{i}",
            "ts": (now - dt.timedelta(seconds=i % 3600)).isoformat(),
            "productId": f"p{i % 37}",
            "categories": [f"c{i % CATEGORIES}"],
            "qty": 1 + i % 3,
            "amount": "1.50",
        }
        for i in range(count)
    ]
    assert not sales_ingest(events=events, now=now).rejected


def _ticks_done(count: int, *workers: processes.Process) -> None:
    """Wait for the workers to have finished `count` tick tasks in all: a task's last act is its log line."""
    wait_until(
        lambda: sum(len(_ticked(worker)) for worker in workers) >= count,
        timeout=DONE_SECONDS,
        what=f"{count} ticks to finish",
        watch=workers,
    )
    assert TickLog.objects.count() == count


def _ticked(worker: processes.Process) -> list[set[int]]:
    """The shards of each tick the worker ran, from its log."""
    return [
        {int(n) for n in m[1].split(", ") if n}
        for line in worker.lines("ticked shards")
        if (m := TICKED.search(line))
    ]


def _assert_exact_and_gapless() -> None:
    """Everything ticked and applied, every board equal to the recompute, every shard's batches 1..seq."""
    assert not PendingSale.objects.exists()
    assert not Batch.objects.filter(applied=False).exists()
    for shard, seq in ShardState.objects.values_list("shard", "seq"):
        seqs = list(Batch.objects.filter(shard=shard).order_by("seq").values_list("seq", flat=True))
        assert seqs == list(range(1, seq + 1)), f"shard {shard}: batches {seqs} for seq {seq}"
    Shop().assert_exact()


def test_two_workers_on_two_queues_tick_disjoint_shards_at_once(settings, worker):
    # given two tick queues (shards 0 and 2 on the first, 1 and 3 on the second), a worker on each,
    first, second = _tick_queues(settings, 2)
    a = worker("a", [first])
    b = worker("b", [second])
    # and a backlog of sales in every shard
    _sell(1200, "backlog")
    # when the beat's tick is sent
    tasks.tick()
    _ticks_done(2, a, b)
    # then each worker ticked its own shards, and only those
    assert _ticked(a) == [{0, 2}], a.describe()
    assert _ticked(b) == [{1, 3}], b.describe()
    assert sorted(TickLog.objects.values_list("shards", flat=True)) == [[0, 2], [1, 3]]
    # the premise: the two ticks really ran at the same time, for most of the shorter one
    spans = [
        (t.started_at, t.started_at + dt.timedelta(milliseconds=t.duration_ms)) for t in TickLog.objects.all()
    ]
    overlap = min(end for _, end in spans) - max(start for start, _ in spans)
    shorter = min(end - start for start, end in spans)
    print(f"ticks of {[str(end - start) for start, end in spans]}, overlapping {overlap}")
    assert overlap > shorter / 2, f"the ticks hardly overlapped: {spans}"
    # and nothing was lost or applied twice
    _assert_exact_and_gapless()


def test_a_worker_started_later_takes_the_waiting_shards_without_applying_twice(settings, worker):
    # given three tick queues (shards 0 and 3, shard 1, shard 2) and workers on the first two only
    first, second, third = _tick_queues(settings, 3)
    a = worker("a", [first])
    b = worker("b", [second])
    _sell(600, "backlog")
    tasks.tick()
    _ticks_done(2, a, b)
    # the premise: shard 2's tick waits in its queue, and its sales with it
    broker = redis_lib.Redis.from_url(settings.CELERY_BROKER_URL)
    assert broker.llen(third) == 1
    assert PendingSale.objects.filter(shard=2).exists()
    assert set(PendingSale.objects.values_list("shard", flat=True)) == {2}
    # when a third worker starts on the waiting queue and on the second worker's
    c = worker("c", [second, third])
    _ticks_done(3, a, b, c)
    assert not PendingSale.objects.exists()
    # and more sales are ticked, the second queue's ticks going to either of two workers
    for n in range(4):
        _sell(300, f"later-{n}")
        tasks.tick()
        _ticks_done(3 + 3 * (n + 1), a, b, c)
    # then the third worker took the waiting shard, and each worker ticked only its queues' shards
    assert {2} in _ticked(c), c.describe()
    assert all(shards == {0, 3} for shards in _ticked(a)), a.describe()
    assert all(shards == {1} for shards in _ticked(b)), b.describe()
    assert all(shards in ({1}, {2}) for shards in _ticked(c)), c.describe()
    # and nothing was lost or applied twice
    _assert_exact_and_gapless()

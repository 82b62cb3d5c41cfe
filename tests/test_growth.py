"""Nothing grows with the length of the history but raw sales: pruning, and a simulated year."""

import datetime as dt
import re
import time
from collections import Counter

import pytest
from django.apps import apps
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone as django_timezone

from rankings import tasks
from rankings.engine.counts import STRIPES
from rankings.engine.tick import TICK_SECONDS_BOUNDS, tick
from rankings.ingest.batch import OUTCOMES
from rankings.ingest.sales import sales_ingest
from rankings.models import Batch, Bucket, IngestLog, MetricCount, Sale, SaleId, ShardState, TickLog

from .rankings_helpers import Shop

MINUTE = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)


def _bucket(shard, size, start, units=1):
    return Bucket(
        size=size, start=int(start.timestamp()), category="toys", product_id="p", shard=shard, units=units
    )


@pytest.mark.django_db
def test_buckets_are_deleted_once_every_window_and_chart_has_left_them():
    """Minute buckets go two hours behind their shard's clock, hour buckets 32 days behind; no sooner."""
    # given a shard whose clock stands at `now`, and buckets of every age
    now = dt.datetime(2026, 6, 15, 12, 0, tzinfo=dt.UTC)
    ShardState.objects.create(shard=0, as_of=now)
    Bucket.objects.bulk_create(
        [
            _bucket(0, 60, now - dt.timedelta(minutes=59)),  # in the 1h window
            _bucket(0, 60, now - dt.timedelta(minutes=119)),  # left it, within the margin
            _bucket(0, 60, now - dt.timedelta(minutes=121)),
            _bucket(0, 3600, now - dt.timedelta(days=30)),  # the 30d window's first hours, the chart's
            _bucket(0, 3600, now - dt.timedelta(days=32) + HOUR),
            _bucket(0, 3600, now - dt.timedelta(days=32, hours=1)),
            _bucket(0, 3600, now - dt.timedelta(days=400)),
        ]
    )
    # when
    tasks.prune()
    # then
    kept = sorted((b.size, int(now.timestamp()) - b.start) for b in Bucket.objects.all())
    assert kept == [(60, 59 * 60), (60, 119 * 60), (3600, 30 * 86400), (3600, 32 * 86400 - 3600)]


@pytest.mark.django_db
def test_each_shard_is_measured_by_its_own_clock(settings):
    """A lagging shard keeps the buckets it has yet to subtract as its windows move on."""
    # given shard 1 two days behind shard 0; a minute bucket 3 hours behind shard 0's clock, and one
    # 30 minutes behind shard 1's (two days behind shard 0's)
    now = dt.datetime(2026, 6, 15, 12, 0, tzinfo=dt.UTC)
    ShardState.objects.create(shard=0, as_of=now)
    ShardState.objects.create(shard=1, as_of=now - 2 * DAY)
    Bucket.objects.bulk_create([_bucket(0, 60, now - 3 * HOUR), _bucket(1, 60, now - 2 * DAY - 30 * MINUTE)])
    # when
    tasks.prune()
    # then
    assert list(Bucket.objects.values_list("shard", flat=True)) == [1]


@pytest.mark.django_db
def test_a_keep_shorter_than_a_window_is_raised_to_the_window(settings):
    """A misconfigured keep never deletes a bucket that a window still holds."""
    # given a keep of one minute for minute buckets, and a bucket 30 minutes old
    settings.RANKINGS = {**settings.RANKINGS, "MINUTE_BUCKETS_KEEP_SECONDS": 60}
    now = dt.datetime(2026, 6, 15, 12, 0, tzinfo=dt.UTC)
    ShardState.objects.create(shard=0, as_of=now)
    Bucket.objects.bulk_create([_bucket(0, 60, now - 30 * MINUTE)])
    # when
    tasks.prune()
    # then
    assert Bucket.objects.count() == 1


@pytest.mark.django_db
def test_logs_are_pruned_by_the_engine_clock_not_the_wall_clock(settings):
    """A history replayed in the past is pruned as it was live: by the instant the ticks reached."""
    # given an engine clock in 2020, logs of 2020 from 1 and 5 days before it, batches of 1 and 3 hours
    now = dt.datetime(2020, 3, 10, 12, 0, tzinfo=dt.UTC)
    ShardState.objects.create(shard=0, as_of=now, seq=4)
    for age in (1, 5):
        IngestLog.objects.create(at=now - age * DAY, source="api", accepted=1, duplicates=0, rejected=0)
        TickLog.objects.create(started_at=dt.datetime.now(dt.UTC), as_of=now - age * DAY, duration_ms=1)
    for seq, age, applied in ((1, 3, True), (2, 3, False), (3, 1, True)):
        Batch.objects.create(shard=0, seq=seq, as_of=now - age * HOUR, changes=[], applied=applied)
    # when
    tasks.prune()
    # then the wall clock (years later) deleted nothing the engine still keeps
    assert [now - at for at in IngestLog.objects.values_list("at", flat=True)] == [DAY]
    assert [now - t for t in TickLog.objects.values_list("as_of", flat=True)] == [DAY]
    # and an unapplied batch stays until a tick applies it
    assert sorted(Batch.objects.values_list("seq", flat=True)) == [2, 3]


@pytest.mark.django_db
def test_the_tick_leaves_pruning_to_the_prune_task():
    """Ticks only add to their logs: one place deletes, by one clock."""
    # given an old tick log row and an old applied batch
    now = dt.datetime(2026, 6, 15, 12, 0, tzinfo=dt.UTC)
    TickLog.objects.create(started_at=now - 10 * DAY, as_of=now - 10 * DAY, duration_ms=1)
    Batch.objects.create(shard=0, seq=1, as_of=now - 10 * DAY, changes=[], applied=True)
    ShardState.objects.create(shard=0, seq=1, as_of=now - 10 * DAY)
    # when a tick runs
    tick(now=now)
    # then it kept them, and the prune task deletes them
    assert TickLog.objects.count() == 2 and Batch.objects.filter(seq=1).exists()
    tasks.prune()
    assert TickLog.objects.count() == 1 and not Batch.objects.filter(seq=1).exists()


@pytest.mark.django_db
def test_an_empty_call_adds_no_log_row():
    """An empty POST (or import chunk) changes nothing, so it leaves no row that would only grow."""
    # when
    result = sales_ingest(events=[], source="api")
    # then
    assert result.as_dict() == {"accepted": 0, "duplicates": 0, "rejected": []}
    assert not IngestLog.objects.exists()


@pytest.mark.django_db
def test_a_log_row_carries_the_clock_the_batch_was_checked_against():
    """A replayed history's ingest log is dated in that history, so it is pruned with it."""
    then = dt.datetime(2020, 3, 10, 12, 0, tzinfo=dt.UTC)
    sales_ingest(events=[Shop(then).sale("p")], now=then)
    assert IngestLog.objects.get().at == then


@pytest.mark.django_db
def test_the_beat_prunes_hourly():
    entry = django_settings.CELERY_BEAT_SCHEDULE["rankings-prune"]
    assert (entry["task"], entry["schedule"]) == ("rankings.tasks.prune", 3600)


# --- a year of history ---------------------------------------------------------------

YEAR_START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
# The engine's clock moves in steps of 12 hours, at midnight and noon: 8,760 hourly ticks take
# several minutes (set STEP to an hour to watch them), and the tick takes any step. The beat's
# hourly prune, measured against the engine's clock, does as much once per step as twelve
# times: the clock does not move in between.
STEP = dt.timedelta(hours=12)
CATEGORIES = [["toys"], ["books"], ["toys", "garden"]]
PRODUCTS = [f"p{i}" for i in range(8)]
RAW_SALES = {Sale._meta.db_table, SaleId._meta.db_table}


# The running totals of /metrics: a row per total, key and stripe, whatever the history's length.
# Which keys a history meets (the tick durations' buckets) and which stripes (the server processes
# that wrote them) depend on the machine, not on time: held to that bound instead of compared.
TOTALS_MOST = STRIPES * (
    len(("sale", "view", "wish", "unknown")) * len(OUTCOMES) + len(TICK_SECONDS_BOUNDS) + 2
)


def _table_rows() -> dict[str, int]:
    counts = {}
    with connection.cursor() as cursor:
        for app in ("rankings", "catalogue"):
            for model in apps.get_app_config(app).get_models(include_auto_created=True):
                table = model._meta.db_table
                if table not in RAW_SALES:
                    cursor.execute(f"SELECT count(*) FROM {table}")
                    counts[table] = cursor.fetchone()[0]
    return counts


def _keyspaces(redis_client) -> Counter:
    """Keys, and members or bytes, per keyspace of this run's prefix (versions, shards, categories folded)."""
    prefix = django_settings.RANKINGS["KEY_PREFIX"]
    counts: Counter = Counter()
    for raw in redis_client.scan_iter(f"{prefix}:*", count=1000):
        key = raw.decode()
        space = key[len(prefix) + 1 :]
        space = re.sub(r"^v\d+", "vV", space)
        space = re.sub(r"\{s\d+\}", "{sS}", space)
        space = re.sub(r":(b|t):([^:]+):([^:]+):.*$", r":\1:\2:\3:<category>", space)
        counts[f"{space} keys"] += 1
        kind = redis_client.type(raw).decode()
        if kind == "zset":
            counts[f"{space} members"] += redis_client.zcard(raw)
        elif kind == "string":
            counts[f"{space} bytes"] += redis_client.strlen(raw)
    return counts


def _beat_tasks() -> list[str]:
    """The beat's periodic tasks but the tick (which the test drives with its own clock)."""
    schedule = django_settings.CELERY_BEAT_SCHEDULE.values()
    return [entry["task"].rsplit(".", 1)[1] for entry in schedule if entry["task"] != "rankings.tasks.tick"]


def _day_of_sales(day: int, at: dt.datetime) -> list[dict]:
    """A few sales in the minutes before `at`, and now and then a return of one of them."""
    events = []
    for i in range(3):
        n = day * 3 + i
        events.append(
            {
                "id": f"d{day}-{i}",
                "ts": (at - dt.timedelta(minutes=5 + i)).isoformat(),
                "productId": PRODUCTS[(day * 5 + i * 3) % len(PRODUCTS)],
                "categories": CATEGORIES[n % len(CATEGORIES)],
                "qty": 1 + n % 3,
                "amount": f"{1 + n % 7}.50",
            }
        )
    if day % 7 == 6:
        first = events[0]
        events.append(
            {**first, "id": f"d{day}-r", "ts": at.isoformat(), "qty": -1, "returnOf": first["id"]}
            | {"amount": "0.50"}
        )
    return events


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("partitions_dropped")  # a month's partition each: emptied after every later test
def test_a_year_of_history_grows_nothing_but_raw_sales(settings, redis_client):
    """Ticked through a year with a few sales a day and the beat's periodic tasks, every table but
    raw sales and every Redis keyspace holds as much after 12 months as after the second (once
    the longest keep, 32 days of hourly snapshots, has been reached)."""
    # given one shard (a tick costs a few queries per shard), the beat's periodic tasks, and a
    # sampled verify of one category a run (which writes its log as any sample does)
    settings.RANKINGS = {**settings.RANKINGS, "SHARDS": 1, "VERIFY_SAMPLE_CATEGORIES": 1}
    beat = _beat_tasks()
    started = time.monotonic()
    figures = {}
    steps = 0
    now = YEAR_START
    for month in range(1, 13):
        for _ in range((30 if month < 12 else 35) * DAY // STEP):  # 12 months: 365 days
            now = YEAR_START + steps * STEP
            if now.hour == 12:
                result = sales_ingest(events=_day_of_sales(steps * STEP // DAY, now), now=now)
                assert not result.rejected, result.rejected
            # when the engine's clock moves on, and the beat's tasks run
            tick(now=now)
            for name in beat:
                getattr(tasks, name)()
            steps += 1
        # The first figures once every keep has been reached (hourly snapshots: 32 days).
        if month in (2, 12):
            figures[month] = {**_table_rows(), **_keyspaces(redis_client)}
            figures[month]["raw sales (kept)"] = Sale.objects.count()
    # then
    print(f"\nsimulated {steps} ticks to {now.isoformat()} in {time.monotonic() - started:.1f}s")
    print(f"{'table / keyspace':60} {'month 2':>9} {'month 12':>9}")
    for name in sorted(figures[2].keys() | figures[12].keys()):
        print(f"{name:60} {figures[2].get(name, 0):>9} {figures[12].get(name, 0):>9}")
    grown = {
        name: (figures[2].get(name, 0), after)
        for name, after in figures[12].items()
        if name not in ("raw sales (kept)", MetricCount._meta.db_table)
        and after > figures[2].get(name, 0) * 1.1 + 2
    }
    assert figures[12][MetricCount._meta.db_table] <= TOTALS_MOST
    assert not grown, f"grew with the history (month 2, month 12): {grown}"
    assert figures[12]["raw sales (kept)"] > 5 * figures[2]["raw sales (kept)"]
    Shop(now).assert_exact()


@pytest.mark.django_db(transaction=True)
def test_a_prune_after_a_clock_jump_keeps_what_the_clock_reset_rebuilds_from():
    """A tick run far in the future must not let the prune delete the buckets that
    rankings_clock_reset rebuilds the boards from: the prune believes the engine's clock
    only up to as far ahead of the wall clock as an ingest would accept."""
    from django.core.management import call_command

    # given boards of recent sales, then a tick in 2099 and a prune
    shop = Shop(now=django_timezone.now().replace(microsecond=0) - MINUTE)
    shop.send(shop.sale("p1", qty=3), shop.sale("p2", qty=1))
    call_command("rankings_tick")
    before = shop.top()
    call_command("rankings_tick", "--now", "2099-01-01T00:00:00Z", "--allow-future")
    tasks.prune()
    # when the operator resets the clock
    call_command("rankings_clock_reset")
    # then the boards are back, exact
    assert shop.top() == before == [("p1", 3), ("p2", 1)]
    shop.assert_exact()

"""A rebuild that reads a rollup of the sales in place of the raw sales, beside today's (not in `make bench`).

The ticks could keep, beside the raw sales, their sums by product, list of categories and hour, and
a rebuild could read those. This trial measures what that would give. It writes BENCH_ROLLUP_SALES
sales (default 10,000,000) as `--only rebuild` does, gathers them into such a table, and points both
reads of a rebuild at it: the hour buckets' (`hourly._HOURLY`), which give the boards of the windows of
whole hours and the history, and the aggregation of the others' boards (`backfill._AGGREGATE`).

Every window's bound must fall between two rows of the rollup. A row holds an hour, or a minute from
two hours before the start of the hour that holds the shards' instant on, where the 1-hour window's
minute bounds lie. A sale
exactly on a boundary keeps its own instant; every other sale takes its bucket's start plus a
microsecond. That way a sale exactly on an hour stays apart, as the history keeps it, and every
window's test reads each row as it would read the row's sales. Some of the generated sales are moved
onto such boundaries first (hours, minutes, the 1-hour window's first minute), since random instants
almost never fall on one.

Each run rebuilds from the raw sales, then from the rollup. Each reports its time. The first pair must
agree exactly: the same boards in Redis and the same snapshots, row for row. The rollup's rebuild does
not read the queue, so it refuses to run while sales are queued (the benchmark queues none).
"""

import datetime as dt
import os
import time
from unittest import mock

from bench import harness
from bench.bench_rebuild import _generate

SALES = int(os.environ.get("BENCH_ROLLUP_SALES", "10000000"))

# Sales on the boundaries that matter: the hour, the minute (in the last hours, where rows are by
# minute), and the 1-hour window's first minute.
# (Several statements with parameters in one execute: Django's psycopg binds them on the client.)
_ON_BOUNDARIES = """
UPDATE rankings_sale SET counted_at = date_bin('1 hour', counted_at, 'epoch'), ts = date_bin('1 hour', counted_at, 'epoch')
WHERE id %% 1000 = 0;
UPDATE rankings_sale SET counted_at = date_bin('1 minute', counted_at, 'epoch'), ts = date_bin('1 minute', counted_at, 'epoch')
WHERE id %% 100 = 1 AND counted_at >= %(by_minute)s;
UPDATE rankings_sale SET counted_at = %(window_first)s, ts = %(window_first)s
WHERE id %% 100 = 2 AND counted_at >= %(by_minute)s;
"""

_ROLLUP = """
DROP TABLE IF EXISTS bench_rollup;
CREATE TABLE bench_rollup AS
SELECT product_id, categories, t AS counted_at, count(*)::int AS n, sum(qty)::int AS qty,
       sum(CASE WHEN qty < 0 THEN -amount_cents ELSE amount_cents END)::bigint AS revenue
FROM (
    SELECT product_id, categories, qty, amount_cents,
           CASE WHEN counted_at = bucket THEN counted_at ELSE bucket + interval '1 microsecond' END AS t
    FROM (
        SELECT s.*, date_bin(CASE WHEN s.counted_at >= %(by_minute)s THEN interval '1 minute'
                                  ELSE interval '1 hour' END, s.counted_at, 'epoch') AS bucket
        FROM rankings_sale s
    ) AS bucketed
) AS keyed
GROUP BY 1, 2, 3;
ANALYZE bench_rollup;
"""

_RAW_FACTS = """SELECT 0, s.product_id, array_to_string(s.categories, ','), s.counted_at, s.qty::bigint,
           CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END
    FROM rankings_sale s"""
_ROLLUP_FACTS = """SELECT 0, s.product_id, array_to_string(s.categories, ','), s.counted_at, s.qty::bigint,
           s.revenue
    FROM bench_rollup s"""


def _rollup_read():
    """Both halves of a rebuild pointed at the rollup."""
    from rankings.engine import hourly
    from rankings.models import PendingSale
    from rankings.operations import backfill

    def replaced(statement: str, old: str, new: str) -> str:
        if old not in statement:
            raise RuntimeError(
                f"the rebuild's statements changed: {old!r} is gone, the trial would read raw sales"
            )
        return statement.replace(old, new)

    aggregate = replaced(backfill._AGGREGATE, "SELECT count(*)", "SELECT sum(s.n)::bigint")
    aggregate = replaced(aggregate, "FROM rankings_sale s", "FROM bench_rollup s")

    def nothing_owed(snapshot_connection, *args) -> dict:
        # Today's statement would read the rollup's columns from the raw sales; with an empty queue
        # it owes nothing either way.
        with snapshot_connection.cursor() as cursor:
            cursor.execute(f"SELECT EXISTS (SELECT FROM {PendingSale._meta.db_table})")
            if cursor.fetchone()[0]:
                raise RuntimeError("sales are queued: the rollup's rebuild would not subtract them")
        return {}

    return [
        mock.patch.object(backfill, "_AGGREGATE", aggregate),
        mock.patch.object(backfill, "_REVENUE", "s.revenue::float8"),
        mock.patch.object(hourly, "_HOURLY", replaced(hourly._HOURLY, _RAW_FACTS, _ROLLUP_FACTS)),
        mock.patch.object(backfill, "_pending_sales", nothing_owed),
    ]


def _build(rolled_up: bool) -> tuple[int, float]:
    from rankings.operations.backfill import version_build

    patches = _rollup_read() if rolled_up else []
    for patch in patches:
        patch.start()
    try:
        started = time.perf_counter()
        return version_build().number, time.perf_counter() - started
    finally:
        for patch in patches:
            patch.stop()


def _written(number: int) -> tuple[dict, list]:
    """A version's boards in Redis (key past its shard -> members and scores) and its snapshots."""
    from rankings.engine import store
    from rankings.models import Snapshot

    r = store.patient()
    boards = {
        key.split(b":b:", 1)[1]: r.zrange(key, 0, -1, withscores=True)
        for key in r.scan_iter(store.keys.boards_pattern(number), count=5000)
    }
    snapshots = sorted(
        Snapshot.objects.filter(version=number).values_list("at", "window", "metric", "category", "products")
    )
    return boards, snapshots


def _forget(number: int) -> None:
    from rankings.engine import store
    from rankings.engine.history import history_delete
    from rankings.models import RankingVersion

    store.version_delete(number)
    history_delete(number)
    RankingVersion.objects.filter(number=number).delete()


def _boundaries() -> dict:
    """From when the rollup's rows are by minute, and the 1-hour window's first minute, at the shards'
    instant."""
    from rankings.engine.windows import configured_windows
    from rankings.models import ShardState

    as_of = min(ShardState.objects.values_list("as_of", flat=True))
    first, _ = configured_windows()["1h"].bounds(int(as_of.timestamp()))
    hour = as_of.replace(minute=0, second=0, microsecond=0)
    return {
        "by_minute": hour - dt.timedelta(hours=2),
        "window_first": dt.datetime.fromtimestamp(first, tz=dt.UTC),
    }


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    from django.db import connection

    table = table or harness.Table()
    print(f"rollup: {SALES:,} raw sales…", flush=True)
    _generate(SALES)
    bounds = _boundaries()
    with connection.cursor() as cursor:
        cursor.execute(_ON_BOUNDARIES, bounds)
        cursor.execute(_ROLLUP, bounds)
        cursor.execute("SELECT count(*), pg_total_relation_size('bench_rollup') FROM bench_rollup")
        rows, size = cursor.fetchone()
    seconds: dict[bool, list[float]] = {False: [], True: []}
    try:
        for run_ in range(runs):
            built = {}
            for rolled_up in (False, True):
                built[rolled_up], s = _build(rolled_up)
                seconds[rolled_up].append(s)
            if run_ == 0 and _written(built[False]) != _written(built[True]):
                raise AssertionError(
                    "the rebuild from the rollup differs from the rebuild from the raw sales"
                )
            for number in built.values():
                _forget(number)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE bench_rollup")
    raw, rolled = harness.median(seconds[False]), harness.median(seconds[True])
    table.add(
        f"rebuild of {SALES:,} sales from a rollup by product, list and hour",
        f"{rolled:.2f} s = {SALES / rolled:,.0f} sales/s",
        f"from the raw sales: {raw:.2f} s",
        f"{raw / rolled:.2f}x",
        f"{rows:,} rows ({size / 2**20:,.0f} MiB), {SALES / rows:.2f} sales a row; equal boards and snapshots",
    )
    harness.reset()
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

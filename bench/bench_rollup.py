"""A rebuild that reads a rollup of the sales in place of the raw sales, beside today's (not in `make bench`).

The ticks could keep, beside the raw sales, their sums by product, list of categories and hour, and
a rebuild could read those. This trial measures what that would give. It writes BENCH_ROLLUP_SALES
sales (default 10,000,000) as `--only rebuild` does, gathers them into such a table, and points both
halves of a rebuild at it: the boards' aggregation (`backfill._AGGREGATE`) and the history's read
(`history._HOURLY`).

Every window's bound must fall between two rows of the rollup. A row holds an hour, or a minute in the
last three hours, where the 1-hour window's minute bounds lie. A sale exactly on a boundary keeps
its own instant; every other sale takes its bucket's start plus a microsecond. That way a sale
exactly on an hour stays apart, as the history keeps it, and every window's test reads each row as
it would read the row's sales.

The rebuilds alternate, today's first. Each reports its time. The first pair must agree exactly: the
same boards in Redis and the same snapshots, row for row. The queue is empty here, so nothing is
owed to the shards.
"""

import os
import time
from unittest import mock

from bench import harness
from bench.bench_rebuild import _generate

SALES = int(os.environ.get("BENCH_ROLLUP_SALES", "10000000"))

_ROLLUP = """
DROP TABLE IF EXISTS bench_rollup;
CREATE TABLE bench_rollup AS
SELECT product_id, categories, t AS counted_at, count(*)::int AS n, sum(qty)::int AS qty,
       sum(CASE WHEN qty < 0 THEN -amount_cents ELSE amount_cents END)::bigint AS revenue
FROM (
    SELECT product_id, categories, qty, amount_cents,
           CASE WHEN counted_at = bucket THEN counted_at ELSE bucket + interval '1 microsecond' END AS t
    FROM (
        SELECT s.*, date_bin(CASE WHEN s.counted_at >= now() - interval '3 hours' THEN interval '1 minute'
                                  ELSE interval '1 hour' END, s.counted_at, 'epoch') AS bucket
        FROM rankings_sale s
    ) AS bucketed
) AS keyed
GROUP BY 1, 2, 3;
ANALYZE bench_rollup;
"""

_RAW_FACTS = """SELECT s.product_id, array_to_string(s.categories, ','), s.counted_at, s.qty::bigint,
           CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END, 0::bigint, 0::bigint
    FROM rankings_sale s"""
_ROLLUP_FACTS = """SELECT s.product_id, array_to_string(s.categories, ','), s.counted_at, s.qty::bigint,
           s.revenue, 0::bigint, 0::bigint
    FROM bench_rollup s"""


def _rollup_read():
    """Both halves of a rebuild pointed at the rollup."""
    from rankings.engine import history
    from rankings.operations import backfill

    aggregate = backfill._AGGREGATE.replace("SELECT count(*)", "SELECT sum(s.n)::bigint").replace(
        "FROM rankings_sale s", "FROM bench_rollup s"
    )
    hourly = history._HOURLY.replace(_RAW_FACTS, _ROLLUP_FACTS)
    if aggregate == backfill._AGGREGATE or hourly == history._HOURLY:
        raise RuntimeError("the rebuild's statements changed: this trial no longer reads the rollup")
    return [
        mock.patch.object(backfill, "_AGGREGATE", aggregate),
        mock.patch.object(backfill, "_REVENUE", "s.revenue::float8"),
        mock.patch.object(history, "_HOURLY", hourly),
        mock.patch.object(backfill, "_pending_sales", lambda *args: {}),
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


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    from django.db import connection

    table = table or harness.Table()
    print(f"rollup: {SALES:,} raw sales…", flush=True)
    _generate(SALES)
    with connection.cursor() as cursor:
        cursor.execute(_ROLLUP)
        cursor.execute("SELECT count(*) FROM bench_rollup")
        (rows,) = cursor.fetchone()
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for run in range(runs):
        built = {}
        for rolled_up in (False, True):
            built[rolled_up], s = _build(rolled_up)
            seconds[rolled_up].append(s)
        if run == 0 and _written(built[False]) != _written(built[True]):
            raise AssertionError("the rebuild from the rollup differs from the rebuild from the raw sales")
        for number in built.values():
            _forget(number)
    raw, rolled = harness.median(seconds[False]), harness.median(seconds[True])
    table.add(
        f"rebuild of {SALES:,} sales from a rollup by product, list and hour",
        f"{rolled:.2f} s = {SALES / rolled:,.0f} sales/s",
        f"from the raw sales: {raw:.2f} s",
        f"{raw / rolled:.2f}x",
        f"{rows:,} rows, {SALES / rows:.2f} sales a row; equal boards and snapshots",
    )
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE bench_rollup")
    harness.reset()
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

"""From the ingest's floor to a stored sale, one step at a time (`--only ladder`, not in CI).

The ingest's goals are ratios to one floor (bench_ingest._copy_floor): 200,000 rows of two columns
copied into a temporary table and inserted by one INSERT … ON CONFLICT into another, whose key is
the id. A sale stored through the API differs from that floor in many ways at once. Each step here
adds one of them to the step before, so that what each costs is measured on its own, in one run:

1. the floor, as `--only ingest` measures it;
2. the same rows, 1,000 a transaction, each committed (a batch of the API);
3. into a table of the database (logged: its rows are in the WAL and the shared buffers), not a
   temporary one;
4. a sale's columns, not two (the staging table is today's, copied in binary);
5. the sales table's other indexes: by product and instant, by instant, and returns by original;
6. today's table: partitioned by month, its sale id drawn from a sequence, the event id unique
   through the id table (today's statement without its queue rows);
7. the queue rows: today's statement whole (rankings.ingest.sales._INSERT);
8. today's whole batch in process: the events read and checked from the request's bytes, the
   catalogue, the placeholders, the totals, the log (rankings.ingest.sales.sales_ingest).

Beside step 6, in its place after step 5: the trial's table of `--only shape` (bench_shape), one
table partitioned by a hash of the event id, unique in it, with BRIN indexes on the instant and on
the writing transaction's id in place of the month partitions, the B-tree by instant, the sale id
and the id table.

Views and wishes climb from their own floor (bench_engage._copy_floor: 200,000 views copied in
binary into the raw table itself, in one transaction) as POST /v1/engagements stores them, without
ids, 10,000 a batch:

1. the floor;
2. the same rows, 10,000 a transaction, each committed;
3. today's rows: text lines made by Python (rankings.ingest.engagement.EngagementIngest.write,
   its queue statement not run: Python still groups the rows);
4. the queue rows, grouped by product, second and categories, inserted: today's write whole;
5. today's whole batch in process (rankings.ingest.engagement.engagements_ingest).

Steps 2 to 7 of the sales copy the same rows, made once beforehand, as today's ingest makes them, and steps 3 to
7 write into tables of a schema of their own, dropped at the end, each step into empty tables; step
8 stores into the real tables, as `--only ingest` does. Each run takes the steps in turn, from another first each time. Reported for each step: the
rows a second, its ratio to the floor and to the step before, and the CPU a row of this process and
of its PostgreSQL backend. The API's own figures over HTTP are `--only ingest`'s.

    python -m bench --only ladder
"""

import datetime as dt
import json
import random
import statistics
import time
import uuid
from decimal import Decimal

from bench import harness

BATCH = 1_000
BATCHES = 100  # a run of each step from 2 on stores BATCHES × BATCH rows
VIEW_BATCH = 10_000
VIEW_BATCHES = 20

_SCHEMA = """
DROP SCHEMA IF EXISTS ladder CASCADE;
CREATE SCHEMA ladder;
CREATE TABLE ladder.pair (id varchar(128) PRIMARY KEY, v bigint);
CREATE TABLE ladder.wide (
    event_id varchar(128) PRIMARY KEY, ts timestamptz NOT NULL, product_id varchar(64) NOT NULL,
    categories varchar(50)[] NOT NULL, qty integer NOT NULL, amount_cents bigint NOT NULL,
    return_of varchar(128), counted_at timestamptz NOT NULL, received_at timestamptz NOT NULL,
    digest varchar(32) NOT NULL
);
CREATE TABLE ladder.indexed (LIKE ladder.wide INCLUDING ALL);
CREATE INDEX ON ladder.indexed (product_id, counted_at);
CREATE INDEX ON ladder.indexed (counted_at);
CREATE INDEX ON ladder.indexed (return_of) WHERE return_of IS NOT NULL;
CREATE TABLE ladder.sale (LIKE rankings_sale INCLUDING ALL) PARTITION BY RANGE (counted_at);
CREATE TABLE ladder.saleid (LIKE rankings_saleid INCLUDING ALL);
CREATE TABLE ladder.pendingsale (LIKE rankings_pendingsale INCLUDING ALL);
"""

# A pair of the floor's, 1,000 a transaction: its stage made once a session, emptied at each commit.
_PAIR_STAGE = (
    "CREATE TEMPORARY TABLE IF NOT EXISTS ladder_stage (id varchar(128), v bigint) ON COMMIT DELETE ROWS"
)
_TEMP_PAIR = "CREATE TEMPORARY TABLE IF NOT EXISTS ladder_pair (id varchar(128) PRIMARY KEY, v bigint)"

_WIDE_INSERT = """
INSERT INTO {table} (event_id, ts, product_id, categories, qty, amount_cents, return_of, counted_at,
                     received_at, digest)
SELECT event_id, ts, product_id, string_to_array(categories, ','), qty, amount_cents, return_of, counted_at,
       now(), digest
FROM ingest_stage ORDER BY event_id
ON CONFLICT (event_id) DO NOTHING
"""


def _schema_create(months: set[dt.datetime]) -> None:
    from django.db import connection

    from rankings.engine.partitions import next_month

    with connection.cursor() as cursor:
        cursor.execute(_SCHEMA)
        for month in sorted(months):
            cursor.execute(
                f"CREATE TABLE ladder.sale_{month:%Y_%m} PARTITION OF ladder.sale FOR VALUES FROM (%s) TO (%s)",
                [month, next_month(month)],
            )


def _today_statement(*, queue: bool) -> str:
    """Today's insert (rankings.ingest.sales._INSERT) into the ladder's tables, with or without its
    queue rows."""
    from rankings.ingest.sales import _INSERT

    statement = (
        _INSERT.replace("rankings_saleid", "ladder.saleid")
        .replace("rankings_sale_id_seq", "ladder.sale_id_seq")
        .replace("rankings_pendingsale", "ladder.pendingsale")
        .replace("INSERT INTO rankings_sale", "INSERT INTO ladder.sale")
    )
    if "rankings_" in statement:
        raise RuntimeError("today's insert names a table the ladder does not copy")
    if queue:
        return statement
    head, _, tail = statement.partition("), queued AS (")
    return head + ")" + tail[tail.index("\nSELECT ord") :]


def _staged_rows(events: list[dict], digests: list[str]) -> list[tuple]:
    """The staging table's rows of `events`, as today's ingest makes them (each sale on the shard of
    `all` and on another: about two queue rows a sale, as the bench's shop has)."""
    rows = []
    for index, (event, digest) in enumerate(zip(events, digests, strict=True)):
        ts = dt.datetime.fromtimestamp(event["ts"], tz=dt.UTC)
        categories = ",".join(event["categories"])
        cents = round(float(event["amount"]) * 100)
        queue = f"0:all;1:{categories}"
        rows.append(
            (
                index,
                event["id"],
                ts,
                event["productId"],
                categories,
                event["qty"],
                cents,
                None,
                ts,
                digest,
                queue,
            )
        )
    return rows


def _batches(run: int) -> tuple[list[list[tuple]], list[bytes]]:
    """BATCHES batches of BATCH sales of run `run`: as staged rows, and as request bodies."""
    from bench.bench_ingest import _events
    from rankings.ingest.sales import event_digest

    rng = random.Random(run)
    staged, bodies = [], []
    for _ in range(BATCHES):
        events = _events(BATCH, uuid.uuid4().hex[:12], rng)
        digests = [
            event_digest(
                {
                    **event,
                    "ts": dt.datetime.fromtimestamp(event["ts"], tz=dt.UTC),
                    "amount": Decimal(event["amount"]),
                }
            )
            for event in events
        ]
        staged.append(_staged_rows(events, digests))
        bodies.append(json.dumps({"events": events}).encode())
    return staged, bodies


def _pairs(batches: list[list[tuple]], *, temporary: bool) -> None:
    """The floor's rows (an event id and a number) of each batch copied and inserted as the floor
    does, one transaction a batch; its tables made once, before."""
    from django.db import connection, transaction

    target = "ladder_pair" if temporary else "ladder.pair"
    with connection.cursor() as cursor:
        cursor.execute(_PAIR_STAGE)
        if temporary:
            cursor.execute(_TEMP_PAIR)
    for rows in batches:
        with transaction.atomic(), connection.cursor() as cursor:
            with cursor.copy("COPY ladder_stage (id, v) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row((row[1], row[6]))
            cursor.execute(f"INSERT INTO {target} SELECT * FROM ladder_stage ON CONFLICT DO NOTHING")


def _staged(batches: list[list[tuple]], statement: str) -> None:
    """Each batch copied into today's staging table, then `statement`, one transaction a batch."""
    from django.db import connection, transaction

    from rankings.ingest.sales import _STAGE_TYPES, SaleIngest

    for rows in batches:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(SaleIngest.layout_lock_sql)
            with cursor.copy("COPY ingest_stage FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(_STAGE_TYPES)
                for row in rows:
                    copy.write_row(row)
            cursor.execute(statement)


def _trial(batches: list[list[tuple]]) -> None:
    from bench.bench_shape import _trial_emptied

    _trial_emptied()
    _staged(batches, _WIDE_INSERT.format(table="shape_trial.sale"))


def _today(bodies: list[bytes]) -> None:
    from bench.bench_shape import sales_today

    for body in bodies:
        if sales_today(body) != BATCH:
            raise RuntimeError("today's ingest did not store every sale of a batch")


def _view_batches(run: int) -> tuple[list[list], list[bytes]]:
    """VIEW_BATCHES batches of VIEW_BATCH views of run `run`: as today's rows, and as request bodies."""
    from bench.bench_engage import _views
    from rankings.engine.partitions import engagement_partitions_ensure
    from rankings.ingest.engagement import _Row

    rng = random.Random(1000 + run)
    batches, bodies = [], []
    for _ in range(VIEW_BATCHES):
        events = _views(VIEW_BATCH, rng)
        rows = [
            _Row(
                index=index,
                event_id=None,
                ts=dt.datetime.fromtimestamp(event["ts"], tz=dt.UTC),
                product_id=event["productId"],
                kind=event["kind"],
                categories=event["categories"],
                digest=None,
            )
            for index, event in enumerate(events)
        ]
        engagement_partitions_ensure(row.ts for row in rows)
        batches.append(rows)
        bodies.append(json.dumps({"events": events}).encode())
    return batches, bodies


_VIEWS_COPY = (
    "COPY rankings_engagement (ts, product_id, kind, categories, received_at) FROM STDIN (FORMAT BINARY)"
)


def _views_copied(batches: list[list]) -> None:
    """Each batch's views copied in binary into the raw table, as the floor copies them."""
    from django.db import connection, transaction

    received = dt.datetime.now(dt.UTC)
    for rows in batches:
        with transaction.atomic(), connection.cursor() as cursor, cursor.copy(_VIEWS_COPY) as copy:
            copy.set_types(["timestamptz", "varchar", "varchar", "varchar[]", "timestamptz"])
            for row in rows:
                copy.write_row((row.ts, row.product_id, row.kind, row.categories, received))


class _Unqueued:
    """A cursor that runs everything but the engagement ingest's queue statement: today's write of raw
    rows alone."""

    def __init__(self, cursor):
        self.cursor = cursor

    def execute(self, statement, params=None):
        from rankings.ingest.engagement import _QUEUE

        if statement is not _QUEUE:
            self.cursor.execute(statement, params)

    def copy(self, statement):
        return self.cursor.copy(statement)


def _views_written(batches: list[list], *, queued: bool) -> None:
    """Each batch stored by today's write (its raw rows as text lines, and unless not `queued`, its
    queue rows grouped), one transaction a batch."""
    from django.db import connection, transaction

    from rankings.engine.shards import layout_checked
    from rankings.engine.tree import version_tree
    from rankings.ingest.batch import _queue_of
    from rankings.ingest.engagement import EngagementIngest

    number, layout = layout_checked()
    queue_of = _queue_of(layout, version_tree(number))
    for rows in batches:
        with transaction.atomic(), connection.cursor() as cursor:
            EngagementIngest().write(cursor if queued else _Unqueued(cursor), rows, queue_of)


def _views_today(bodies: list[bytes]) -> None:
    from bench.bench_shape import views_today

    for body in bodies:
        if views_today(body) != VIEW_BATCH:
            raise RuntimeError("today's ingest did not store every view of a batch")


# Each step's name, what it adds, and how it is run on (the rows staged, the request bodies).
STEPS = {
    "2": ("the same rows, 1,000 a transaction", lambda b, _: _pairs(b, temporary=True)),
    "3": ("into a logged table", lambda b, _: _pairs(b, temporary=False)),
    "4": ("a sale's columns", lambda b, _: _staged(b, _WIDE_INSERT.format(table="ladder.wide"))),
    "5": (
        "the sales table's other indexes",
        lambda b, _: _staged(b, _WIDE_INSERT.format(table="ladder.indexed")),
    ),
    "6": (
        "month partitions, a sale id, the id table",
        lambda b, _: _staged(b, _today_statement(queue=False)),
    ),
    "6t": ("in place of 6, the trial's table", lambda b, _: _trial(b)),
    "7": ("the queue rows: today's statement", lambda b, _: _staged(b, _today_statement(queue=True))),
    "8": ("today's whole batch, in process", lambda _, bodies: _today(bodies)),
}
VIEW_STEPS = {
    "2": ("the same rows, 10,000 a transaction", lambda b, _: _views_copied(b)),
    "3": ("today's rows, text lines made by Python", lambda b, _: _views_written(b, queued=False)),
    "4": ("the queue rows, grouped", lambda b, _: _views_written(b, queued=True)),
    "5": ("today's whole batch, in process", lambda _, bodies: _views_today(bodies)),
}


def _emptied() -> None:
    """Every table the ladders store into emptied: each step stores into empty tables, not another step's."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE ladder.pair, ladder.wide, ladder.indexed, ladder.sale, ladder.saleid, ladder.pendingsale,"
            " rankings_engagement, rankings_pendingengagement"
        )
        cursor.execute("DROP TABLE IF EXISTS ladder_pair")


# The step each step adds to: the trial's table stands in step 6's place.
_AFTER = {"2": "1", "3": "2", "4": "3", "5": "4", "6": "5", "6t": "5", "7": "6", "8": "7"}


def _timed(step, batches, bodies, rows: int) -> tuple[float, float, float]:
    """(rows/s, client CPU a row, PostgreSQL CPU a row) of one run of a step, into empty tables."""
    from django.db import connection

    from bench.bench_shape import _backend_cpu

    _emptied()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    cpu, backend_cpu, started = time.process_time(), _backend_cpu(backend), time.perf_counter()
    step(batches, bodies)
    seconds = time.perf_counter() - started
    return rows / seconds, (time.process_time() - cpu) / rows, (_backend_cpu(backend) - backend_cpu) / rows


def run(table: harness.Table, runs: int = 3) -> harness.Table:
    from django.core.management import call_command
    from django.db import connection

    from bench import bench_engage, bench_ingest, bench_shape
    from bench.bench_shape import sales_today
    from rankings.engine.partitions import month_of

    harness.reset()
    call_command("seed_demo", "--sales", "0", "--no-progress", verbosity=0)
    bench_shape._schema_create()
    now = dt.datetime.now(dt.UTC)
    _schema_create({month_of(now - dt.timedelta(days=1)), month_of(now)})
    warm, warm_bodies = _batches(-1)
    sales_today(warm_bodies[0])  # what a process does once (imports, statements) is not timed
    figures: dict[str, list[tuple[float, float, float]]] = {}
    try:
        for run_number in range(runs):
            batches, bodies = _batches(run_number)
            order = list(STEPS)[run_number % len(STEPS) :] + list(STEPS)[: run_number % len(STEPS)]
            for name in order:
                figures.setdefault(name, []).append(_timed(STEPS[name][1], batches, bodies, BATCH * BATCHES))
            figures.setdefault("1", []).append((bench_ingest._copy_floor(), 0.0, 0.0))
            views, view_bodies = _view_batches(run_number)
            order = (
                list(VIEW_STEPS)[run_number % len(VIEW_STEPS) :]
                + list(VIEW_STEPS)[: run_number % len(VIEW_STEPS)]
            )
            for name in order:
                figures.setdefault(f"v{name}", []).append(
                    _timed(VIEW_STEPS[name][1], views, view_bodies, VIEW_BATCH * VIEW_BATCHES)
                )
            figures.setdefault("v1", []).append(
                (bench_engage._copy_floor(random.Random(run_number)), 0.0, 0.0)
            )
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP SCHEMA IF EXISTS ladder, shape_trial CASCADE")
    median = {
        name: [statistics.median(values) for values in zip(*runs_, strict=True)]
        for name, runs_ in figures.items()
    }
    _ladder_added(
        table, "sales", median, STEPS, _AFTER, floor="200,000 rows, one COPY and one INSERT, temporary tables"
    )
    views = {f"v{name}": step for name, step in VIEW_STEPS.items()}
    after = {f"v{name}": f"v{int(name) - 1}" for name in VIEW_STEPS}
    _ladder_added(
        table, "views", median, views, after, floor="200,000 views, one binary COPY into the raw table"
    )
    return table


def _ladder_added(
    table: harness.Table, kind: str, median: dict, steps: dict, after: dict, *, floor: str
) -> None:
    """One ladder's rows: its floor, then each step with its ratio to the floor and to the step it adds to."""
    first = next(iter(after.values()))
    rates = {first: median[first][0]}
    table.add(f"{kind} {first.lstrip('v')}. the floor: {floor}", f"{rates[first]:,.0f} rows/s")
    for name, (what, _) in steps.items():
        rate, client, backend = median[name]
        rates[name] = rate
        table.add(
            f"{kind} {name.lstrip('v')}. + {what}",
            f"{rate:,.0f} rows/s",
            f"the floor {rates[first]:,.0f} rows/s",
            f"{rate / rates[first]:.2f}x",
            note=f"{rate / rates[after[name]]:.2f}x of step {after[name].lstrip('v')}; CPU a row:"
            f" client {client * 1e6:.1f} µs, PostgreSQL {backend * 1e6:.1f} µs",
        )

"""From the ingest's floors to a stored sale and view, one step at a time (`--only ladder`, not in CI).

The ingest's goals are ratios to a floor (bench_ingest._copy_floor): 200,000 rows of two columns
copied into a temporary table and inserted by one INSERT … ON CONFLICT into another, whose key is
the id. A sale stored through the API differs from that floor in many ways at once. Each step here
adds some of them to the step before, so that what each costs is measured on its own, in one run:

1. the floor, as `--only ingest` measures it (its own 200,000 rows, made inside its timing);
2. the batch's rows, 1,000 a transaction, each committed (a batch of the API);
3. into a table of the database (logged: its rows are in the WAL and the shared buffers), not a
   temporary one;
4. a sale's columns, not two, as today's ingest stages them: its lock and staging table, a binary
   COPY, the insert in event id order;
5. the sales table's other indexes: by product and instant, by instant, and returns by original;
6. today's table: partitioned by month, its checks, its sale id drawn from a sequence, the event id
   unique through the id table (today's statement without its queue rows);
7. the queue rows: today's statement whole (rankings.ingest.sales._INSERT), each sale queued as
   the active layout queues it;
8. today's whole batch in process: the events read and checked from the request's bytes, the
   catalogue, the placeholders, the totals, the log (rankings.ingest.sales.sales_ingest).

Beside three steps, each in its place, a shape that would cost less and what it asks:

- 5i, in place of 5: without the B-tree by instant, the one index of the sales table not needed by
  a lookup of a product or a return (the admin's list of sales orders by instant, and the windows'
  scans read by it);
- 6t, in place of 6 after step 5: the trial's table of `--only shape` (bench_shape), one table
  partitioned by a hash of the event id, unique in it, with BRIN indexes on the instant and on the
  writing transaction's id in place of the month partitions, the B-tree by instant, the sale id and
  the id table;
- 7g, in place of 7 after step 6: the queue rows grouped, one a batch and shard holding its sales
  as arrays (their ids, instants and boards), where today's statement writes one a sale and shard.

Views and wishes climb from their own floor (bench_engage._copy_floor: 200,000 views copied in
binary into the raw table itself, in one transaction) as POST /v1/engagements stores them, without
ids, 10,000 a batch:

1. the floor;
2. the batch's rows, 10,000 a transaction, each committed;
3. today's rows: binary rows made by Python (rankings.ingest.engagement.EngagementIngest.write,
   its queue statement not run: Python still groups the rows);
4. the queue rows, grouped by product, second and categories, inserted: today's write whole;
5. today's whole batch in process (rankings.ingest.engagement.engagements_ingest).

The rows of steps 2 to 7 are made once a run, beforehand, as today's ingest makes them. Every step,
the floors too, stores into empty tables, with the collector paused as today's batches pause it;
each run takes a ladder's steps in turn, from another first each time. Steps 3 to 7 write into
tables of a schema of their own, dropped at the end; step 8 and the views into the real tables.
Reported for each step: the rows a second, and the medians of its ratio to the floor and to the
step before within each run, with the CPU a row of this process and of its PostgreSQL backend. The
API's own figures over HTTP are `--only ingest`'s and `--only engage`'s.

    python -m bench --only ladder
"""

import datetime as dt
import json
import random
import statistics
import time
import uuid
from decimal import Decimal
from types import SimpleNamespace

from bench import harness

BATCH = 1_000
BATCHES = 100  # a run of each step from 2 on stores BATCHES × BATCH sales
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
CREATE TABLE ladder.noinstant (LIKE ladder.wide INCLUDING ALL);
CREATE INDEX ON ladder.noinstant (product_id, counted_at);
CREATE INDEX ON ladder.noinstant (return_of) WHERE return_of IS NOT NULL;
CREATE TABLE ladder.sale (LIKE rankings_sale INCLUDING ALL) PARTITION BY RANGE (counted_at);
CREATE TABLE ladder.saleid (LIKE rankings_saleid INCLUDING ALL);
CREATE TABLE ladder.pendingsale (LIKE rankings_pendingsale INCLUDING ALL);
CREATE TABLE ladder.pendingbatch (
    shard smallint NOT NULL, entry bigserial, sales integer NOT NULL, sale_ids bigint[] NOT NULL,
    counted timestamptz[] NOT NULL, categories text[] NOT NULL, PRIMARY KEY (shard, entry)
);
"""

# What each step stores into, emptied before it (the trial's table is bench_shape's).
_TABLES = (
    "ladder.pair, ladder.wide, ladder.indexed, ladder.noinstant, ladder.sale, ladder.saleid, ladder.pendingsale,"
    " ladder.pendingbatch, shape_trial.sale,"
    " rankings_sale, rankings_saleid, rankings_pendingsale, rankings_producttotal, rankings_ingestlog,"
    " rankings_engagement, rankings_pendingengagement"
)

# The floor's two tables as a batch of the API would have them: the stage emptied at each commit.
_PAIR_STAGE = (
    "CREATE TEMPORARY TABLE IF NOT EXISTS ladder_stage (id varchar(128), v bigint) ON COMMIT DELETE ROWS"
)
_TEMP_PAIR = "CREATE TEMPORARY TABLE IF NOT EXISTS ladder_pair (id varchar(128) PRIMARY KEY, v bigint)"

# Steps 4 and 5, and the trial's table: the staged sales whose event id is new, in event id order
# as today's statement takes them.
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

    from bench.bench_shape import _schema_create as trial_schema_create
    from rankings.engine.partitions import next_month

    trial_schema_create()
    with connection.cursor() as cursor:
        cursor.execute(_SCHEMA)
        for month in sorted(months):
            cursor.execute(
                f"CREATE TABLE ladder.sale_{month:%Y_%m} PARTITION OF ladder.sale FOR VALUES FROM (%s) TO (%s)",
                [month, next_month(month)],
            )


def _today_statement(*, queue: bool, grouped: bool = False) -> str:
    """Today's insert (rankings.ingest.sales._INSERT) into the ladder's tables, with or without its
    queue rows, or with them grouped (step 7g)."""
    from rankings.ingest.sales import _INSERT

    statement = (
        _INSERT.replace("rankings_saleid", "ladder.saleid")
        .replace("rankings_sale_id_seq", "ladder.sale_id_seq")
        .replace("rankings_pendingsale", "ladder.pendingsale")
        .replace("INSERT INTO rankings_sale", "INSERT INTO ladder.sale")
    )
    if "rankings_" in statement:
        raise RuntimeError("today's insert names a table the ladder does not copy")
    if queue and not grouped:
        return statement
    head, _, tail = statement.partition("), queued AS (")
    return head + (_GROUPED_QUEUE if grouped else ")") + tail[tail.index("\nSELECT ord") :]


# Step 7g: the queue rows of today's statement, one a batch and shard (its sales' ids, instants and
# lists of boards as arrays; each list one text, as the staged entries carry it).
_GROUPED_QUEUE = """), queued AS (
    INSERT INTO ladder.pendingbatch (shard, sales, sale_ids, counted, categories)
    SELECT split_part(entry, ':', 1)::smallint, count(*), array_agg(inserted.id),
           array_agg(inserted.counted_at), array_agg(split_part(entry, ':', 2))
    FROM inserted JOIN ingest_stage USING (event_id),
         unnest(string_to_array(ingest_stage.queue, ';')) AS entry
    GROUP BY 1
)"""


def _queue_of():
    """Today's queue entries of a row (rankings.ingest.batch._queue_of), under the active layout."""
    from rankings.engine.shards import layout_checked
    from rankings.engine.tree import version_tree
    from rankings.ingest.batch import _queue_of as queue_of

    number, layout = layout_checked()
    return queue_of(layout, version_tree(number))


def _batches(run: int, count: int = BATCHES) -> tuple[list[list[tuple]], list[bytes]]:
    """`count` batches of BATCH sales of run `run`: as today's staging table's rows, and as request bodies."""
    from bench.bench_ingest import _events
    from catalogue.money import to_cents
    from rankings.ingest.sales import event_digest

    queue_of = _queue_of()
    rng = random.Random(run)
    staged, bodies = [], []
    for _ in range(count):
        events = _events(BATCH, uuid.uuid4().hex[:12], rng)
        rows = []
        for index, event in enumerate(events):
            ts = dt.datetime.fromtimestamp(event["ts"], tz=dt.UTC)
            amount = Decimal(event["amount"])
            digest = event_digest({**event, "ts": ts, "amount": amount})
            queue = queue_of(SimpleNamespace(categories=event["categories"], product_id=event["productId"]))
            rows.append(
                (
                    index,
                    event["id"],
                    ts,
                    event["productId"],
                    ",".join(event["categories"]),
                    event["qty"],
                    to_cents(amount),
                    None,
                    ts,
                    digest,
                    queue,
                )
            )
        staged.append(rows)
        bodies.append(json.dumps({"events": events}).encode())
    return staged, bodies


def _pairs(batches: list[list[tuple]], *, temporary: bool) -> None:
    """The floor's two columns (here an event id and a number) of each batch, copied and inserted as
    the floor does, one transaction a batch."""
    from django.db import connection, transaction

    target = "ladder_pair" if temporary else "ladder.pair"
    for rows in batches:
        with transaction.atomic(), connection.cursor() as cursor:
            with cursor.copy("COPY ladder_stage (id, v) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row((row[1], row[6]))
            cursor.execute(f"INSERT INTO {target} SELECT * FROM ladder_stage ON CONFLICT DO NOTHING")


def _staged(batches: list[list[tuple]], statement: str) -> None:
    """Each batch copied into today's staging table under today's lock, then `statement`, one
    transaction a batch."""
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


def _today(bodies: list[bytes]) -> None:
    from bench.bench_shape import sales_today

    for body in bodies:
        if sales_today(body) != BATCH:
            raise RuntimeError("today's ingest did not store every sale of a batch")


def _view_batches(run: int, count: int = VIEW_BATCHES) -> tuple[list[list], list[bytes]]:
    """`count` batches of VIEW_BATCH views of run `run`: as today's rows, and as request bodies."""
    from bench.bench_engage import _views
    from rankings.engine.partitions import engagement_partitions_ensure
    from rankings.ingest.engagement import _Row

    rng = random.Random(1000 + run)
    batches, bodies = [], []
    for _ in range(count):
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


def _views_copied(batches: list[list]) -> None:
    """Each batch's views copied in binary into the raw table, as the floor copies them."""
    from django.db import connection, transaction

    from bench.bench_engage import FLOOR_COPY, FLOOR_COPY_TYPES

    for rows in batches:
        with transaction.atomic(), connection.cursor() as cursor, cursor.copy(FLOOR_COPY) as copy:
            copy.set_types(FLOOR_COPY_TYPES)
            for row in rows:
                copy.write_row((row.ts, row.product_id, row.kind, row.categories))


class _Unqueued:
    """A cursor that runs all of EngagementIngest.write but its queue statement, for views without
    ids (with ids, write would fetch the ids it claimed, which this cursor does not keep)."""

    def __init__(self, cursor, queue: str):
        self.cursor, self.queue = cursor, queue

    def execute(self, statement, params=None):
        if statement is not self.queue:
            self.cursor.execute(statement, params)

    def copy(self, statement):
        return self.cursor.copy(statement)


def _views_written(batches: list[list], *, queued: bool) -> None:
    """Each batch stored by today's write (its raw rows in binary, and if `queued`, its queue rows
    grouped), one transaction a batch; the layout and tree are read once, not in each batch."""
    from django.db import connection, transaction

    from rankings.ingest.engagement import _QUEUE, EngagementIngest

    queue_of = _queue_of()
    for rows in batches:
        with transaction.atomic(), connection.cursor() as cursor:
            EngagementIngest().write(cursor if queued else _Unqueued(cursor, _QUEUE), rows, queue_of)


def _views_today(bodies: list[bytes]) -> None:
    from bench.bench_shape import views_today

    for body in bodies:
        if views_today(body) != VIEW_BATCH:
            raise RuntimeError("today's ingest did not store every view of a batch")


def _sales_floor(_batches, _bodies) -> float:
    from bench.bench_ingest import _copy_floor

    return _copy_floor()


def _views_floor(_batches, _bodies) -> float:
    from bench.bench_engage import _copy_floor

    return _copy_floor(random.Random(0))


# Each ladder: its steps' names, what each adds, how it is run on (the rows made, the request
# bodies), and the step it adds to (5i, 6t and 7g each stand in the place of the step their number
# names). A floor times itself.
SALES = {
    "1": ("the floor: 200,000 rows, one COPY and one INSERT, temporary tables", _sales_floor, ""),
    "2": ("the batch's rows, 1,000 a transaction", lambda b, _: _pairs(b, temporary=True), "1"),
    "3": ("into a logged table", lambda b, _: _pairs(b, temporary=False), "2"),
    "4": (
        "a sale's columns, staged as today's",
        lambda b, _: _staged(b, _WIDE_INSERT.format(table="ladder.wide")),
        "3",
    ),
    "5": (
        "the sales table's other indexes",
        lambda b, _: _staged(b, _WIDE_INSERT.format(table="ladder.indexed")),
        "4",
    ),
    "5i": (
        "in place of 5, without the B-tree by instant",
        lambda b, _: _staged(b, _WIDE_INSERT.format(table="ladder.noinstant")),
        "4",
    ),
    "6": (
        "month partitions, checks, a sale id, the id table",
        lambda b, _: _staged(b, _today_statement(queue=False)),
        "5",
    ),
    "6t": (
        "in place of 6, the trial's table",
        lambda b, _: _staged(b, _WIDE_INSERT.format(table="shape_trial.sale")),
        "5",
    ),
    "7": ("the queue rows: today's statement", lambda b, _: _staged(b, _today_statement(queue=True)), "6"),
    "7g": (
        "in place of 7, the queue rows one a batch and shard",
        lambda b, _: _staged(b, _today_statement(queue=True, grouped=True)),
        "6",
    ),
    "8": ("today's whole batch, in process", lambda _, bodies: _today(bodies), "7"),
}
VIEWS = {
    "1": ("the floor: 200,000 views, one binary COPY into the raw table", _views_floor, ""),
    "2": ("the batch's rows, 10,000 a transaction", lambda b, _: _views_copied(b), "1"),
    "3": ("today's rows, made by Python", lambda b, _: _views_written(b, queued=False), "2"),
    "4": ("the queue rows, grouped", lambda b, _: _views_written(b, queued=True), "3"),
    "5": ("today's whole batch, in process", lambda _, bodies: _views_today(bodies), "4"),
}


def _timed(step, batches, bodies, rows: int) -> tuple[float, float, float]:
    """(rows/s, client CPU a row, PostgreSQL CPU a row) of one run of a step, into empty tables, the
    collector paused; a floor's rate as it times itself."""
    from django.db import connection

    from bench.bench_shape import _backend_cpu
    from rankings.ingest.batch import collector_paused

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {_TABLES}")
        cursor.execute("DROP TABLE IF EXISTS ladder_pair")
        cursor.execute(_PAIR_STAGE)
        cursor.execute(_TEMP_PAIR)
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    with collector_paused():
        cpu, backend_cpu, started = time.process_time(), _backend_cpu(backend), time.perf_counter()
        floor = step(batches, bodies)
        seconds = time.perf_counter() - started
    if floor is not None:
        return floor, float("nan"), float("nan")
    return rows / seconds, (time.process_time() - cpu) / rows, (_backend_cpu(backend) - backend_cpu) / rows


def _climbed(ladder: dict, batches, bodies, rows: int, run: int) -> dict[str, tuple[float, ...]]:
    """One run of a ladder, its steps from the `run`-th on: each step's rate, CPU a row, and ratios
    to the run's floor and to the step it adds to."""
    names = list(ladder)
    order = names[run % len(names) :] + names[: run % len(names)]
    timed = {name: _timed(ladder[name][1], batches, bodies, rows) for name in order}
    return {
        name: (
            *timed[name],
            timed[name][0] / timed["1"][0],
            timed[name][0] / timed[after][0] if after else 1.0,
        )
        for name, (_, _, after) in ladder.items()
    }


def run(table: harness.Table, runs: int = 3) -> harness.Table:
    from django.core.management import call_command
    from django.db import connection

    from bench.bench_shape import sales_today, views_today
    from rankings.engine.partitions import month_of

    harness.reset()
    call_command("seed_demo", "--sales", "0", "--no-progress", verbosity=0)
    now = dt.datetime.now(dt.UTC)
    _schema_create({month_of(now - dt.timedelta(days=1)), month_of(now)})
    # What a process does once (imports, statements, the version and its layout) is not timed.
    sales_today(_batches(-1, count=1)[1][0])
    views_today(_view_batches(-1, count=1)[1][0])
    sales: list[dict] = []
    views: list[dict] = []
    try:
        for number in range(runs):
            sales.append(_climbed(SALES, *_batches(number), BATCH * BATCHES, number))
            views.append(_climbed(VIEWS, *_view_batches(number), VIEW_BATCH * VIEW_BATCHES, number))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP SCHEMA IF EXISTS ladder, shape_trial CASCADE")
    _ladder_added(table, "sales", SALES, sales)
    _ladder_added(table, "views", VIEWS, views)
    return table


def _ladder_added(table: harness.Table, kind: str, ladder: dict, runs: list[dict]) -> None:
    """A ladder's rows: each step's median rate and CPU, and its median ratios within a run."""
    for name, (what, _, after) in ladder.items():
        rate, client, backend, of_floor, of_after = (
            statistics.median(values) for values in zip(*(figures[name] for figures in runs), strict=True)
        )
        if not after:
            table.add(f"{kind} {name}. {what}", f"{rate:,.0f} rows/s")
            continue
        table.add(
            f"{kind} {name}. + {what}",
            f"{rate:,.0f} rows/s",
            "the floor of each run",
            f"{of_floor:.2f}x",
            note=f"{of_after:.2f}x of step {after}; CPU a row: client {client * 1e6:.1f} µs,"
            f" PostgreSQL {backend * 1e6:.1f} µs",
        )

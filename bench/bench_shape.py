"""The storage shape ingest would take next, tried beside the one it has (`--only shape`, not in CI).

The trial shape writes a sale once: one table, partitioned by a hash of the event id so that the
id is unique in it (no `rankings_saleid`), and no work queue (no `rankings_pendingsale`): each row
carries the id of the transaction that wrote it, for a claim in commit order by transaction id
(docs/architecture.md, "Ingest: the next shape"). Its indexes are the event id's, a partial one on
`return_of`, and two BRIN indexes (the instant counted at, the transaction id), a few pages each.
Views and wishes go the same way: copied straight into the raw table, with no queue rows.

Events are read from the request's bytes by msgspec structs, which check each field's type, length
and pattern in one compiled pass. A sale's digest is msgspec's JSON of the same canonical list.

What the trial leaves out, so that its figures are bounds of what it does: returns and the
originals they are checked against, events without categories (the catalogue's are then looked up),
the per-event reasons of a batch holding a bad event (the trial takes whole valid batches only;
another batch would go the per-event way), and the HTTP layer. Both shapes are timed the same way,
in process from the request's bytes, each against the floor of its kind measured in the same run
(bench_ingest, bench_engage). The trial tables live in a schema of their own, dropped at the end.

    python -m bench --only shape
"""

import datetime as dt
import hashlib
import json
import multiprocessing
import random
import statistics
import time
import uuid
from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from bench import harness

BATCHES = 40  # of 1,000 sales per run of one client; each of four processes sends half as many
VIEW_BATCHES = 10  # of 10,000 views per run
PROCESSES = 4

EventId = Annotated[str, Meta(pattern=r"^[\x20-\x7e]{1,128}$")]
ProductId = Annotated[str, Meta(pattern=r"^[A-Za-z0-9._:-]{1,64}$")]
Slug = Annotated[str, Meta(pattern=r"^[-a-zA-Z0-9_]{1,50}$")]
Slugs = Annotated[list[Slug], Meta(max_length=20)]
Amount = Annotated[str, Meta(pattern=r"^([0-9]{1,12}(\.[0-9]{0,2})?|\.[0-9]{1,2})$")]


class SaleEvent(Struct):
    id: EventId
    ts: float
    productId: ProductId
    qty: Annotated[int, Meta(ge=1, le=1_000_000)]
    categories: Slugs | None = None
    amount: Amount | None = None


class Sales(Struct):
    events: list[SaleEvent]


class ViewEvent(Struct):
    ts: float
    productId: ProductId
    kind: Literal["view", "wish"]
    categories: Slugs | None = None
    id: EventId | None = None


class Views(Struct):
    events: list[ViewEvent]


_sales = msgspec.json.Decoder(Sales)
_views = msgspec.json.Decoder(Views)
_canonical = msgspec.json.Encoder().encode

_SCHEMA = """
DROP SCHEMA IF EXISTS shape_trial CASCADE;
CREATE SCHEMA shape_trial;
CREATE TABLE shape_trial.sale (
    event_id varchar(128) NOT NULL, ts timestamptz NOT NULL, product_id varchar(64) NOT NULL,
    categories varchar(50)[] NOT NULL, qty integer NOT NULL, amount_cents bigint NOT NULL,
    return_of varchar(128), counted_at timestamptz NOT NULL, received_at timestamptz NOT NULL,
    digest varchar(32) NOT NULL, xid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint
) PARTITION BY HASH (event_id);
CREATE UNIQUE INDEX ON shape_trial.sale (event_id);
CREATE INDEX ON shape_trial.sale (return_of) WHERE return_of IS NOT NULL;
CREATE INDEX ON shape_trial.sale USING brin (counted_at);
CREATE INDEX ON shape_trial.sale USING brin (xid);
CREATE TABLE shape_trial.producttotal (
    product_id varchar(64) PRIMARY KEY, units bigint NOT NULL, revenue_cents bigint NOT NULL,
    first_sold_at timestamptz,
    CHECK (units <= 9007199254740991 AND revenue_cents <= 9007199254740991)
);
CREATE TABLE shape_trial.engagement (
    ts timestamptz NOT NULL, product_id varchar(64) NOT NULL, kind varchar(4) NOT NULL,
    categories varchar(50)[] NOT NULL, received_at timestamptz NOT NULL,
    xid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint
);
CREATE INDEX ON shape_trial.engagement USING brin (xid);
"""
_PARTITIONS = 8

_STAGE = (
    "CREATE TEMPORARY TABLE IF NOT EXISTS shape_stage (event_id varchar(128), ts timestamptz,"
    " product_id varchar(64), categories text, qty integer, amount_cents bigint, digest varchar(32))"
    " ON COMMIT DELETE ROWS"
)
_STAGE_TYPES = ["varchar", "timestamptz", "varchar", "text", "int4", "int8", "varchar"]

# The sales whose id is new, and the product totals they add to, in one statement; a total past
# the bound fails the check, and such a batch would go the per-event way.
_INSERT = """
WITH stored AS (
    INSERT INTO shape_trial.sale
        (event_id, ts, product_id, categories, qty, amount_cents, counted_at, received_at, digest)
    SELECT event_id, ts, product_id, string_to_array(categories, ','), qty, amount_cents, ts, now(), digest
    FROM shape_stage ORDER BY event_id
    ON CONFLICT (event_id) DO NOTHING
    RETURNING product_id, qty, amount_cents, counted_at
), totals AS (
    INSERT INTO shape_trial.producttotal AS total (product_id, units, revenue_cents, first_sold_at)
    SELECT product_id, sum(qty), sum(amount_cents), min(counted_at) FROM stored
    GROUP BY product_id ORDER BY product_id
    ON CONFLICT (product_id) DO UPDATE SET units = total.units + excluded.units,
        revenue_cents = total.revenue_cents + excluded.revenue_cents,
        first_sold_at = least(total.first_sold_at, excluded.first_sold_at)
)
SELECT count(*) FROM stored
"""


def _cents(amount: str) -> int:
    whole, _, fraction = amount.partition(".")
    return int(whole or 0) * 100 + int((fraction + "00")[:2])


def sales_trial(body: bytes) -> int:
    """Store a batch of sales in the trial shape; the number stored."""
    from django.db import connection, transaction

    from rankings.ingest.batch import _PLACEHOLDER_PRODUCTS

    rows = []
    first: dict[str, str] = {}  # product -> the categories of its first sale, for placeholders
    for event in _sales.decode(body).events:
        categories = list(dict.fromkeys(event.categories or ()))
        cents = _cents(event.amount) if event.amount is not None else 0
        canonical = [
            event.id,
            round(event.ts, 6),
            event.productId,
            sorted(categories),
            event.qty,
            cents,
            None,
        ]
        digest = hashlib.md5(_canonical(canonical), usedforsecurity=False).hexdigest()
        named = ",".join(categories)
        first.setdefault(event.productId, named)
        ts = dt.datetime.fromtimestamp(event.ts, dt.UTC)
        rows.append((event.id, ts, event.productId, named, event.qty, cents, digest))
    products = sorted(first)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SELECT pg_advisory_xact_lock_shared(369129, 0); {_STAGE}")
        cursor.execute(_PLACEHOLDER_PRODUCTS, [products, [first[p] for p in products]])
        with cursor.copy("COPY shape_stage FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_STAGE_TYPES)
            for row in rows:
                copy.write_row(row)
        cursor.execute(_INSERT)
        (stored,) = cursor.fetchone()
        cursor.execute(
            "INSERT INTO rankings_ingestlog (at, source, accepted, duplicates, rejected, too_old)"
            " VALUES (now(), 'shape', %s, 0, 0, 0)",
            [stored],
        )
    return stored


def views_trial(body: bytes) -> int:
    """Store a batch of views and wishes in the trial shape; the number stored."""
    from django.db import connection, transaction

    received = dt.datetime.now(dt.UTC).isoformat()
    stamps: dict[float, str] = {}
    lines = []
    for event in _views.decode(body).events:
        stamp = stamps.get(event.ts)
        if stamp is None:
            stamp = stamps[event.ts] = dt.datetime.fromtimestamp(event.ts, dt.UTC).isoformat()
        categories = ",".join(event.categories or ())
        lines.append(f"{stamp}\t{event.productId}\t{event.kind}\t{{{categories}}}\t{received}\n")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock_shared(369129, 0)")
        with cursor.copy(
            "COPY shape_trial.engagement (ts, product_id, kind, categories, received_at) FROM STDIN"
        ) as copy:
            copy.write("".join(lines))
        cursor.execute(
            "INSERT INTO rankings_ingestlog (at, source, accepted, duplicates, rejected, too_old)"
            " VALUES (now(), 'shape', %s, 0, 0, 0)",
            [len(lines)],
        )
    return len(lines)


def sales_today(body: bytes) -> int:
    """Store a batch of sales as ingest does today (the view decodes the body the same way)."""
    from rankings.ingest.events import json_decoded
    from rankings.ingest.sales import sales_ingest

    events = json_decoded(body, lambda: json.loads(body))["events"]  # type: ignore[index]
    return sales_ingest(events=events, source="bench").accepted


def views_today(body: bytes) -> int:
    """Store a batch of views and wishes as ingest does today."""
    from rankings.ingest.engagement import engagements_ingest
    from rankings.ingest.events import json_decoded

    events = json_decoded(body, lambda: json.loads(body))["events"]  # type: ignore[index]
    return engagements_ingest(events=events, source="bench").accepted


CLAIMED = 5_000  # sales a tick claims, in each shape

# The trial's claim of a shard's sales: the rows written by transactions from the shard's cursor up
# to its snapshot's xmin, each with the boards it counts in (`all` and its categories; a row would
# carry those of each shard, as a queue row does today), into the tick's facts.
_CLAIM_TRIAL = """
INSERT INTO tick_facts (category, product_id, t, qty, cents)
SELECT u.category, s.product_id, floor(extract(epoch FROM s.counted_at))::bigint, s.qty, s.amount_cents
FROM shape_trial.sale s CROSS JOIN LATERAL unnest(s.categories || 'all'::varchar) AS u(category)
WHERE s.xid >= %(cursor)s AND s.xid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
"""


def _claim_seconds(shape: str) -> float:
    """Seconds of PostgreSQL a tick's claim of CLAIMED sales takes (rolled back): today's, from the
    queue of the shard of `all`; the trial's, of the last CLAIMED sales stored."""
    from django.db import connection, transaction

    from rankings.engine import batches
    from rankings.engine.shards import ALL, active

    class _RolledBack(Exception):
        pass

    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(batches._FACTS_TABLE)
            if shape == "today":
                params = {"shard": active().layout.shard_of(ALL), "until": None, "limit": CLAIMED}
                cursor.execute(batches._CLAIM_LAST, params)
                (last,) = cursor.fetchone()
                started = time.perf_counter()
                cursor.execute(batches._CLAIM, {**params, "last": last})
            else:
                cursor.execute(
                    "SELECT xid FROM shape_trial.sale ORDER BY xid DESC OFFSET %s LIMIT 1", [CLAIMED - 1]
                )
                (first,) = cursor.fetchone()
                started = time.perf_counter()
                cursor.execute(_CLAIM_TRIAL, {"cursor": first})
            seconds = time.perf_counter() - started
            raise _RolledBack
    except _RolledBack:
        return seconds


def _sales_bodies(batches: int, seed: int) -> list[bytes]:
    from bench.bench_ingest import _events

    rng = random.Random(seed)
    return [
        json.dumps({"events": _events(1000, uuid.uuid4().hex[:12], rng)}).encode() for _ in range(batches)
    ]


def _client(task: tuple[str, int, int, float]) -> tuple[int, float, float]:
    """One client's run: (events stored, when it started, when it ended). Its bodies are made
    first; it starts at `at`, with the other processes of its run."""
    path, batches, seed, at = task
    harness.setup()
    from django.db import connection

    store = {"trial": sales_trial, "today": sales_today}[path]
    bodies = _sales_bodies(batches, seed)
    connection.ensure_connection()
    time.sleep(max(0.0, at - time.time()))
    started = time.time()
    stored = sum(store(body) for body in bodies)
    return stored, started, time.time()


def _sales_rates(path: str, run: int) -> tuple[float, float]:
    """Sales/s of one client, then of PROCESSES clients at once."""
    stored, started, ended = _client((path, BATCHES, run, 0.0))
    assert stored == BATCHES * 1000, f"{path}: {stored} stored"
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        at = time.time() + 15  # every process set up and its bodies made
        tasks = [(path, BATCHES // 2, 100 * run + k + 1, at) for k in range(PROCESSES)]
        results = pool.map(_client, tasks)
    together = sum(r[0] for r in results) / (max(r[2] for r in results) - min(r[1] for r in results))
    return stored / (ended - started), together


def _views_rate(store, rng: random.Random) -> float:
    from bench.bench_engage import BATCH
    from bench.bench_engage import _views as views

    bodies = [json.dumps({"events": views(BATCH, rng)}).encode() for _ in range(VIEW_BATCHES)]
    started = time.perf_counter()
    stored = sum(store(body) for body in bodies)
    assert stored == BATCH * VIEW_BATCHES
    return stored / (time.perf_counter() - started)


def run(table: harness.Table, runs: int = 3) -> harness.Table:
    from django.core.management import call_command
    from django.db import connection

    from bench import bench_engage, bench_ingest
    from rankings.engine.partitions import engagement_partitions_ensure

    harness.reset()
    call_command("seed_demo", "--sales", "0", "--no-progress", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(_SCHEMA)
        for remainder in range(_PARTITIONS):
            cursor.execute(
                f"CREATE TABLE shape_trial.sale_{remainder} PARTITION OF shape_trial.sale"
                f" FOR VALUES WITH (MODULUS {_PARTITIONS}, REMAINDER {remainder})"
            )
    engagement_partitions_ensure([dt.datetime.now(dt.UTC) - dt.timedelta(seconds=s) for s in (0, 2)])
    rng = random.Random(0)
    figures: dict[str, list[float]] = {}
    for run_number in range(runs):
        for path in ("today", "trial"):
            one, together = _sales_rates(path, run_number)
            figures.setdefault(f"sales {path} one", []).append(one)
            figures.setdefault(f"sales {path} four", []).append(together)
        figures.setdefault("sales floor", []).append(bench_ingest._copy_floor())
        for shape in ("today", "trial"):
            figures.setdefault(f"claim {shape}", []).append(_claim_seconds(shape))
        figures.setdefault("views today", []).append(_views_rate(views_today, rng))
        figures.setdefault("views trial", []).append(_views_rate(views_trial, rng))
        figures.setdefault("views floor", []).append(bench_engage._copy_floor(rng))
    median = {name: statistics.median(values) for name, values in figures.items()}
    with connection.cursor() as cursor:
        cursor.execute("DROP SCHEMA shape_trial CASCADE")
    shapes = {"today": "today's shape", "trial": "the trial shape"}
    rows = [
        ("sales", "1,000 sales, one client", "COPY + INSERT ON CONFLICT", "one"),
        ("sales", "1,000 sales, four clients", "COPY + INSERT ON CONFLICT", "four"),
        ("views", "10,000 views, one client", "COPY", ""),
    ]
    for kind, what, floor, clients in rows:
        for shape, label in shapes.items():
            rate = median[f"{kind} {shape} {clients}".rstrip()]
            table.add(
                f"{what}, {label}, in process",
                f"{rate:,.0f} events/s",
                f"{floor} {median[f'{kind} floor']:,.0f} rows/s",
                f"{rate / median[f'{kind} floor']:.2f}x",
            )
    for shape, label in shapes.items():
        table.add(
            f"a tick's claim of {CLAIMED:,} sales, {label}", f"{median[f'claim {shape}'] * 1000:.1f} ms"
        )
    return table

"""The storage shape ingest would take next, tried beside the one it has (`--only shape`, not in CI).

The trial shape writes a sale once: one table, partitioned by a hash of the event id so that the
id is unique in it (no `rankings_saleid`), and no work queue (no `rankings_pendingsale`): each row
carries the id of the transaction that wrote it, for a claim in commit order by transaction id
(docs/architecture.md, "Ingest: the next shape, tried"). The table keeps today's columns but the
sale id, today's checks and its index by product (no foreign key, as today's); the instant
counted at and the transaction id are indexed by BRIN (a few pages each) where today's table
keeps a B-tree on `counted_at` and is partitioned by month. Views and wishes go the same way:
copied into a raw table partitioned by day as today's, without its id and key, and no queue rows.

Events are read from the request's bytes by msgspec structs, which check each field's type, length
and pattern in one compiled pass; what the structs cannot say (a dot segment, the board `all`, a
`ts` too far ahead or out of range, too many categories) is checked after, as today. A sale's
digest is today's (rankings.ingest.sales.event_digest). Each batch then does, in one transaction,
what today's does but the queue: the layout lock and check, categories marked and placeholders
made, the ingest log and the metric counts, the ticks woken. The product totals are added in the
insert's own statement, with the bound (rankings.ingest.sales.MAX_PRODUCT_TOTAL) a check of the
table: a batch past it would be tried again the way today's is, locked.

A third way stores sales in the trial shape with less Python: the structs' columns are sent as
one text each, and PostgreSQL makes the rows, checks what the structs cannot, and writes today's
digests (`sales_trial_sql`; checked equal to today's on random events before the runs).

A fourth way overlaps the two sides of one client (`sales_trial_streamed`): its rows go by one COPY
straight into the sales table (no staging table, no INSERT after it), handed to psycopg's writer
thread a hundred at a time, so that PostgreSQL can insert them while Python makes the next ones
(little of it overlaps: docs/architecture.md); their digests are today's, written by Python without
json.dumps (checked equal to today's with the third's). A COPY meeting an id taken before fails
whole, and the batch would go today's way.

What the trial leaves out, so that its figures are bounds of what it does: returns, sales without
categories or an amount, views with an id (each goes the per-event way today's takes), a batch
holding a bad event (the same), a batch whose ids were stored before (it reads no digests first:
the insert skips taken ids and only those are looked up after), and the HTTP layer. Both shapes
are timed the same way, in process from the request's bytes, garbage collector paused, in turns
(each run starts with the other), each against the floor of its kind measured in the same run
(bench_ingest, bench_engage). A tick's claim is timed in each, of the same oldest sales, onto the
shard of `all`. The trial's tables live in a schema of their own, dropped at the end.

    python -m bench --only shape
"""

import datetime as dt
import json
import multiprocessing
import os
import random
import statistics
import time
import uuid
from decimal import Decimal
from hashlib import md5
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from bench import harness

BATCHES = 40  # of 1,000 sales per run of one client; each of four processes sends half as many
VIEW_BATCHES = 10  # of 10,000 views per run
PROCESSES = 4
CLAIMED = 5_000  # sales a tick claims, in each shape
SALES_WAYS = ("today", "trial", "sql", "streamed")  # each run takes them in turn, from another first

# \Z, not $: msgspec searches a pattern, and $ would let a line end through.
EventId = Annotated[str, Meta(pattern=r"^[\x20-\x7e]{1,128}\Z")]
ProductId = Annotated[str, Meta(pattern=r"^[A-Za-z0-9._:-]{1,64}\Z")]
Slug = Annotated[str, Meta(pattern=r"^[-a-zA-Z0-9_]{1,50}\Z")]
Amount = Annotated[str, Meta(pattern=r"^([0-9]{1,12}(\.[0-9]{0,2})?|\.[0-9]{1,2})\Z")]


class SaleEvent(Struct):
    id: EventId
    ts: int | float
    productId: ProductId
    qty: Annotated[int, Meta(ge=1, le=1_000_000)]
    categories: list[Slug]
    amount: Amount


class Sales(Struct):
    events: list[SaleEvent]


class ViewEvent(Struct):
    ts: int | float
    productId: ProductId
    kind: Literal["view", "wish"]
    categories: list[Slug]


class Views(Struct):
    events: list[ViewEvent]


_sales = msgspec.json.Decoder(Sales)
_views = msgspec.json.Decoder(Views)


class _Other(Exception):
    """A batch the trial does not take: today's per-event way would."""


class _Row:
    """What the catalogue statements shared with today's ingest read of an event."""

    __slots__ = ("product_id", "categories")

    def __init__(self, product_id: str, categories: list[str]):
        self.product_id, self.categories = product_id, categories


def _checked(events, *, now: dt.datetime) -> list[tuple[dt.datetime, list[str]]]:
    """Each event's instant and categories (each once), with what the structs cannot check."""
    from rankings.conf import rankings_settings
    from rankings.engine.shards import ALL

    ahead = now + dt.timedelta(seconds=rankings_settings.MAX_FUTURE_SECONDS)
    most = rankings_settings.MAX_EVENT_CATEGORIES
    instants: dict[int | float, dt.datetime] = {}
    checked = []
    for event in events:
        instant = instants.get(event.ts)
        if instant is None:
            try:
                instant = instants[event.ts] = dt.datetime.fromtimestamp(event.ts, dt.UTC)
            except (OverflowError, OSError, ValueError):
                raise _Other from None
        categories = list(dict.fromkeys(event.categories))
        if (
            instant > ahead
            or event.productId in (".", "..")
            or ALL in categories
            or not categories
            or len(event.categories) > most
        ):
            raise _Other
        checked.append((instant, categories))
    return checked


_SCHEMA = """
DROP SCHEMA IF EXISTS shape_trial CASCADE;
CREATE SCHEMA shape_trial;
CREATE TABLE shape_trial.sale (
    event_id varchar(128) NOT NULL,
    ts timestamptz NOT NULL,
    product_id varchar(64) NOT NULL,
    categories varchar(50)[] NOT NULL,
    qty integer NOT NULL CHECK (qty <> 0),
    amount_cents bigint NOT NULL CHECK (amount_cents >= 0),
    return_of varchar(128),
    counted_at timestamptz NOT NULL,
    received_at timestamptz NOT NULL,
    digest varchar(32) NOT NULL,
    xid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint,
    CHECK (qty < 0 AND return_of IS NOT NULL OR qty > 0 AND return_of IS NULL)
) PARTITION BY HASH (event_id);
CREATE UNIQUE INDEX ON shape_trial.sale (event_id);
CREATE INDEX ON shape_trial.sale (product_id, counted_at);
CREATE INDEX ON shape_trial.sale (return_of) WHERE return_of IS NOT NULL;
CREATE INDEX ON shape_trial.sale USING brin (counted_at);
CREATE INDEX ON shape_trial.sale USING brin (xid);
CREATE TABLE shape_trial.producttotal (
    product_id varchar(64) PRIMARY KEY, units bigint NOT NULL, revenue_cents bigint NOT NULL,
    first_sold_at timestamptz,
    CHECK (units <= 9007199254740991 AND revenue_cents <= 9007199254740991)
);
CREATE TABLE shape_trial.engagement (
    event_id varchar(128), ts timestamptz NOT NULL, product_id varchar(64) NOT NULL,
    kind varchar(4) NOT NULL CHECK (kind IN ('view', 'wish')), categories varchar(50)[] NOT NULL,
    received_at timestamptz NOT NULL, xid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint
) PARTITION BY RANGE (ts);
CREATE INDEX ON shape_trial.engagement USING brin (xid);
CREATE TABLE shape_trial.cursor (shard integer PRIMARY KEY, xid bigint NOT NULL);
"""
_PARTITIONS = 8


def _schema_create() -> None:
    from django.db import connection

    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with connection.cursor() as cursor:
        cursor.execute(_SCHEMA)
        for remainder in range(_PARTITIONS):
            cursor.execute(
                f"CREATE TABLE shape_trial.sale_{remainder} PARTITION OF shape_trial.sale"
                f" FOR VALUES WITH (MODULUS {_PARTITIONS}, REMAINDER {remainder})"
            )
        for day in (-1, 0, 1):
            start = today + dt.timedelta(days=day)
            cursor.execute(
                f"CREATE TABLE shape_trial.engagement_{day + 1} PARTITION OF shape_trial.engagement"
                " FOR VALUES FROM (%s) TO (%s)",
                [start, start + dt.timedelta(days=1)],
            )


def _trial_emptied() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE shape_trial.sale, shape_trial.producttotal")


_STAGE = (
    "CREATE TEMPORARY TABLE IF NOT EXISTS shape_stage (event_id varchar(128), ts timestamptz,"
    " product_id varchar(64), categories text, qty integer, amount_cents bigint, digest varchar(32))"
    " ON COMMIT DELETE ROWS"
)
_STAGE_TYPES = ["varchar", "timestamptz", "varchar", "text", "int4", "int8", "varchar"]

# After the sales whose id is new (`stored`), the product totals they add to, in the same statement.
# Products' totals added to, from `{sold}`: rows of (product, units, cents, first instant) in product order.
_TOTALS_ADD = """
INSERT INTO shape_trial.producttotal AS total (product_id, units, revenue_cents, first_sold_at)
{sold}
ON CONFLICT (product_id) DO UPDATE SET units = total.units + excluded.units,
    revenue_cents = total.revenue_cents + excluded.revenue_cents,
    first_sold_at = least(total.first_sold_at, excluded.first_sold_at)
"""

_TOTALS_ADDED = (
    "\n), totals AS ("
    + _TOTALS_ADD.format(
        sold="SELECT product_id, sum(qty), sum(amount_cents), min(counted_at) FROM stored"
        " GROUP BY product_id ORDER BY product_id"
    )
    + ")\nSELECT count(*) FROM stored\n"
)

# The sales whose id is new, and the product totals they add to, in one statement.
_INSERT = (
    """
WITH stored AS (
    INSERT INTO shape_trial.sale
        (event_id, ts, product_id, categories, qty, amount_cents, counted_at, received_at, digest)
    SELECT event_id, ts, product_id, string_to_array(categories, ','), qty, amount_cents, ts, now(), digest
    FROM shape_stage ORDER BY event_id
    ON CONFLICT (event_id) DO NOTHING
    RETURNING product_id, qty, amount_cents, counted_at
"""
    + _TOTALS_ADDED
)


def _logged(cursor, kind_counts: dict[str, int], stored: int) -> None:
    """The ingest log's row and the metric counts, as today's batch writes them."""
    from rankings.engine.counts import counts_add
    from rankings.ingest.batch import INGESTED

    cursor.execute(
        "INSERT INTO rankings_ingestlog (at, source, accepted, duplicates, rejected, too_old)"
        " VALUES (now(), 'shape', %s, 0, 0, 0)",
        [stored],
    )
    counts_add(INGESTED, {f"{kind}:accepted": count for kind, count in kind_counts.items()})


def _catalogue_ready(cursor, rows: list, *, then: str = ""):
    """A sales batch's first steps, as today's: the layout lock (and `then`, in the same round trip),
    the layout and tree it counts under, the categories marked and the placeholders made."""
    from rankings.engine.locks import LAYOUT_NAMESPACE
    from rankings.engine.shards import layout_checked
    from rankings.engine.tree import version_tree
    from rankings.ingest.batch import _ensure_categories, _placeholders_create

    cursor.execute(f"SELECT pg_advisory_xact_lock_shared({LAYOUT_NAMESPACE}, 0); {then}")
    number, layout = layout_checked()
    _ensure_categories({slug for row in rows for slug in row.categories})
    _placeholders_create(cursor, rows)
    return layout, version_tree(number)


def sales_trial(body: bytes) -> int:
    """Store a batch of sales in the trial shape; the number stored."""
    from django.db import connection, transaction

    from catalogue.money import to_cents
    from rankings.ingest.batch import collector_paused
    from rankings.ingest.sales import event_digest
    from rankings.ingest.wake import tick_wake_on_commit

    with collector_paused():
        events = _sales.decode(body).events
        checked = _checked(events, now=dt.datetime.now(dt.UTC))
        rows, kept = [], []
        for event, (instant, categories) in zip(events, checked, strict=True):
            amount = Decimal(event.amount)
            data = {
                "id": event.id,
                "ts": instant,
                "productId": event.productId,
                "categories": categories,
                "qty": event.qty,
                "amount": amount,
            }
            digest = event_digest(data)
            rows.append(
                (
                    event.id,
                    instant,
                    event.productId,
                    ",".join(categories),
                    event.qty,
                    to_cents(amount),
                    digest,
                )
            )
            kept.append(_Row(event.productId, categories))
        with transaction.atomic(), connection.cursor() as cursor:
            layout, tree = _catalogue_ready(cursor, kept, then=_STAGE)
            with cursor.copy("COPY shape_stage FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(_STAGE_TYPES)
                for row in rows:
                    copy.write_row(row)
            cursor.execute(_INSERT)
            (stored,) = cursor.fetchone()
            if stored != len(rows):
                raise _Other  # ids taken before: today's way looks up which
            _logged(cursor, {"sale": stored}, stored)
            tick_wake_on_commit(layout, {tree.expand(row.categories) for row in kept})
    return stored


# The trial's events as the structs read them, sent as one text of lines a column (none of their
# values holds a line end: the patterns say so), each event's categories once each, in byte order;
# its row and today's digest written by SQL: the md5 of the text json.dumps writes of [id, ts
# rounded to the microsecond, product, sorted categories, qty, cents, returnOf]
# (rankings.ingest.sales.event_digest; a whole number of seconds is written with ".0", as Python
# writes a float; product ids and slugs need no escaping, their characters are fixed). An instant is
# read as the decimal sent: one finer than a microsecond, which Python rounds from its nearest double
# and PostgreSQL's to_timestamp from a product of doubles (the two differ at a half), is left to
# today's way, as is an event failing what the structs cannot check (the dots, `all`, an instant too
# far ahead): it is not stored, and a batch with fewer stored than sent goes today's way.
_EVENTS_SENT = """
WITH sent AS (
    SELECT e.id, to_timestamp(e.ts::float8) AS ts, scale(e.ts) AS places, e.product_id, e.qty,
           (e.amount * 100)::bigint AS amount_cents, string_to_array(e.categories, ',') AS categories
    FROM unnest(
        string_to_array(%(ids)s, E'\\n'), string_to_array(%(instants)s, E'\\n')::numeric[],
        string_to_array(%(products)s, E'\\n'), string_to_array(%(qtys)s, ',')::integer[],
        string_to_array(%(categories)s, E'\\n'), string_to_array(%(amounts)s, ',')::numeric[]
    ) AS e(id, ts, product_id, qty, categories, amount)
), events AS (
    SELECT sent.*, md5(
        '[' || to_json(id)::text || ', '
        || CASE WHEN seconds = trunc(seconds) THEN trunc(seconds)::bigint::text || '.0' ELSE seconds::text END
        || ', "' || product_id || '", ["' || array_to_string(categories, '", "') || '"], '
        || qty || ', ' || amount_cents || ', null]'
    ) AS digest
    FROM sent CROSS JOIN LATERAL (SELECT extract(epoch FROM sent.ts)::float8 AS seconds) AS t
    WHERE places <= 6 AND ts <= now() + make_interval(secs => %(ahead)s) AND product_id NOT IN ('.', '..')
      AND NOT 'all' = ANY(categories)
)"""

_INSERT_SENT = (
    _EVENTS_SENT
    + """, stored AS (
    INSERT INTO shape_trial.sale
        (event_id, ts, product_id, categories, qty, amount_cents, counted_at, received_at, digest)
    SELECT id, ts, product_id, categories, qty, amount_cents, ts, now(), digest FROM events ORDER BY id
    ON CONFLICT (event_id) DO NOTHING
    RETURNING product_id, qty, amount_cents, counted_at
"""
    + _TOTALS_ADDED
)


def _columns(events) -> dict:
    """The statement's parameters: the events' columns, each one text; None if an event names more
    categories than a sale may (today's way rejects it)."""
    from rankings.conf import rankings_settings

    most = rankings_settings.MAX_EVENT_CATEGORIES
    categories = []
    for event in events:
        if not 0 < len(event.categories) <= most:
            return None
        categories.append(",".join(sorted(set(event.categories))))
    return {
        "ids": "\n".join([event.id for event in events]),
        "instants": "\n".join([repr(event.ts) for event in events]),
        "products": "\n".join([event.productId for event in events]),
        "qtys": ",".join([str(event.qty) for event in events]),
        "categories": "\n".join(categories),
        "amounts": ",".join([event.amount for event in events]),
        "ahead": rankings_settings.MAX_FUTURE_SECONDS,
    }


def sales_trial_sql(body: bytes) -> int:
    """Store a batch of sales in the trial shape, the rows and digests made by PostgreSQL from the
    columns the structs read; the number stored."""
    from django.db import connection, transaction

    from rankings.ingest.batch import collector_paused
    from rankings.ingest.wake import tick_wake_on_commit

    with collector_paused():
        events = _sales.decode(body).events
        kept: dict[tuple[str, tuple[str, ...]], _Row] = {}  # what the catalogue statements read
        for event in events:
            key = (event.productId, tuple(event.categories))
            if key not in kept:
                kept[key] = _Row(event.productId, list(dict.fromkeys(event.categories)))
        rows = list(kept.values())
        with transaction.atomic(), connection.cursor() as cursor:
            layout, tree = _catalogue_ready(cursor, rows)
            columns = _columns(events)
            if columns is None:
                raise _Other
            cursor.execute(_INSERT_SENT, columns)
            (stored,) = cursor.fetchone()
            if stored != len(events):
                raise _Other  # checks failed or ids were taken before: today's way says which
            _logged(cursor, {"sale": stored}, stored)
            tick_wake_on_commit(layout, {tree.expand(row.categories) for row in rows})
    return stored


# The product totals of a batch stored by `sales_trial_streamed`, added once its sales are in.
_TOTALS_STREAMED = _TOTALS_ADD.format(
    sold="SELECT * FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::timestamptz[]) ORDER BY 1"
)

STREAMED_LINES = 100  # rows handed to the writer thread at a time

_STREAMED_COLUMNS = "event_id, ts, product_id, categories, qty, amount_cents, counted_at, received_at, digest"


def _cents(amount: str) -> int:
    """The cents of an amount the struct's pattern took (digits, at most two after a point)."""
    whole, _, fraction = amount.partition(".")
    return int(whole or 0) * 100 + int((fraction + "00")[:2])


_json_text = json.JSONEncoder().encode


def _digest_text(event, instant: dt.datetime, categories: list[str], cents: int) -> str:
    """The text today's digest hashes (rankings.ingest.sales.event_digest: json.dumps of [id, ts to
    the microsecond, product, sorted categories, qty, cents, returnOf]), written directly: a product
    id and a slug need no escaping, and an id only when it holds a quote or a backslash (the struct's
    pattern takes printable ASCII alone)."""
    event_id = event.id
    quoted = _json_text(event_id) if '"' in event_id or "\\" in event_id else f'"{event_id}"'
    slugs = '", "'.join(sorted(categories))
    return f'[{quoted}, {round(instant.timestamp(), 6)!r}, "{event.productId}", ["{slugs}"], {event.qty}, {cents}, null]'


# COPY's text format: a backslash, tab, newline or carriage return in a value is escaped.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(value: str) -> str:
    """`value` as COPY's text writes it."""
    return value.translate(_COPY_ESCAPES)


def _array(items: list[str]) -> str:
    """The array literal of `items`, every element quoted (an element `NULL` is the string, not
    null), before COPY's own escapes."""
    body = '","'.join(items)
    if "\\" in body or body.count('"') != 2 * (len(items) - 1):
        body = '","'.join(item.replace("\\", "\\\\").replace('"', '\\"') for item in items)
    return '{"' + body + '"}' if items else "{}"


def sales_trial_streamed(body: bytes) -> int:
    """Store a batch of sales in the trial shape by one COPY straight into the sales table, its rows
    sent by psycopg's writer thread as Python makes them, so that PostgreSQL can insert (the unique
    id, the indexes, the partitions) while Python makes the next rows and their digests. A batch
    naming an id taken before fails the COPY, and with it the batch (today's way would take it, as
    the trial leaves such batches). The number stored."""
    from django.db import connection, transaction
    from psycopg.copy import QueuedLibpqWriter
    from psycopg.errors import UniqueViolation

    from rankings.ingest.batch import collector_paused
    from rankings.ingest.wake import tick_wake_on_commit

    with collector_paused():
        events = _sales.decode(body).events
        checked = _checked(events, now=dt.datetime.now(dt.UTC))
        kept: dict[tuple[str, tuple[str, ...]], _Row] = {}
        for event, (_, named) in zip(events, checked, strict=True):
            kept.setdefault((event.productId, tuple(named)), _Row(event.productId, named))
        rows = list(kept.values())
        totals: dict[str, list] = {}
        with transaction.atomic(), connection.cursor() as cursor:
            layout, tree = _catalogue_ready(cursor, rows)
            received = dt.datetime.now(dt.UTC).isoformat()
            stamps: dict[dt.datetime, str] = {}
            raw = cursor.cursor  # psycopg's own, for its writer thread
            copy_sql = f"COPY shape_trial.sale ({_STREAMED_COLUMNS}) FROM STDIN"
            lines: list[str] = []
            try:
                with raw.copy(copy_sql, writer=QueuedLibpqWriter(raw)) as copy:
                    for event, (instant, named) in zip(events, checked, strict=True):
                        cents = _cents(event.amount)
                        stamp = stamps.get(instant)
                        if stamp is None:
                            stamp = stamps[instant] = instant.isoformat()
                        digest = md5(_digest_text(event, instant, named, cents).encode()).hexdigest()
                        lines.append(
                            f"{_copy_text(event.id)}\t{stamp}\t{event.productId}\t{_array(named)}"
                            f"\t{event.qty}\t{cents}\t{stamp}\t{received}\t{digest}\n"
                        )
                        if len(lines) == STREAMED_LINES:
                            copy.write("".join(lines))
                            lines.clear()
                        total = totals.get(event.productId)
                        if total is None:
                            totals[event.productId] = [event.qty, cents, instant]
                        else:
                            total[0] += event.qty
                            total[1] += cents
                            if instant < total[2]:
                                total[2] = instant
                    copy.write("".join(lines))
            except UniqueViolation:
                raise _Other from None  # an id taken before: today's way looks up which
            cursor.execute(
                _TOTALS_STREAMED,
                [
                    list(totals),
                    [total[0] for total in totals.values()],
                    [total[1] for total in totals.values()],
                    [total[2] for total in totals.values()],
                ],
            )
            _logged(cursor, {"sale": len(events)}, len(events))
            tick_wake_on_commit(layout, {tree.expand(named) for named in {key[1] for key in kept}})
    return len(events)


def _sql_digests_checked(rng: random.Random, count: int = 2000) -> None:
    """Raise unless PostgreSQL's digests of `count` random events are today's, byte for byte (ids
    with quotes and backslashes, fractional and whole instants, amounts in each form the struct takes,
    repeated categories), and it leaves the instants finer than a microsecond to today's way; and
    unless the streamed way's are today's too."""
    from django.db import connection

    from rankings.ingest.sales import event_digest

    printable = [chr(c) for c in range(0x20, 0x7F)]
    now = time.time()
    events = []
    for k in range(count):
        ts = now - rng.uniform(0, 86400 * 400)
        events.append(
            {
                "id": "".join(rng.choice(printable) for _ in range(rng.randint(1, 40))) + f"#{k}",
                "ts": round(ts) if k % 3 == 0 else round(ts, rng.choice([1, 3, 6, 6, 9])),
                "productId": f"p{rng.randrange(10**6)}",
                "qty": rng.randint(1, 10**6),
                "categories": [f"c{rng.randrange(5)}" for _ in range(rng.randint(1, 6))],
                "amount": rng.choice(
                    [
                        f"{rng.randrange(10**9)}.{rng.randrange(100):02d}",
                        f"{rng.randrange(10**9)}",
                        f"{rng.randrange(10**9)}.",
                        f"{rng.randrange(10**9)}.{rng.randrange(10)}",
                        f".{rng.randrange(100):02d}",
                        f".{rng.randrange(10)}",
                        f"00{rng.randrange(10**6)}.{rng.randrange(100):02d}",
                    ]
                ),
            }
        )
    body = json.dumps({"events": events}).encode()
    with connection.cursor() as cursor:
        cursor.execute(_EVENTS_SENT + " SELECT id, digest FROM events", _columns(_sales.decode(body).events))
        ours = dict(cursor.fetchall())
    for event in _sales.decode(body).events:
        data = {
            "id": event.id,
            "ts": dt.datetime.fromtimestamp(event.ts, dt.UTC),
            "productId": event.productId,
            "categories": list(dict.fromkeys(event.categories)),
            "qty": event.qty,
            "amount": Decimal(event.amount),
        }
        finer = event.ts != round(event.ts, 6)
        if ours.get(event.id) != (None if finer else event_digest(data)):
            raise RuntimeError(f"PostgreSQL's digest of {event!r} is not today's")
        text = _digest_text(event, data["ts"], data["categories"], _cents(event.amount))
        if md5(text.encode()).hexdigest() != event_digest(data):
            raise RuntimeError(f"the streamed way's digest of {event!r} is not today's")


def views_trial(body: bytes) -> int:
    """Store a batch of views and wishes in the trial shape; the number stored."""
    from django.db import connection, transaction

    from rankings.engine import locks
    from rankings.engine.partitions import engagement_partitions_ensure
    from rankings.engine.shards import layout_checked
    from rankings.engine.tree import version_tree
    from rankings.ingest.batch import _ensure_categories, _placeholders_create, collector_paused
    from rankings.ingest.engagement import retention_cutoff
    from rankings.ingest.wake import tick_wake_on_commit

    with collector_paused():
        events = _views.decode(body).events
        checked = _checked(events, now=dt.datetime.now(dt.UTC))
        received = dt.datetime.now(dt.UTC).isoformat()
        stamps: dict[dt.datetime, str] = {}
        kinds = {"view": 0, "wish": 0}
        lines, kept = [], {}
        for event, (instant, categories) in zip(events, checked, strict=True):
            stamp = stamps.get(instant)
            if stamp is None:
                stamp = stamps[instant] = instant.isoformat()
            kinds[event.kind] += 1
            lines.append(f"\\N\t{stamp}\t{event.productId}\t{event.kind}\t{_array(categories)}\t{received}\n")
            kept.setdefault((event.productId, tuple(categories)), _Row(event.productId, categories))
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SELECT pg_advisory_xact_lock_shared({locks.LAYOUT_NAMESPACE}, 0)")
            locks.retention_read_lock()
            cutoff = retention_cutoff()
            if cutoff is not None and min(stamps) < cutoff:
                raise _Other  # some are too old: today's way counts them dropped
            number, layout = layout_checked()
            tree = version_tree(number)
            engagement_partitions_ensure(stamps)
            rows = list(kept.values())
            _ensure_categories({slug for row in rows for slug in row.categories})
            _placeholders_create(cursor, rows)
            with cursor.copy(
                "COPY shape_trial.engagement (event_id, ts, product_id, kind, categories, received_at)"
                " FROM STDIN"
            ) as copy:
                copy.write("".join(lines))
            _logged(cursor, kinds, len(lines))
            tick_wake_on_commit(layout, {tree.expand(row.categories) for row in rows})
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


# The trial's claim of a shard's sales: the rows written by transactions from the shard's cursor up
# to `upto` (at most its snapshot's xmin, read before), each with the boards it counts in on the
# shard (`all` and its categories there: a row would carry those of each shard, as a queue row does
# today), into the tick's facts; the cursor moved to `upto` in the same transaction.
_CLAIM_TRIAL = """
WITH claimed AS (
    SELECT product_id, categories, counted_at, qty, amount_cents FROM shape_trial.sale
    WHERE xid >= (SELECT xid FROM shape_trial.cursor WHERE shard = %(shard)s) AND xid < %(upto)s
), facts AS (
    INSERT INTO tick_facts (category, product_id, t, qty, cents)
    SELECT u.category, c.product_id, floor(extract(epoch FROM c.counted_at))::bigint, c.qty, c.amount_cents
    FROM claimed c CROSS JOIN LATERAL unnest(c.categories || 'all'::varchar) AS u(category)
    WHERE u.category = ANY(%(boards)s)
), moved AS (
    UPDATE shape_trial.cursor SET xid = %(upto)s WHERE shard = %(shard)s
)
SELECT count(*) FROM claimed
"""


def _claim_seconds(shape: str) -> float:
    """Seconds of PostgreSQL a tick's claim of the oldest CLAIMED sales onto the shard of `all` takes
    (rolled back): today's from the queue, the trial's by transaction id."""
    from django.db import connection, transaction

    from catalogue.models import Category
    from rankings.engine import batches
    from rankings.engine.shards import ALL, active

    layout = active().layout
    shard = layout.shard_of(ALL)

    class _RolledBack(Exception):
        pass

    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(batches._FACTS_TABLE)
            if shape == "today":
                params = {"shard": shard, "until": None, "limit": CLAIMED}
                cursor.execute(batches._CLAIM_LAST, params)
                (last,) = cursor.fetchone()
                started = time.perf_counter()
                cursor.execute(batches._CLAIM, {**params, "last": last})
            else:
                slugs = [ALL, *Category.objects.values_list("slug", flat=True)]
                boards = [slug for slug in slugs if layout.shard_of(slug) == shard]
                # The oldest CLAIMED sales: whole batches, each one transaction's rows.
                cursor.execute(
                    "INSERT INTO shape_trial.cursor SELECT %s, min(xid) FROM shape_trial.sale", [shard]
                )
                cursor.execute("SELECT xid FROM shape_trial.sale ORDER BY xid OFFSET %s LIMIT 1", [CLAIMED])
                (after,) = cursor.fetchone()
                cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
                (xmin,) = cursor.fetchone()
                started = time.perf_counter()
                cursor.execute(_CLAIM_TRIAL, {"shard": shard, "upto": min(after, xmin), "boards": boards})
            seconds = time.perf_counter() - started
            (claimed,) = cursor.fetchone()
            if claimed != CLAIMED:
                raise RuntimeError(f"the {shape} claim took {claimed} sales, not {CLAIMED}")
            raise _RolledBack
    except _RolledBack:
        return seconds


def _sales_bodies(batches: int, seed: int) -> list[bytes]:
    from bench.bench_ingest import _events

    rng = random.Random(seed)
    return [
        json.dumps({"events": _events(1000, uuid.uuid4().hex[:12], rng)}).encode() for _ in range(batches)
    ]


def _backend_cpu(pid: int) -> float:
    """Seconds of CPU a PostgreSQL backend of this machine has used (its /proc entry)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client(task: tuple[str, int, int, float]) -> tuple[int, float, float, float, float]:
    """One client's run: (events stored, when it started, when it ended, its CPU seconds, its
    backend's). Its bodies are made and a first one stored untimed; it starts at `at`, with the
    other processes of its run."""
    path, batches, seed, at = task
    harness.setup()
    from django.db import connection

    store = {
        "trial": sales_trial,
        "sql": sales_trial_sql,
        "streamed": sales_trial_streamed,
        "today": sales_today,
    }[path]
    first, *bodies = _sales_bodies(batches + 1, seed)
    store(first)  # what a process does once (imports, statements, its connection) is not timed
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    time.sleep(max(0.0, at - time.time()))
    cpu, backend_cpu, started = time.process_time(), _backend_cpu(backend), time.time()
    stored = sum(store(body) for body in bodies)
    ended = time.time()
    return stored, started, ended, time.process_time() - cpu, _backend_cpu(backend) - backend_cpu


def _sales_rates(path: str, run: int) -> dict[str, float]:
    """Sales/s of one client and of PROCESSES clients at once, and the CPU of each, per sale."""
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        one = pool.apply(_client, ((path, BATCHES, run, 0.0),))
        at = time.time() + 15  # every process set up and its bodies made
        tasks = [(path, BATCHES // 2, 100 * run + k + 1, at) for k in range(PROCESSES)]
        results = pool.map(_client, tasks)
    if one[0] != BATCHES * 1000 or sum(r[0] for r in results) != PROCESSES * (BATCHES // 2) * 1000:
        raise RuntimeError(f"{path}: not every sale was stored")
    together = sum(r[0] for r in results)
    return {
        "one": one[0] / (one[2] - one[1]),
        "one client cpu": one[3] / one[0],
        "one backend cpu": one[4] / one[0],
        "four": together / (max(r[2] for r in results) - min(r[1] for r in results)),
        "four client cpu": sum(r[3] for r in results) / together,
        "four backend cpu": sum(r[4] for r in results) / together,
    }


def _views_rate(store, bodies: list[bytes]) -> float:
    from bench.bench_engage import BATCH

    started = time.perf_counter()
    stored = sum(store(body) for body in bodies)
    if stored != BATCH * len(bodies):
        raise RuntimeError(f"{store.__name__}: {stored} of {BATCH * len(bodies)} stored")
    return stored / (time.perf_counter() - started)


def run(table: harness.Table, runs: int = 3) -> harness.Table:
    from django.core.management import call_command
    from django.db import connection

    from bench import bench_engage, bench_ingest
    from bench.bench_engage import BATCH
    from bench.bench_engage import _views as views

    harness.reset()
    call_command("seed_demo", "--sales", "0", "--no-progress", verbosity=0)
    _schema_create()
    rng = random.Random(0)
    _sql_digests_checked(rng)
    figures: dict[str, list[float]] = {}
    try:
        for run_number in range(runs):
            order = ("today", "trial") if run_number % 2 == 0 else ("trial", "today")
            sales_order = (SALES_WAYS * 2)[run_number % len(SALES_WAYS) :][: len(SALES_WAYS)]
            for shape in sales_order:
                if shape != "today":  # each way of the trial stores into empty tables, not the last way's
                    _trial_emptied()
                for name, value in _sales_rates(shape, run_number).items():
                    figures.setdefault(f"sales {shape} {name}", []).append(value)
            figures.setdefault("sales floor", []).append(bench_ingest._copy_floor())
            for shape in order:
                figures.setdefault(f"claim {shape}", []).append(_claim_seconds(shape))
            for shape in order:
                bodies = [json.dumps({"events": views(BATCH, rng)}).encode() for _ in range(VIEW_BATCHES)]
                store = views_trial if shape == "trial" else views_today
                figures.setdefault(f"views {shape}", []).append(_views_rate(store, bodies))
            figures.setdefault("views floor", []).append(bench_engage._copy_floor(rng))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP SCHEMA IF EXISTS shape_trial CASCADE")
    median = {name: statistics.median(values) for name, values in figures.items()}
    shapes = {"today": "today's shape", "trial": "the trial shape"}
    sales_shapes = {
        **shapes,
        "sql": "the trial shape, rows and digests by PostgreSQL",
        "streamed": "the trial shape, one COPY into the table while the rows are made",
    }
    rows = [
        ("sales", "1,000 sales, one client", "COPY + INSERT ON CONFLICT", " one"),
        ("sales", "1,000 sales, four clients", "COPY + INSERT ON CONFLICT", " four"),
        ("views", "10,000 views, one client", "COPY", ""),
    ]
    for kind, what, floor, clients in rows:
        for shape, label in (sales_shapes if kind == "sales" else shapes).items():
            rate = median[f"{kind} {shape}{clients}"]
            cpu = (
                f"CPU a sale: client {median[f'sales {shape}{clients} client cpu'] * 1e6:.1f} µs,"
                f" PostgreSQL {median[f'sales {shape}{clients} backend cpu'] * 1e6:.1f} µs"
                if kind == "sales"
                else ""
            )
            table.add(
                f"{what}, {label}, in process",
                f"{rate:,.0f} events/s",
                f"{floor} {median[f'{kind} floor']:,.0f} rows/s",
                f"{rate / median[f'{kind} floor']:.2f}x",
                note=cpu,
            )
    for shape, label in shapes.items():
        table.add(
            f"a tick's claim of {CLAIMED:,} sales onto the shard of `all`, {label}",
            f"{median[f'claim {shape}'] * 1000:.1f} ms",
        )
    return table

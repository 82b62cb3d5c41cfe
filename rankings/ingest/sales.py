"""Sales through the batch ingest (rankings.ingest.batch): duplicates, returns, catalogue defaults,
the bound on a product's lifetime totals, and the sales' tables and work queue.

Concurrent batches take their locks in one order (returned originals, then
categories, products and sales, and last the product totals, each sorted by
key), so they wait for each other rather than deadlock; a deadlock or
serialization failure that happens all the same is retried, never shown
to a client.
"""

import datetime as dt
import hashlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from django.db import connection

from catalogue.money import cents_text, to_cents
from rankings.engine.partitions import sale_partitions_ensure
from rankings.ingest.batch import (
    DUPLICATE_ID,
    Attempt,
    BatchIngest,
    IngestResult,
    Retry,
    catalogue_of,
    json_text,
    keyed_lookup,
    slugs_text,
)
from rankings.ingest.events import MAX_AMOUNT_CENTS, MAX_AMOUNT_DIGITS, SaleEventSerializer
from rankings.models import PendingSale, ProductTotal, Sale, SaleId

__all__ = ["DUPLICATE_ID", "IngestResult", "MAX_PRODUCT_TOTAL", "event_digest", "sales_ingest"]

# The most units, or cents of revenue, one product may gather over its life.
# A board member's score is a net of the product's sales in a window, so at
# most this; Redis keeps scores as doubles, exact up to 2^53, and the fold's
# bigint sums stay far from overflow. About 90 sales of the largest amount.
MAX_PRODUCT_TOTAL = 2**53 - 1


@dataclass(slots=True, kw_only=True)
class _Row:
    """A validated event, ready to store."""

    index: int
    event_id: str
    ts: dt.datetime
    product_id: str
    categories: list[str]
    qty: int
    amount_cents: int
    return_of: str | None
    counted_at: dt.datetime
    digest: str

    @classmethod
    def of_event(
        cls,
        data: dict,
        *,
        index: int,
        digest: str,
        categories: list[str],
        amount_cents: int,
        counted_at: dt.datetime,
    ) -> "_Row":
        """The row of a validated event, given what was worked out for it beyond the event itself."""
        return cls(
            index=index,
            event_id=data["id"],
            ts=data["ts"],
            product_id=data["productId"],
            categories=categories,
            qty=data["qty"],
            amount_cents=amount_cents,
            return_of=data.get("returnOf"),
            counted_at=counted_at,
            digest=digest,
        )


@dataclass(slots=True, kw_only=True)
class _Original:
    """A sale that returns may refer to, with what has been returned of it so far."""

    product_id: str
    qty: int
    amount_cents: int
    categories: list[str]
    counted_at: dt.datetime
    returned_units: int = 0
    refunded_cents: int = 0
    is_return: bool = False
    # Not stored yet: an event earlier in this batch.
    in_batch: bool = False


class _Rejection(Exception):
    pass


class _Raced(Retry):
    """A concurrent batch changed what this one was checked against; the attempt is rolled back and
    made again, with the product totals locked from the start.

    Either an original of this batch was stored first by the other batch,
    perhaps as something else (returns of it were checked against this
    batch's copy, and are checked again against the stored one), or its sales
    took a product's lifetime total past the bound since this batch read it.
    """


def _pro_rata_cents(amount_cents: int, part: int, whole: int) -> int:
    """amount × part ÷ whole, rounded half-up to the cent (all values positive)."""
    return (2 * amount_cents * part + whole) // (2 * whole)


def event_digest(data: dict) -> str:
    """Identity of a valid event's content, so a resend can be told from a reused id: the MD5 of
    json.dumps([id, ts to the microsecond, productId, sorted categories or None, qty, amount in
    cents or None, returnOf]), written directly (a valid product id needs no escape)."""
    amount = data.get("amount")
    text = (
        f'[{json_text(data["id"])}, {round(data["ts"].timestamp(), 6)!r}, "{data["productId"]}", '
        f"{slugs_text(data.get('categories'))}, {data['qty']}, "
        f"{'null' if amount is None else to_cents(amount)}, {json_text(data.get('returnOf'))}]"
    )
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


# Event ids are unique in SaleId, not in the partitioned sales table: an id is
# claimed there first (a concurrent batch's same id waits, then is skipped), and
# only the sales whose id was claimed are inserted, with the sale id drawn there.
_INSERT = f"""
WITH claimed AS (
    INSERT INTO {SaleId._meta.db_table} (event_id, digest, sale_id, counted_at)
    SELECT event_id, digest, nextval('{Sale._meta.db_table}_id_seq'), counted_at
    -- a fixed order: concurrent batches wait rather than deadlock
    FROM (SELECT event_id, digest, counted_at FROM ingest_stage ORDER BY event_id) AS staged
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id, sale_id
), inserted AS (
    INSERT INTO {Sale._meta.db_table}
        (id, event_id, ts, product_id, categories, qty, amount_cents, return_of, counted_at, received_at, digest)
    SELECT claimed.sale_id, event_id, ts, product_id, string_to_array(categories, ','), qty, amount_cents,
           return_of, counted_at, now(), digest
    FROM claimed JOIN ingest_stage USING (event_id)
    RETURNING id, event_id, counted_at
), lists AS MATERIALIZED (  -- a batch's few distinct queue texts, each split once
    SELECT queue, split_part(entry, ':', 1)::smallint AS shard, string_to_array(split_part(entry, ':', 2), ',') AS slugs
    FROM (SELECT DISTINCT queue FROM ingest_stage) AS distinct_queues,
         unnest(string_to_array(distinct_queues.queue, ';')) AS entry
), queued AS (
    INSERT INTO {PendingSale._meta.db_table} (shard, sale_id, counted_at, categories)
    SELECT lists.shard, inserted.id, inserted.counted_at, lists.slugs  -- distinct shards
    FROM inserted JOIN ingest_stage USING (event_id) JOIN lists USING (queue)
)
SELECT ord FROM inserted JOIN ingest_stage USING (event_id)
"""


# Category slugs and queue entries are staged as text (slugs cannot hold a
# comma, colon or semicolon): it copies in a third of the time arrays take.
_STAGE_COLUMNS = (
    "ord integer, event_id varchar(128), ts timestamptz, product_id varchar(64), categories text,"
    " qty integer, amount_cents bigint, return_of varchar(128), counted_at timestamptz, digest varchar(32),"
    " queue text"
)
_STAGE_TYPES = [
    "int4", "varchar", "timestamptz", "varchar", "text", "int4", "int8", "varchar", "timestamptz", "varchar", "text",
]  # fmt: skip


class SaleIngest(BatchIngest):
    serializer_class = SaleEventSerializer
    id_table = SaleId._meta.db_table
    kinds = ("sale",)
    # The staging table is created once per database session and emptied before each use
    # (creating and dropping it for every batch would write the system catalogues each time),
    # in the layout lock's round trip; so is the sales table's lock for inserting, taken before the
    # catalogue is read for placeholders: a product being deleted is gone, and made again, or its
    # delete waits for this batch and sees its sales (rankings.models._keep_products_with_sales). The
    # partitioned table alone, as an insert into it takes: not one lock for each month kept.
    layout_lock_sql = (
        f"{BatchIngest.layout_lock_sql};"
        f" LOCK TABLE ONLY {Sale._meta.db_table} IN ROW EXCLUSIVE MODE;"
        f" CREATE TEMPORARY TABLE IF NOT EXISTS ingest_stage ({_STAGE_COLUMNS}) ON COMMIT DELETE ROWS;"
        " DELETE FROM ingest_stage"
    )

    def prepare(self, valid: list[tuple[int, dict]]) -> None:
        # A return counts in its original's month, whose partition exists already.
        sale_partitions_ensure(data["ts"] for _, data in valid if not data.get("returnOf"))

    def attempt(self, valid: list[tuple[int, dict]], result: IngestResult, *, first: bool) -> Attempt:
        resolved = _resolve(valid, result, self.stored_digests, lock_totals=not first)
        stored, late_duplicates = self.store(resolved.rows, result)
        inserted = {row.event_id for row in resolved.rows if row.index in stored}
        # A return checked against an original of this batch holds only if that
        # original is the one stored; else try again against the stored one.
        if any(original_id not in inserted for original_id in resolved.dependent):
            raise _Raced
        _ledger_add(resolved.rows, inserted)
        return Attempt(
            accepted=len(inserted), duplicates=resolved.duplicates + late_duplicates, accepted_at=stored
        )

    def write(self, cursor, rows: list[_Row], queue_of: Callable[[_Row], str]) -> set[int]:
        """COPY the rows with their queue entries into the staging table, then store them in one
        statement (_INSERT), which draws each sale's id where its event id is claimed."""
        with cursor.copy("COPY ingest_stage FROM STDIN (FORMAT BINARY)") as copy:
            # Binary rows cost the server no text parsing: half the time of a text COPY.
            copy.set_types(_STAGE_TYPES)
            for row in rows:
                copy.write_row(
                    (
                        row.index,
                        row.event_id,
                        row.ts,
                        row.product_id,
                        ",".join(row.categories),
                        row.qty,
                        row.amount_cents,
                        row.return_of,
                        row.counted_at,
                        row.digest,
                        queue_of(row),
                    )
                )
        cursor.execute(_INSERT)
        return {index for (index,) in cursor.fetchall()}


_ingest = SaleIngest()


def sales_ingest(*, events: list, source: str = "api", now: dt.datetime | None = None) -> IngestResult:
    """Validate `events` in order and store the valid ones; return what became of each."""
    return _ingest(events=events, source=source, now=now)


@dataclass(slots=True)
class _Known:
    """What is stored already about a batch's events, read under the batch's locks."""

    digests: dict[str, str]  # event id -> digest of its content, for the ids already stored
    originals: dict[str, _Original]  # the stored sales the batch's returns refer to
    catalogue: dict[str, tuple[int, list[str]]]  # product id -> (price in cents, category slugs)
    totals: dict[str, list[int]]  # product id -> [units, revenue cents] so far, for the products sold


@dataclass(slots=True)
class _Resolved:
    """The outcome of checking a batch: what to store, and what it depends on."""

    rows: list[_Row] = field(default_factory=list)
    duplicates: int = 0
    # The originals of this batch that its returns were checked against.
    dependent: set[str] = field(default_factory=set)


def _resolve(
    valid: list[tuple[int, dict]], result: IngestResult, stored_digests: Callable, *, lock_totals: bool
) -> _Resolved:
    """Check each event against stored sales and earlier events of the batch, in order."""
    resolved = _Resolved()
    if not valid:
        return resolved
    known = _known_of(valid, stored_digests, lock_totals=lock_totals)
    returns = any(data.get("returnOf") for _, data in valid)
    seen: dict[str, str] = {}  # id -> digest of events accepted earlier in this batch
    for index, data in valid:
        digest = event_digest(data)
        event_id = data["id"]
        earlier = known.digests.get(event_id) or seen.get(event_id)
        if earlier is not None:
            if earlier == digest:
                resolved.duplicates += 1
            else:
                result.rejected.append({"index": index, "id": event_id, "error": DUPLICATE_ID})
            continue
        try:
            row = _row(index, data, digest, known.originals, known.catalogue)
            if row.return_of is None:
                _ledger_check(row, known.totals)
        except _Rejection as rejection:
            result.rejected.append({"index": index, "id": event_id, "error": str(rejection)})
            continue
        seen[event_id] = digest
        resolved.rows.append(row)
        if returns:  # what a later return of the batch checks itself against
            _remember(row, known.originals, resolved.dependent)
    return resolved


def _known_of(valid: list[tuple[int, dict]], stored_digests: Callable, *, lock_totals: bool) -> _Known:
    """Lock what the batch's events depend on, then read it."""
    returned_ids = {data["returnOf"] for _, data in valid if data.get("returnOf")}
    _lock_originals(returned_ids)
    totals = _ledger_totals({data["productId"] for _, data in valid if data["qty"] > 0}, lock=lock_totals)
    # Read after the locks, so a concurrent batch that held them has committed;
    # the originals after the ids, so an original stored in between is seen as
    # this batch's own, whose returns are then checked again (see _Raced).
    digests = stored_digests([data["id"] for _, data in valid])
    originals = _stored_originals(returned_ids)
    # The catalogue is read only for what an event leaves out: its categories or its amount.
    catalogue = catalogue_of(
        {
            data["productId"]
            for _, data in valid
            if not data.get("returnOf") and (not data.get("categories") or data.get("amount") is None)
        }
    )
    return _Known(digests=digests, originals=originals, catalogue=catalogue, totals=totals)


def _remember(row: _Row, originals: dict[str, _Original], dependent: set[str]) -> None:
    """Note an accepted row where the batch's later returns look: a sale may be returned, and a
    return counts against what is left of its original."""
    if row.return_of is not None:
        original = originals[row.return_of]
        original.returned_units += -row.qty
        original.refunded_cents += row.amount_cents
        if original.in_batch:
            dependent.add(row.return_of)
    originals[row.event_id] = _Original(
        product_id=row.product_id,
        qty=row.qty,
        amount_cents=row.amount_cents,
        categories=row.categories,
        counted_at=row.counted_at,
        is_return=row.return_of is not None,
        in_batch=row.return_of is None,
    )


def _advisory_key(event_id: str) -> int:
    """A 64-bit lock key for a sale id (a collision only makes two returns wait for each other)."""
    digest = hashlib.blake2b(event_id.encode(), digest_size=8, person=b"salesrank-ret").digest()
    return int.from_bytes(digest, "big", signed=True)


def _lock_originals(event_ids: set[str]) -> None:
    """Serialise the returns of each of these originals until this transaction ends.

    An advisory lock per original id, taken in key order before anything is
    read, makes the returns of one original wait for each other: the second
    batch reads only after the first has committed, and counts its returns.
    The lock is on the id, not the row, so it holds for an original not stored yet.
    """
    if not event_ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(key) FROM unnest(%s::bigint[]) AS key",
            [sorted({_advisory_key(event_id) for event_id in event_ids})],
        )
        cursor.fetchall()


def _stored_originals(event_ids: set[str]) -> dict[str, _Original]:
    """The stored sales that returns refer to, with what was already returned of each."""
    originals: dict[str, _Original] = {}
    if not event_ids:
        return originals
    # Through the ids' table, and by (id, month): the sales table has no index on event_id,
    # and naming the months lets PostgreSQL read only their partitions.
    keys = dict(SaleId.objects.filter(event_id__in=event_ids).values_list("sale_id", "counted_at"))
    if not keys:
        return originals
    for sale in Sale.objects.filter(id__in=list(keys), counted_at__in=set(keys.values())):
        originals[sale.event_id] = _Original(
            product_id=sale.product_id,
            qty=sale.qty,
            amount_cents=sale.amount_cents,
            categories=list(sale.categories),
            counted_at=sale.counted_at,
            is_return=sale.return_of is not None,
        )
    # A return counts in its original's month, so the originals' months hold every return of them.
    returned = (
        Sale.objects.filter(return_of__in=list(originals), counted_at__in=set(keys.values()))
        .values_list("return_of", "qty", "amount_cents")
        .order_by()
    )
    for return_of, qty, amount_cents in returned:
        original = originals[cast(str, return_of)]  # never None: filtered on return_of__in
        original.returned_units += -qty
        original.refunded_cents += amount_cents
    return originals


# --- the ledger of lifetime totals: what keeps every board sum exact -------------------------
#
# Every batch sells the best sellers, so a lock on their totals held from the
# first read to the commit would make concurrent batches take turns. A batch
# reads the totals unlocked and checks its sales against them; the one
# statement that adds to them, the last before the commit, returns the new
# totals, and if a concurrent batch's sales have taken one past the bound
# meanwhile, the attempt is made again with the totals locked from the start.

_LEDGER_READ = keyed_lookup("product_id, units, revenue_cents", ProductTotal._meta.db_table, "product_id")

_LEDGER_LOCK = f"""
INSERT INTO {ProductTotal._meta.db_table} AS total (product_id, units, revenue_cents)
SELECT product_id, 0, 0 FROM unnest(string_to_array(%s, E'\\n')) WITH ORDINALITY AS wanted(product_id, n) ORDER BY n
ON CONFLICT (product_id) DO UPDATE SET units = total.units
RETURNING product_id, units, revenue_cents
"""

# In product id order, so that two batches adding to the same products queue rather than deadlock.
# first_sold_at only moves earlier: a late sale with an earlier ts moves the product's release.
_LEDGER_ADD = f"""
INSERT INTO {ProductTotal._meta.db_table} AS total (product_id, units, revenue_cents, first_sold_at)
SELECT product_id, units, revenue_cents, first_sold_at
FROM unnest(
    string_to_array(%s, E'\\n'), string_to_array(%s, ',')::bigint[], string_to_array(%s, ',')::bigint[],
    string_to_array(%s, E'\\n')::timestamptz[]
) WITH ORDINALITY AS sold(product_id, units, revenue_cents, first_sold_at, n)
ORDER BY n
ON CONFLICT (product_id) DO UPDATE
SET units = total.units + excluded.units, revenue_cents = total.revenue_cents + excluded.revenue_cents,
    first_sold_at = LEAST(total.first_sold_at, excluded.first_sold_at)
RETURNING units, revenue_cents
"""


def _ledger_totals(product_ids: set[str], *, lock: bool) -> dict[str, list[int]]:
    """product id -> [units, revenue cents] so far, for every product in `product_ids`.

    With `lock`, one statement creates the missing rows and locks every row, in
    product id order, until the batch commits.
    """
    if not product_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_LEDGER_LOCK if lock else _LEDGER_READ, ["\n".join(sorted(product_ids))])
        totals = {product_id: [units, revenue] for product_id, units, revenue in cursor.fetchall()}
    return {product_id: totals.get(product_id, [0, 0]) for product_id in product_ids}


def _ledger_check(row: _Row, totals: dict[str, list[int]]) -> None:
    """Count a sale in its product's running totals, or reject it if they would pass the bound."""
    total = totals[row.product_id]
    if total[0] + row.qty > MAX_PRODUCT_TOTAL:
        raise _Rejection(
            f"the lifetime units of product {row.product_id} would pass {MAX_PRODUCT_TOTAL}, "
            "the most a ranking can count exactly"
        )
    if total[1] + row.amount_cents > MAX_PRODUCT_TOTAL:
        raise _Rejection(
            f"the lifetime revenue of product {row.product_id} would pass {cents_text(MAX_PRODUCT_TOTAL)}, "
            "the most a ranking can count exactly"
        )
    total[0] += row.qty
    total[1] += row.amount_cents


def _ledger_add(rows: list[_Row], inserted: set[str]) -> None:
    """Add the sales this batch stored (not its returns) to their products' totals, in one statement;
    raises _Raced if concurrent batches took a total past the bound since it was read."""
    sold: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    first: dict[str, dt.datetime] = {}
    for row in rows:
        if row.return_of is None and row.event_id in inserted:
            sold[row.product_id][0] += row.qty
            sold[row.product_id][1] += row.amount_cents
            first[row.product_id] = min(first.get(row.product_id, row.ts), row.ts)
    if not sold:
        return
    product_ids = sorted(sold)
    with connection.cursor() as cursor:
        cursor.execute(
            _LEDGER_ADD,
            # Each column as one text (see keyed_lookup).
            [
                "\n".join(product_ids),
                ",".join(str(sold[p][0]) for p in product_ids),
                ",".join(str(sold[p][1]) for p in product_ids),
                "\n".join(first[p].isoformat() for p in product_ids),
            ],
        )
        if any(max(totals) > MAX_PRODUCT_TOTAL for totals in cursor.fetchall()):
            raise _Raced


def _row(index: int, data: dict, digest: str, originals: dict[str, _Original], catalogue: dict) -> _Row:
    """The row to store for a validated event; raises _Rejection if the stored data refuses it."""
    if data.get("returnOf") is None:
        return _sale_row(index, data, digest, catalogue)
    return _return_row(index, data, digest, originals)


def _sale_row(index: int, data: dict, digest: str, catalogue: dict[str, tuple[int, list[str]]]) -> _Row:
    """A sale: what the event leaves out (categories, amount) comes from the catalogue."""
    price_cents, catalogue_categories = catalogue.get(data["productId"], (0, []))
    amount = data.get("amount")
    if amount is None:
        amount_cents = price_cents * data["qty"]
        if amount_cents > MAX_AMOUNT_CENTS:
            raise _Rejection(
                f"amount (catalogue price × qty) has more than {MAX_AMOUNT_DIGITS} digits before the point"
            )
    else:
        amount_cents = to_cents(amount)
    return _Row.of_event(
        data,
        index=index,
        digest=digest,
        categories=data.get("categories") or catalogue_categories,
        amount_cents=amount_cents,
        counted_at=data["ts"],
    )


def _return_row(index: int, data: dict, digest: str, originals: dict[str, _Original]) -> _Row:
    """A return: it counts in its original's categories and month, within what is left of it."""
    original = originals.get(data["returnOf"])
    if original is None:
        raise _Rejection("returnOf refers to an unknown sale")
    if original.is_return:
        raise _Rejection("returnOf refers to a return, not a sale")
    if original.product_id != data["productId"]:
        raise _Rejection("returnOf refers to a sale of another product")
    units = -data["qty"]
    units_left = original.qty - original.returned_units
    if units > units_left:
        raise _Rejection(f"return of {units} units exceeds the {units_left} not yet returned")
    return _Row.of_event(
        data,
        index=index,
        digest=digest,
        categories=list(original.categories),
        amount_cents=_refund_cents(data.get("amount"), units, original),
        counted_at=original.counted_at,
    )


def _refund_cents(amount, units: int, original: _Original) -> int:
    """The refund of returning `units` of `original`: the amount given, or else the pro-rata share."""
    cents_left = original.amount_cents - original.refunded_cents
    if amount is not None:
        amount_cents = to_cents(amount)
        if amount_cents > cents_left:
            raise _Rejection(
                f"refund of {cents_text(amount_cents)} exceeds the {cents_text(cents_left)} not yet refunded"
            )
        return amount_cents
    # The return that completes the sale refunds what is left, so rounding
    # of earlier partial refunds never makes the total exceed the sale.
    if units == original.qty - original.returned_units:
        return cents_left
    return min(_pro_rata_cents(original.amount_cents, units, original.qty), cents_left)

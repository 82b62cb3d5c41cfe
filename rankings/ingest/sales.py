"""The write path's entrance: validate sale events and store them as raw sales.

A batch is checked event by event, in the order given; the valid events are
stored in one transaction (COPY into a temporary table, then one
INSERT … ON CONFLICT), together with their places in the tick's work queue,
and committed before the caller replies. A bad event is rejected with its
index and reason and costs the others nothing.

Concurrent batches take their locks in one order (returned originals, then
categories, products and sales, and last the product totals, each sorted by
key), so they wait for each other rather than deadlock; a deadlock or
serialization failure that happens all the same is retried here, never shown
to a client.
"""

import datetime as dt
import hashlib
import json
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field

from django.db import OperationalError, connection, transaction
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from catalogue.models import Category, Product
from catalogue.money import cents_text, to_cents
from rankings.conf import rankings_settings
from rankings.engine import locks
from rankings.engine.shards import ALL, Layout, layout_checked
from rankings.engine.tree import Tree, version_tree
from rankings.ingest.events import (
    MAX_AMOUNT_CENTS,
    MAX_AMOUNT_DIGITS,
    EventIdField,
    EventValidator,
    duration_text,
)
from rankings.ingest.partitions import sale_partitions_ensure
from rankings.models import IngestLog, PendingSale, ProductTotal, Sale, SaleId
from rankings.tasks import tick_wake_on_commit

DUPLICATE_ID = "id already used by a different event"

# The most units, or cents of revenue, one product may gather over its life.
# A board member's score is a net of the product's sales in a window, so at
# most this; Redis keeps scores as doubles, exact up to 2^53, and the fold's
# bigint sums stay far from overflow. About 90 sales of the largest amount.
MAX_PRODUCT_TOTAL = 2**53 - 1

# A deadlock or serialization failure is retried this many times in all,
# after a short random pause that grows with each attempt.
ATTEMPTS = 5
RETRY_PAUSE = 0.05  # seconds, doubled each attempt, times a random factor in [0.5, 1)
_RETRYABLE = {"40001", "40P01"}  # serialization_failure, deadlock_detected


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    rejected: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"accepted": self.accepted, "duplicates": self.duplicates, "rejected": self.rejected}

    def merge(self, other: "IngestResult", offset: int = 0) -> None:
        self.accepted += other.accepted
        self.duplicates += other.duplicates
        self.rejected.extend({**r, "index": r["index"] + offset} for r in other.rejected)


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


class _Raced(Exception):
    """A concurrent batch changed what this one was checked against; the attempt is rolled back and
    made again, with the product totals locked from the start.

    Either an original of this batch was stored first by the other batch,
    perhaps as something else (returns of it were checked against this
    batch's copy, and are checked again against the stored one), or its sales
    took a product's lifetime total past the bound since this batch read it.
    """


def _too_far_ahead() -> str:
    return f"ts is more than {duration_text(rankings_settings.MAX_FUTURE_SECONDS)} in the future"


def _pro_rata_cents(amount_cents: int, part: int, whole: int) -> int:
    """amount × part ÷ whole, rounded half-up to the cent (all values positive)."""
    return (2 * amount_cents * part + whole) // (2 * whole)


# json.dumps with its defaults, through one C encoder made once (json.dumps makes one a call):
# the digests of the sales stored already must come out the same.
_encoder = json.encoder.c_make_encoder(
    None, None, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
)


def _canonical_json(value: list) -> str:
    return "".join(_encoder(value, 0))


def event_digest(data: dict) -> str:
    """Identity of an event's content, so a resend can be told from a reused id."""
    amount = data.get("amount")
    canonical = [
        data["id"],
        round(data["ts"].timestamp(), 6),
        data["productId"],
        sorted(data["categories"]) if data.get("categories") else None,
        data["qty"],
        to_cents(amount) if amount is not None else None,
        data.get("returnOf"),
    ]
    return hashlib.md5(_canonical_json(canonical).encode(), usedforsecurity=False).hexdigest()


def sales_ingest(*, events: list, source: str = "api", now: dt.datetime | None = None) -> IngestResult:
    """Validate `events` in order and store the valid ones; return what became of each."""
    now = now or timezone.now()
    invalid: list[dict] = []
    limit = now + dt.timedelta(seconds=rankings_settings.MAX_FUTURE_SECONDS)

    validate = EventValidator()
    valid: list[tuple[int, dict]] = []
    for index, event in enumerate(events):
        data, error = validate(event)
        if error is not None:
            invalid.append({"index": index, "id": _id_of(event), "error": error})
        elif data["ts"] > limit:
            invalid.append({"index": index, "id": data["id"], "error": _too_far_ahead()})
        else:
            valid.append((index, data))

    if not events:
        return IngestResult()  # nothing happened: an empty call leaves no trace in the log
    # A return counts in its original's month, whose partition exists already.
    sale_partitions_ensure(data["ts"] for _, data in valid if not data.get("returnOf"))
    for attempt in range(1, ATTEMPTS + 1):
        result = IngestResult(rejected=list(invalid))
        try:
            with transaction.atomic():
                _ingest_valid(valid, result, source, now, lock_totals=attempt > 1)
            break
        except _Raced:
            if attempt == ATTEMPTS:
                raise
        except OperationalError as error:
            if attempt == ATTEMPTS or getattr(error.__cause__, "sqlstate", None) not in _RETRYABLE:
                raise
            time.sleep(RETRY_PAUSE * 2 ** (attempt - 1) * random.uniform(0.5, 1))
    result.rejected.sort(key=lambda r: r["index"])
    return result


def _ingest_valid(
    valid: list[tuple[int, dict]], result: IngestResult, source: str, now: dt.datetime, *, lock_totals: bool
) -> None:
    """One attempt at storing the valid events, inside the caller's transaction."""
    resolved = _resolve(valid, result, lock_totals=lock_totals)
    inserted, late_duplicates = _store(resolved.rows, result)
    # A return checked against an original of this batch holds only if that
    # original is the one stored; else try again against the stored one.
    if any(original_id not in inserted for original_id in resolved.dependent):
        raise _Raced
    _ledger_add(resolved.rows, inserted)
    result.accepted = len(inserted)
    result.duplicates = resolved.duplicates + late_duplicates
    IngestLog.objects.create(
        at=now,
        source=source,
        accepted=result.accepted,
        duplicates=result.duplicates,
        rejected=len(result.rejected),
    )


def _id_of(event) -> str | None:
    """The id of a rejected event, to echo in the reply, if it is a valid id."""
    value = event.get("id") if isinstance(event, dict) else None
    try:
        return EventIdField().to_internal_value(value)
    except ValidationError:
        return None


# Lists of ids are matched with IN (SELECT unnest(…)) rather than = ANY(…): for
# = ANY of a constant array the planner estimates every element against the
# column's statistics, which for 5,000 ids takes ten times longer than the scan.


def _stored_digests(event_ids: list[str]) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT event_id, digest FROM {SaleId._meta.db_table} WHERE event_id IN (SELECT unnest(%s::text[]))",
            [event_ids],
        )
        return dict(cursor.fetchall())


def _catalogue_of(product_ids: set[str]) -> dict[str, tuple[int, list[str]]]:
    """product id -> (price in cents, category slugs) for the known products among `product_ids`."""
    if not product_ids:
        return {}
    product = Product._meta.db_table
    link = Product.categories.through._meta.db_table
    category = Category._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT p.product_id, p.price_cents,
                   coalesce(array_agg(c.slug ORDER BY c.slug) FILTER (WHERE c.slug IS NOT NULL), '{{}}')
            FROM {product} p
            LEFT JOIN {link} l ON l.product_id = p.id
            LEFT JOIN {category} c ON c.id = l.category_id
            WHERE p.product_id IN (SELECT unnest(%s::text[]))
            GROUP BY p.id
            """,
            [list(product_ids)],
        )
        return {pid: (price, slugs) for pid, price, slugs in cursor.fetchall()}


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


def _resolve(valid: list[tuple[int, dict]], result: IngestResult, *, lock_totals: bool) -> _Resolved:
    """Check each event against stored sales and earlier events of the batch, in order."""
    resolved = _Resolved()
    if not valid:
        return resolved
    known = _known_of(valid, lock_totals=lock_totals)
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


def _known_of(valid: list[tuple[int, dict]], *, lock_totals: bool) -> _Known:
    """Lock what the batch's events depend on, then read it."""
    returned_ids = {data["returnOf"] for _, data in valid if data.get("returnOf")}
    _lock_originals(returned_ids)
    totals = _ledger_totals({data["productId"] for _, data in valid if data["qty"] > 0}, lock=lock_totals)
    # Read after the locks, so a concurrent batch that held them has committed;
    # the originals after the ids, so an original stored in between is seen as
    # this batch's own, whose returns are then checked again (see _Raced).
    digests = _stored_digests([data["id"] for _, data in valid])
    originals = _stored_originals(returned_ids)
    # The catalogue is read only for what an event leaves out: its categories or its amount.
    catalogue = _catalogue_of(
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
    for original_id, qty, amount_cents in returned:
        originals[original_id].returned_units += -qty
        originals[original_id].refunded_cents += amount_cents
    return originals


# --- the ledger of lifetime totals: what keeps every board sum exact -------------------------
#
# Every batch sells the best sellers, so a lock on their totals held from the
# first read to the commit would make concurrent batches take turns. A batch
# reads the totals unlocked and checks its sales against them; the one
# statement that adds to them, the last before the commit, returns the new
# totals, and if a concurrent batch's sales have taken one past the bound
# meanwhile, the attempt is made again with the totals locked from the start.

_LEDGER_READ = f"""
SELECT product_id, units, revenue_cents FROM {ProductTotal._meta.db_table}
WHERE product_id IN (SELECT unnest(%s::text[]))
"""

_LEDGER_LOCK = f"""
INSERT INTO {ProductTotal._meta.db_table} AS total (product_id, units, revenue_cents)
SELECT product_id, 0, 0 FROM unnest(%s::text[]) WITH ORDINALITY AS wanted(product_id, n) ORDER BY n
ON CONFLICT (product_id) DO UPDATE SET units = total.units
RETURNING product_id, units, revenue_cents
"""

# In product id order, so that two batches adding to the same products queue rather than deadlock.
# first_sold_at only moves earlier: a late sale with an earlier ts moves the product's release.
_LEDGER_ADD = f"""
INSERT INTO {ProductTotal._meta.db_table} AS total (product_id, units, revenue_cents, first_sold_at)
SELECT product_id, units, revenue_cents, first_sold_at
FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::timestamptz[])
     WITH ORDINALITY AS sold(product_id, units, revenue_cents, first_sold_at, n)
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
        cursor.execute(_LEDGER_LOCK if lock else _LEDGER_READ, [sorted(product_ids)])
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
            [
                product_ids,
                [sold[p][0] for p in product_ids],
                [sold[p][1] for p in product_ids],
                [first[p] for p in product_ids],
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


# Rows are locked in slug order, so that two batches marking the same categories never wait on each other.
_MARK_CATEGORIES = f"""
UPDATE {Category._meta.db_table} SET has_sales = true
WHERE id IN (
    SELECT id FROM {Category._meta.db_table} WHERE slug IN (SELECT unnest(%s::text[])) ORDER BY slug FOR UPDATE
)
RETURNING slug
"""


def _ensure_categories(rows: list[_Row]) -> None:
    """Create placeholders for unknown categories (no sale is lost for want of them) and mark every
    category the sales name as having sales, which keeps it from being deleted.

    Only a category's first sales write its row. Marking takes the row lock,
    so a delete running meanwhile either sees the mark or goes first, and then
    the category is created again below.
    """
    slugs = {slug for row in rows for slug in row.categories}
    if not slugs:
        return
    known = dict(Category.objects.filter(slug__in=slugs).values_list("slug", "has_sales"))
    present = {slug for slug, has_sales in known.items() if has_sales}
    unmarked = sorted(slug for slug, has_sales in known.items() if not has_sales)
    if unmarked:
        with connection.cursor() as cursor:
            cursor.execute(_MARK_CATEGORIES, [unmarked])
            present.update(slug for (slug,) in cursor.fetchall())
    Category.objects.bulk_create(
        [Category(slug=s, name=s, is_placeholder=True, has_sales=True) for s in sorted(slugs - present)],
        ignore_conflicts=True,
    )


# Category slugs and queue entries are staged as text (slugs cannot hold a
# comma, colon or semicolon): it copies in a third of the time arrays take.
_STAGE_TYPES = [
    "int4", "varchar", "timestamptz", "varchar", "text", "int4", "int8", "varchar", "timestamptz", "varchar",
    "text",
]  # fmt: skip
# Created once per database session and emptied after each use: creating and
# dropping it for every batch would write the system catalogues each time.
_STAGE = """
CREATE TEMPORARY TABLE IF NOT EXISTS ingest_stage (
    ord integer, event_id varchar(128), ts timestamptz, product_id varchar(64),
    categories text, qty integer, amount_cents bigint, return_of varchar(128),
    counted_at timestamptz, digest varchar(32), queue text
) ON COMMIT DELETE ROWS
"""

# Unknown products become placeholders, linked to the categories their first
# sales name, before the sales that refer to them are inserted. Each of the
# batch's distinct product ids is looked up in the index (a subquery per id):
# NOT EXISTS let the planner hash the whole catalogue for every batch instead.
_PLACEHOLDER_PRODUCTS = f"""
WITH created AS (
    INSERT INTO {Product._meta.db_table} (product_id, name, price_cents, is_placeholder)
    SELECT wanted.product_id, wanted.product_id, 0, true
    FROM unnest(%s::text[]) WITH ORDINALITY AS wanted(product_id, n)
    WHERE (SELECT known.id FROM {Product._meta.db_table} known WHERE known.product_id = wanted.product_id) IS NULL
    ORDER BY wanted.n  -- sorted ids: concurrent batches wait rather than deadlock
    ON CONFLICT (product_id) DO NOTHING
    RETURNING id, product_id
)
INSERT INTO {Product.categories.through._meta.db_table} (product_id, category_id)
SELECT DISTINCT created.id, category.id
FROM created
JOIN ingest_stage stage USING (product_id)
CROSS JOIN unnest(string_to_array(stage.categories, ',')) AS wanted(slug)
JOIN {Category._meta.db_table} category ON category.slug = wanted.slug
ON CONFLICT DO NOTHING
"""

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
), queued AS (
    INSERT INTO {PendingSale._meta.db_table} (shard, sale_id, counted_at, categories)
    SELECT split_part(entry, ':', 1)::smallint, inserted.id, inserted.counted_at,  -- distinct shards
           string_to_array(split_part(entry, ':', 2), ',')
    FROM inserted JOIN ingest_stage USING (event_id),
         unnest(string_to_array(ingest_stage.queue, ';')) AS entry
)
SELECT event_id FROM inserted
"""


def _queue_entries(categories: tuple[str, ...], layout: Layout, tree: Tree, product_id: str) -> str:
    """'shard:slug,slug;shard:slug': each shard a sale is queued for, with the boards it counts in there
    (its categories and their ancestors in the active version's tree, each once; of a split category,
    the part that holds the product)."""
    boards: dict[int, list[str]] = defaultdict(list)
    for slug in (ALL, *tree.expand(categories)):
        board = layout.board_of(slug, product_id)
        boards[layout.shard_of(board)].append(board)
    return ";".join(f"{shard}:{','.join(slugs)}" for shard, slugs in sorted(boards.items()))


def _store(rows: list[_Row], result: IngestResult) -> tuple[set[str], int]:
    """Insert the rows in bulk; return (the ids inserted, duplicates found only at insert time).

    Refuses (ShardCountMismatch) while RANKINGS_SHARDS disagrees with the
    installation's count. The sales are queued under the active version's layout,
    read under the shared layout lock, which this transaction keeps until it commits:
    a switch-over that re-lays out the shards waits for it and then re-keys its rows.
    """
    locks.layout_read_lock()
    number, layout = layout_checked()
    if not rows:
        return set(), 0
    # Read under the same lock as the layout: a switch to a version with another tree re-queues
    # what was queued before it, and an ingest that reads after it waits for its commit.
    tree = version_tree(number)
    _ensure_categories(rows)
    with connection.cursor() as cursor:
        cursor.execute(_STAGE)
        _stage(cursor, rows, layout, tree)
        cursor.execute(_PLACEHOLDER_PRODUCTS, [sorted({row.product_id for row in rows})])
        cursor.execute(_INSERT)
        inserted = {event_id for (event_id,) in cursor.fetchall()}
        # Emptied now rather than at commit, so that a caller's outer transaction
        # can ingest again.
        cursor.execute("DELETE FROM ingest_stage")
    # Once committed, these sales wake their shards' ticks rather than wait for the beat.
    tick_wake_on_commit(layout, {tree.expand(row.categories) for row in rows if row.event_id in inserted})
    return inserted, _late_duplicates(rows, inserted, result)


def _stage(cursor, rows: list[_Row], layout: Layout, tree: Tree) -> None:
    """COPY the rows, each with its queue entries, into the staging table."""
    queue_of: dict[tuple, str] = {}  # the few distinct category lists of a batch
    with cursor.copy("COPY ingest_stage FROM STDIN (FORMAT BINARY)") as copy:
        # Binary rows cost the server no text parsing: half the time of a text COPY.
        copy.set_types(_STAGE_TYPES)
        for row in rows:
            # With split boards the queue depends on the product too (its parts).
            key = (tuple(row.categories), row.product_id if layout.split else "")
            queue = queue_of.get(key)
            if queue is None:
                queue = queue_of[key] = _queue_entries(key[0], layout, tree, row.product_id)
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
                    queue,
                )
            )


def _late_duplicates(rows: list[_Row], inserted: set[str], result: IngestResult) -> int:
    """Of the rows not inserted (a concurrent batch stored their id between our check and our insert),
    count the resends and reject the reused ids."""
    late_duplicates = 0
    raced = [row for row in rows if row.event_id not in inserted]
    if raced:
        stored = _stored_digests([r.event_id for r in raced])
        for row in raced:
            if stored.get(row.event_id) == row.digest:
                late_duplicates += 1
            else:
                result.rejected.append({"index": row.index, "id": row.event_id, "error": DUPLICATE_ID})
    return late_duplicates

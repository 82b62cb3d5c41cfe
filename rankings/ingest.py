"""The write path's entrance: validate sale events and store them as raw sales.

A batch is checked event by event, in the order given; the valid events are
stored in one transaction (COPY into a temporary table, then one
INSERT … ON CONFLICT), together with their places in the tick's work queue,
and committed before the caller replies. A bad event is rejected with its
index and reason and costs the others nothing.
"""

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import connection, transaction
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from catalogue.models import ALL, Category, Product, shard_of

from .conf import rankings_settings
from .models import IngestLog, PendingSale, Sale, SaleId
from .partitions import sale_partitions_ensure
from .serializers import MAX_AMOUNT_CENTS, EventIdField, EventValidator

DUPLICATE_ID = "id already used by a different event"


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


@dataclass(slots=True)
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


@dataclass(slots=True)
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


class _Rejection(Exception):
    pass


def _to_cents(amount: Decimal) -> int:
    return int(amount * 100)


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def _pro_rata_cents(amount_cents: int, part: int, whole: int) -> int:
    """amount × part ÷ whole, rounded half-up to the cent (all values positive)."""
    return (2 * amount_cents * part + whole) // (2 * whole)


# json.dumps with its defaults, without its per-call argument handling.
_canonical_json = json.JSONEncoder().encode


def event_digest(data: dict) -> str:
    """Identity of an event's content, so a resend can be told from a reused id."""
    amount = data.get("amount")
    canonical = [
        data["id"],
        round(data["ts"].timestamp(), 6),
        data["productId"],
        sorted(data["categories"]) if data.get("categories") else None,
        data["qty"],
        _to_cents(amount) if amount is not None else None,
        data.get("returnOf"),
    ]
    return hashlib.md5(_canonical_json(canonical).encode(), usedforsecurity=False).hexdigest()


def sales_ingest(*, events: list, source: str = "api", now: dt.datetime | None = None) -> IngestResult:
    """Validate `events` in order and store the valid ones; return what became of each."""
    now = now or timezone.now()
    result = IngestResult()
    limit = now + dt.timedelta(seconds=rankings_settings.MAX_FUTURE_SECONDS)

    validate = EventValidator()
    valid: list[tuple[int, dict]] = []
    for index, event in enumerate(events):
        data, error = validate(event)
        if error is not None:
            result.rejected.append({"index": index, "id": _id_of(event), "error": error})
        elif data["ts"] > limit:
            result.rejected.append(
                {"index": index, "id": data["id"], "error": "ts is more than 5 minutes in the future"}
            )
        else:
            valid.append((index, data))

    if not events:
        return result  # nothing happened: an empty call leaves no trace in the log
    # A return counts in its original's month, whose partition exists already.
    sale_partitions_ensure(data["ts"] for _, data in valid if not data.get("returnOf"))
    with transaction.atomic():
        rows, duplicates = _resolve(valid, result)
        inserted, late_duplicates = _store(rows, result)
        result.accepted = inserted
        result.duplicates = duplicates + late_duplicates
        IngestLog.objects.create(
            at=now,
            source=source,
            accepted=result.accepted,
            duplicates=result.duplicates,
            rejected=len(result.rejected),
        )
    result.rejected.sort(key=lambda r: r["index"])
    return result


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


def _resolve(valid: list[tuple[int, dict]], result: IngestResult) -> tuple[list[_Row], int]:
    """Check each event against stored sales and earlier events of the batch, in order."""
    if not valid:
        return [], 0
    stored_digest = _stored_digests([data["id"] for _, data in valid])
    originals = _lock_originals({data["returnOf"] for _, data in valid if data.get("returnOf")})
    # The catalogue is read only for what an event leaves out: its categories or its amount.
    catalogue = _catalogue_of(
        {
            data["productId"]
            for _, data in valid
            if not data.get("returnOf") and (not data.get("categories") or data.get("amount") is None)
        }
    )

    rows: list[_Row] = []
    seen: dict[str, str] = {}  # id -> digest of events accepted earlier in this batch
    duplicates = 0
    for index, data in valid:
        digest = event_digest(data)
        event_id = data["id"]
        earlier = stored_digest.get(event_id) or seen.get(event_id)
        if earlier is not None:
            if earlier == digest:
                duplicates += 1
            else:
                result.rejected.append({"index": index, "id": event_id, "error": DUPLICATE_ID})
            continue
        try:
            row = _row(index, data, digest, originals, catalogue)
        except _Rejection as rejection:
            result.rejected.append({"index": index, "id": event_id, "error": str(rejection)})
            continue
        seen[event_id] = digest
        rows.append(row)
        if row.return_of is None:
            originals[event_id] = _Original(
                row.product_id, row.qty, row.amount_cents, row.categories, row.counted_at
            )
        else:
            original = originals[row.return_of]
            original.returned_units += -row.qty
            original.refunded_cents += row.amount_cents
            originals[event_id] = _Original(
                row.product_id, row.qty, row.amount_cents, row.categories, row.counted_at, is_return=True
            )
    return rows, duplicates


def _lock_originals(event_ids: set[str]) -> dict[str, _Original]:
    """The stored sales that returns refer to, with what was already returned of each.

    They are locked, so that two concurrent batches cannot together return
    more than was sold: the second waits, then counts the first one's returns.
    """
    originals: dict[str, _Original] = {}
    if not event_ids:
        return originals
    # Through the ids' table, and by (id, month): the sales table has no index on event_id,
    # and naming the months lets PostgreSQL read only their partitions.
    keys = dict(SaleId.objects.filter(event_id__in=event_ids).values_list("sale_id", "counted_at"))
    if not keys:
        return originals
    stored = Sale.objects.select_for_update().filter(id__in=list(keys), counted_at__in=set(keys.values()))
    for sale in stored.order_by("id"):
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


def _row(index, data, digest, originals, catalogue) -> _Row:
    product_id = data["productId"]
    qty = data["qty"]
    return_of = data.get("returnOf")
    amount = data.get("amount")

    if return_of is None:
        price_cents, catalogue_categories = catalogue.get(product_id, (0, []))
        categories = data.get("categories") or catalogue_categories
        if amount is None:
            amount_cents = price_cents * qty
            if amount_cents > MAX_AMOUNT_CENTS:
                raise _Rejection("amount (catalogue price × qty) has more than 12 digits before the point")
        else:
            amount_cents = _to_cents(amount)
        return _Row(
            index, data["id"], data["ts"], product_id, categories, qty, amount_cents, None, data["ts"], digest
        )

    original = originals.get(return_of)
    if original is None:
        raise _Rejection("returnOf refers to an unknown sale")
    if original.is_return:
        raise _Rejection("returnOf refers to a return, not a sale")
    if original.product_id != product_id:
        raise _Rejection("returnOf refers to a sale of another product")
    units_left = original.qty - original.returned_units
    if -qty > units_left:
        raise _Rejection(f"return of {-qty} units exceeds the {units_left} not yet returned")
    cents_left = original.amount_cents - original.refunded_cents
    if amount is None:
        # The return that completes the sale refunds what is left, so rounding
        # of earlier partial refunds never makes the total exceed the sale.
        if -qty == units_left:
            amount_cents = cents_left
        else:
            amount_cents = min(_pro_rata_cents(original.amount_cents, -qty, original.qty), cents_left)
    else:
        amount_cents = _to_cents(amount)
        if amount_cents > cents_left:
            raise _Rejection(
                f"refund of {_money(amount_cents)} exceeds the {_money(cents_left)} not yet refunded"
            )
    return _Row(
        index,
        data["id"],
        data["ts"],
        product_id,
        list(original.categories),
        qty,
        amount_cents,
        return_of,
        original.counted_at,
        digest,
    )


def _ensure_categories(rows: list[_Row]) -> None:
    """Create placeholders for unknown categories: no sale is lost for want of them."""
    slugs = {slug for row in rows for slug in row.categories}
    if not slugs:
        return
    known = set(Category.objects.filter(slug__in=slugs).values_list("slug", flat=True))
    shards = rankings_settings.SHARDS
    Category.objects.bulk_create(
        [
            Category(slug=s, name=s, is_placeholder=True, shard=shard_of(s, shards))
            for s in sorted(slugs - known)
        ],
        ignore_conflicts=True,
    )


# Category slugs and shard numbers are staged as comma-separated text (slugs
# cannot hold a comma): it copies in a third of the time arrays take.
_STAGE_TYPES = [
    "int4", "varchar", "timestamptz", "varchar", "text", "int4", "int8", "varchar", "timestamptz", "varchar",
    "text",
]  # fmt: skip
_STAGE = """
DROP TABLE IF EXISTS ingest_stage;
CREATE TEMPORARY TABLE ingest_stage (
    ord integer, event_id varchar(128), ts timestamptz, product_id varchar(64),
    categories text, qty integer, amount_cents bigint, return_of varchar(128),
    counted_at timestamptz, digest varchar(32), shards text
) ON COMMIT DROP
"""

# Unknown products become placeholders, linked to the categories their first
# sales name, before the sales that refer to them are inserted.
_PLACEHOLDER_PRODUCTS = f"""
WITH created AS (
    INSERT INTO {Product._meta.db_table} (product_id, name, price_cents, is_placeholder)
    SELECT DISTINCT stage.product_id, stage.product_id, 0, true
    FROM ingest_stage stage
    WHERE NOT EXISTS (
        SELECT 1 FROM {Product._meta.db_table} known WHERE known.product_id = stage.product_id
    )
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
    FROM (SELECT event_id, digest, counted_at FROM ingest_stage ORDER BY ord) AS staged
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
    INSERT INTO {PendingSale._meta.db_table} (shard, sale_id, counted_at)
    SELECT shard, inserted.id, inserted.counted_at  -- a sale's shards are distinct already
    FROM inserted JOIN ingest_stage USING (event_id),
         unnest(string_to_array(ingest_stage.shards, ',')::smallint[]) AS shard
)
SELECT event_id FROM inserted
"""


def _store(rows: list[_Row], result: IngestResult) -> tuple[int, int]:
    """Insert the rows in bulk; return (inserted, duplicates found only at insert time)."""
    if not rows:
        return 0, 0
    _ensure_categories(rows)
    shards = rankings_settings.SHARDS
    all_shard = shard_of(ALL, shards)
    shards_of: dict[tuple, str] = {}  # the few distinct category lists of a batch
    with connection.cursor() as cursor:
        cursor.execute(_STAGE)
        with cursor.copy("COPY ingest_stage FROM STDIN (FORMAT BINARY)") as copy:
            # Binary rows cost the server no text parsing: half the time of a text COPY.
            copy.set_types(_STAGE_TYPES)
            for row in rows:
                key = tuple(row.categories)
                row_shards = shards_of.get(key)
                if row_shards is None:
                    numbers = sorted({all_shard, *(shard_of(c, shards) for c in key)})
                    row_shards = shards_of[key] = ",".join(map(str, numbers))
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
                        row_shards,
                    )
                )
        cursor.execute(_PLACEHOLDER_PRODUCTS)
        cursor.execute(_INSERT)
        inserted = {event_id for (event_id,) in cursor.fetchall()}
        # Dropped now rather than at commit, so that a caller's outer transaction
        # can ingest again.
        cursor.execute("DROP TABLE ingest_stage")
    # An id that a concurrent batch stored between our check and our insert.
    late_duplicates = 0
    raced = [row for row in rows if row.event_id not in inserted]
    if raced:
        stored = _stored_digests([r.event_id for r in raced])
        for row in raced:
            if stored.get(row.event_id) == row.digest:
                late_duplicates += 1
            else:
                result.rejected.append({"index": row.index, "id": row.event_id, "error": DUPLICATE_ID})
    return len(inserted), late_duplicates

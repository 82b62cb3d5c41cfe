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

from catalogue.models import ALL, Category, Product, shard_of

from .conf import rankings_settings
from .models import IngestLog
from .serializers import SaleEventSerializer, first_error


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


@dataclass
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


@dataclass
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


def _pro_rata_cents(amount_cents: int, part: int, whole: int) -> int:
    """amount × part ÷ whole, rounded half-up to the cent (all values positive)."""
    return (2 * amount_cents * part + whole) // (2 * whole)


def event_digest(data: dict) -> str:
    """Identity of an event's content, so a resend can be told from a reused id."""
    canonical = [
        data["id"],
        round(data["ts"].timestamp(), 6),
        data["productId"],
        sorted(data["categories"]) if data.get("categories") else None,
        data["qty"],
        _to_cents(data["amount"]) if data.get("amount") is not None else None,
        data.get("returnOf") or None,
    ]
    return hashlib.md5(json.dumps(canonical).encode(), usedforsecurity=False).hexdigest()


def sales_ingest(*, events: list, source: str = "api", now: dt.datetime | None = None) -> IngestResult:
    """Validate `events` in order and store the valid ones; return what became of each."""
    now = now or timezone.now()
    result = IngestResult()
    limit = now + dt.timedelta(seconds=rankings_settings.MAX_FUTURE_SECONDS)

    valid: list[tuple[int, dict]] = []
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            result.rejected.append({"index": index, "id": None, "error": "event must be a JSON object"})
            continue
        serializer = SaleEventSerializer(data=event)
        if not serializer.is_valid():
            result.rejected.append(
                {"index": index, "id": _id_of(event), "error": first_error(serializer.errors)}
            )
            continue
        data = serializer.validated_data
        if data["ts"] > limit:
            result.rejected.append(
                {"index": index, "id": data["id"], "error": "ts is more than 5 minutes in the future"}
            )
            continue
        valid.append((index, data))

    with transaction.atomic():
        rows, duplicates = _resolve(valid, result)
        inserted, late_duplicates = _store(rows, result)
        result.accepted = inserted
        result.duplicates = duplicates + late_duplicates
        IngestLog.objects.create(
            source=source,
            accepted=result.accepted,
            duplicates=result.duplicates,
            rejected=len(result.rejected),
        )
    result.rejected.sort(key=lambda r: r["index"])
    return result


def _id_of(event: dict):
    value = event.get("id")
    return value if isinstance(value, str) else None


def _resolve(valid: list[tuple[int, dict]], result: IngestResult) -> tuple[list[_Row], int]:
    """Check each event against stored sales and earlier events of the batch, in order."""
    from .models import Sale

    ids = {data["id"] for _, data in valid}
    originals_wanted = {data["returnOf"] for _, data in valid if data.get("returnOf")}
    stored_digest = dict(Sale.objects.filter(event_id__in=ids).values_list("event_id", "digest"))

    # Lock the originals that returns refer to, so that two concurrent batches
    # cannot together return more than was sold.
    originals: dict[str, _Original] = {}
    if originals_wanted:
        for sale in Sale.objects.select_for_update().filter(event_id__in=originals_wanted):
            originals[sale.event_id] = _Original(
                product_id=sale.product_id,
                qty=sale.qty,
                amount_cents=sale.amount_cents,
                categories=list(sale.categories),
                counted_at=sale.counted_at,
                is_return=sale.return_of is not None,
            )
        returned = (
            Sale.objects.filter(return_of__in=list(originals))
            .values_list("return_of", "qty", "amount_cents")
            .order_by()
        )
        for original_id, qty, amount_cents in returned:
            originals[original_id].returned_units += -qty
            originals[original_id].refunded_cents += amount_cents

    product_ids = {data["productId"] for _, data in valid}
    products = {
        p.product_id: p
        for p in Product.objects.filter(product_id__in=product_ids).prefetch_related("categories")
    }
    catalogue_categories = {pid: sorted(c.slug for c in p.categories.all()) for pid, p in products.items()}

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
                result.rejected.append(
                    {"index": index, "id": event_id, "error": "id already used by a different event"}
                )
            continue
        try:
            row = _row(index, data, digest, originals, products, catalogue_categories)
        except _Rejection as rejection:
            result.rejected.append({"index": index, "id": event_id, "error": str(rejection)})
            continue
        seen[event_id] = digest
        rows.append(row)
        if row.return_of is None:
            originals[event_id] = _Original(
                product_id=row.product_id,
                qty=row.qty,
                amount_cents=row.amount_cents,
                categories=row.categories,
                counted_at=row.counted_at,
            )
        else:
            original = originals[row.return_of]
            original.returned_units += -row.qty
            original.refunded_cents += row.amount_cents
    return rows, duplicates


def _row(index, data, digest, originals, products, catalogue_categories) -> _Row:
    product_id = data["productId"]
    qty = data["qty"]
    return_of = data.get("returnOf") or None
    amount = data.get("amount")

    if return_of is None:
        categories = data.get("categories") or catalogue_categories.get(product_id, [])
        if amount is None:
            product = products.get(product_id)
            amount_cents = (product.price_cents if product else 0) * qty
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
            raise _Rejection(f"refund of {amount} exceeds the {Decimal(cents_left) / 100} not yet refunded")
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


def _ensure_catalogue(rows: list[_Row]) -> None:
    """Create placeholders for unknown categories and products: no sale is lost for want of them."""
    shards = rankings_settings.SHARDS
    slugs = {slug for row in rows for slug in row.categories}
    if slugs:
        Category.objects.bulk_create(
            [Category(slug=s, name=s, is_placeholder=True, shard=shard_of(s, shards)) for s in sorted(slugs)],
            ignore_conflicts=True,
        )
    new_products = {}
    for row in rows:
        new_products.setdefault(row.product_id, set()).update(row.categories)
    known = set(Product.objects.filter(product_id__in=new_products).values_list("product_id", flat=True))
    missing = {pid: cats for pid, cats in new_products.items() if pid not in known}
    if not missing:
        return
    Product.objects.bulk_create(
        [Product(product_id=pid, name=pid, is_placeholder=True) for pid in sorted(missing)],
        ignore_conflicts=True,
    )
    created = dict(
        Product.objects.filter(product_id__in=missing, is_placeholder=True).values_list("product_id", "id")
    )
    category_ids = dict(Category.objects.filter(slug__in=slugs).values_list("slug", "id"))
    links = [
        Product.categories.through(product_id=created[pid], category_id=category_ids[slug])
        for pid, cats in missing.items()
        if pid in created
        for slug in cats
    ]
    Product.categories.through.objects.bulk_create(links, ignore_conflicts=True)


_STAGE = """
CREATE TEMPORARY TABLE ingest_stage (
    ord integer, event_id varchar(128), ts timestamptz, product_id varchar(64),
    categories varchar(50)[], qty integer, amount_cents bigint, return_of varchar(128),
    counted_at timestamptz, digest varchar(32), shards smallint[]
) ON COMMIT DROP
"""

_INSERT = """
WITH inserted AS (
    INSERT INTO rankings_sale
        (event_id, ts, product_id, categories, qty, amount_cents, return_of, counted_at, received_at, digest)
    SELECT event_id, ts, product_id, categories, qty, amount_cents, return_of, counted_at, now(), digest
    FROM ingest_stage ORDER BY ord
    ON CONFLICT (event_id) DO NOTHING
    RETURNING id, event_id
), queued AS (
    INSERT INTO rankings_pendingsale (shard, sale_id)
    SELECT DISTINCT shard, inserted.id
    FROM inserted JOIN ingest_stage USING (event_id), unnest(ingest_stage.shards) AS shard
)
SELECT event_id FROM inserted
"""


def _store(rows: list[_Row], result: IngestResult) -> tuple[int, int]:
    """Insert the rows in bulk; return (inserted, duplicates found only at insert time)."""
    if not rows:
        return 0, 0
    _ensure_catalogue(rows)
    shards = rankings_settings.SHARDS
    all_shard = shard_of(ALL, shards)
    with connection.cursor() as cursor:
        cursor.execute(_STAGE)
        with cursor.copy(
            "COPY ingest_stage (ord, event_id, ts, product_id, categories, qty, amount_cents,"
            " return_of, counted_at, digest, shards) FROM STDIN"
        ) as copy:
            for row in rows:
                row_shards = sorted({all_shard, *(shard_of(c, shards) for c in row.categories)})
                copy.write_row(
                    (
                        row.index,
                        row.event_id,
                        row.ts,
                        row.product_id,
                        row.categories,
                        row.qty,
                        row.amount_cents,
                        row.return_of,
                        row.counted_at,
                        row.digest,
                        row_shards,
                    )
                )
        cursor.execute(_INSERT)
        inserted = {event_id for (event_id,) in cursor.fetchall()}
    # An id that a concurrent batch stored between our check and our insert.
    late_duplicates = 0
    raced = [row for row in rows if row.event_id not in inserted]
    if raced:
        from .models import Sale

        stored = dict(
            Sale.objects.filter(event_id__in=[r.event_id for r in raced]).values_list("event_id", "digest")
        )
        for row in raced:
            if stored.get(row.event_id) == row.digest:
                late_duplicates += 1
            else:
                result.rejected.append(
                    {"index": row.index, "id": row.event_id, "error": "id already used by a different event"}
                )
    return len(inserted), late_duplicates

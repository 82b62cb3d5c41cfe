"""The write path's entrance for engagement: validate view and wish events and store them raw.

The same machinery as sales (rankings.ingest.sales): one validator instance per
batch, the event in order with its index and reason when rejected, the catalogue
read only for what an event leaves out, placeholders for unknown products and
categories, a binary COPY into a per-session staging table and one statement
that stores the events together with their places in the tick's work queue.

What differs: an id is optional (without one every event counts), there are no
returns and no totals to bound, and the raw table keeps only the retention
(rankings.conf.engagement_retention_seconds) behind the engine's clock. An event
already older than that on arrival is counted as dropped-too-old and not stored;
de-duplication of ids holds within the retention, as the ids are pruned with
their days.
"""

import datetime as dt
import hashlib
import random
import time
from dataclasses import dataclass

from django.db import OperationalError, connection, transaction
from django.utils import timezone

from catalogue.models import Category, Product
from rankings.conf import engagement_retention_seconds, rankings_settings
from rankings.engine import locks
from rankings.engine.prune import engine_now
from rankings.engine.shards import layout_checked
from rankings.engine.tree import version_tree
from rankings.ingest.events import EngagementEventSerializer, EventValidator
from rankings.ingest.partitions import engagement_partitions_ensure
from rankings.ingest.sales import (
    _RETRYABLE,
    ATTEMPTS,
    DUPLICATE_ID,
    RETRY_PAUSE,
    IngestResult,
    _canonical_json,
    _catalogue_of,
    _ensure_categories,
    _id_of,
    _queue_entries,
    _too_far_ahead,
)
from rankings.models import Engagement, EngagementId, IngestLog, PendingEngagement
from rankings.tasks import tick_wake_on_commit


@dataclass(slots=True, kw_only=True)
class _Row:
    """A validated engagement event, ready to store."""

    index: int
    event_id: str | None
    ts: dt.datetime
    product_id: str
    kind: str
    categories: list[str]
    digest: str | None


def engagement_digest(data: dict) -> str:
    """Identity of an event's content, so a resend is told from a reused id."""
    canonical = [
        data["id"],
        round(data["ts"].timestamp(), 6),
        data["productId"],
        sorted(data["categories"]) if data.get("categories") else None,
        data["kind"],
    ]
    return hashlib.md5(_canonical_json(canonical).encode(), usedforsecurity=False).hexdigest()


def retention_cutoff(now: dt.datetime | None = None) -> dt.datetime | None:
    """The oldest instant engagement events are kept from, by the engine's clock (`now`, default the
    latest tick's); None before the first tick, when nothing is too old yet."""
    now = now or engine_now()
    if now is None:
        return None
    return now - dt.timedelta(seconds=engagement_retention_seconds())


def engagements_ingest(
    *, events: list, source: str = "engage-api", now: dt.datetime | None = None
) -> IngestResult:
    """Validate `events` in order and store the valid ones; return what became of each.

    `accepted` counts the events stored and those dropped as older than the retention.
    """
    now = now or timezone.now()
    invalid: list[dict] = []
    limit = now + dt.timedelta(seconds=rankings_settings.MAX_FUTURE_SECONDS)
    validate = EventValidator(EngagementEventSerializer)
    valid: list[tuple[int, dict]] = []
    for index, event in enumerate(events):
        data, error = validate(event)
        if error is not None:
            invalid.append({"index": index, "id": _id_of(event), "error": error})
        elif data["ts"] > limit:
            invalid.append({"index": index, "id": data.get("id"), "error": _too_far_ahead()})
        else:
            valid.append((index, data))
    if not events:
        return IngestResult()
    for attempt in range(1, ATTEMPTS + 1):
        result = IngestResult(rejected=list(invalid))
        try:
            with transaction.atomic():
                _ingest_valid(valid, result, source, now)
            break
        except OperationalError as error:
            if attempt == ATTEMPTS or getattr(error.__cause__, "sqlstate", None) not in _RETRYABLE:
                raise
            time.sleep(RETRY_PAUSE * 2 ** (attempt - 1) * random.uniform(0.5, 1))
    result.rejected.sort(key=lambda r: r["index"])
    return result


def _ingest_valid(valid: list[tuple[int, dict]], result: IngestResult, source: str, now: dt.datetime) -> None:
    """One attempt at storing the valid events, inside the caller's transaction."""
    # Held until the commit: no day this batch stores into is dropped meanwhile.
    locks.retention_read_lock()
    cutoff = retention_cutoff()
    kept = [(index, data) for index, data in valid if cutoff is None or data["ts"] >= cutoff]
    too_old = len(valid) - len(kept)
    rows, duplicates = _resolve(kept, result)
    inserted, late_duplicates = _store(rows, result)
    result.accepted = inserted + too_old
    result.duplicates = duplicates + late_duplicates
    IngestLog.objects.create(
        at=now,
        source=source,
        accepted=result.accepted,
        duplicates=result.duplicates,
        rejected=len(result.rejected),
        too_old=too_old,
    )


def _stored_digests(event_ids: list[str]) -> dict[str, str]:
    if not event_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT event_id, digest FROM {EngagementId._meta.db_table}"
            " WHERE event_id IN (SELECT unnest(%s::text[]))",
            [event_ids],
        )
        return dict(cursor.fetchall())


def _resolve(valid: list[tuple[int, dict]], result: IngestResult) -> tuple[list[_Row], int]:
    """The rows to store, in order, and how many events were resends of ids already taken."""
    rows: list[_Row] = []
    duplicates = 0
    if not valid:
        return rows, duplicates
    stored = _stored_digests([data["id"] for _, data in valid if data.get("id")])
    catalogue = _catalogue_of({data["productId"] for _, data in valid if not data.get("categories")})
    seen: dict[str, str] = {}
    for index, data in valid:
        event_id = data.get("id")
        digest = None
        if event_id is not None:
            digest = engagement_digest(data)
            earlier = stored.get(event_id) or seen.get(event_id)
            if earlier is not None:
                if earlier == digest:
                    duplicates += 1
                else:
                    result.rejected.append({"index": index, "id": event_id, "error": DUPLICATE_ID})
                continue
            seen[event_id] = digest
        categories = data.get("categories") or catalogue.get(data["productId"], (0, []))[1]
        rows.append(
            _Row(
                index=index,
                event_id=event_id,
                ts=data["ts"],
                product_id=data["productId"],
                kind=data["kind"],
                categories=list(categories),
                digest=digest,
            )
        )
    return rows, duplicates


_STAGE_TYPES = ["int4", "varchar", "timestamptz", "varchar", "varchar", "text", "varchar", "text"]
# Created once per database session and emptied after each use (see rankings.ingest.sales._STAGE).
_STAGE = """
CREATE TEMPORARY TABLE IF NOT EXISTS engagement_stage (
    ord integer, event_id varchar(128), ts timestamptz, product_id varchar(64), kind varchar(4),
    categories text, digest varchar(32), queue text
) ON COMMIT DELETE ROWS
"""

# As for sales: unknown products become placeholders linked to the categories their first events name.
_PLACEHOLDER_PRODUCTS = f"""
WITH created AS (
    INSERT INTO {Product._meta.db_table} (product_id, name, price_cents, is_placeholder)
    SELECT wanted.product_id, wanted.product_id, 0, true
    FROM unnest(%s::text[]) WITH ORDINALITY AS wanted(product_id, n)
    WHERE (SELECT known.id FROM {Product._meta.db_table} known WHERE known.product_id = wanted.product_id) IS NULL
    ORDER BY wanted.n
    ON CONFLICT (product_id) DO NOTHING
    RETURNING id, product_id
)
INSERT INTO {Product.categories.through._meta.db_table} (product_id, category_id)
SELECT DISTINCT created.id, category.id
FROM created
JOIN engagement_stage stage USING (product_id)
CROSS JOIN unnest(string_to_array(stage.categories, ',')) AS wanted(slug)
JOIN {Category._meta.db_table} category ON category.slug = wanted.slug
ON CONFLICT DO NOTHING
"""

# An id is claimed in EngagementId first (a concurrent batch's same id waits, then is skipped);
# events without an id and those whose id was claimed are stored, and queued grouped: one row
# per product, whole second and list of categories, on each shard they count in, with how many
# views and wishes the group holds.
_INSERT = f"""
WITH claimed AS (
    INSERT INTO {EngagementId._meta.db_table} (event_id, digest, ts)
    SELECT event_id, digest, ts FROM engagement_stage WHERE event_id IS NOT NULL
    ORDER BY event_id  -- a fixed order: concurrent batches wait rather than deadlock
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id
), chosen AS MATERIALIZED (
    SELECT stage.* FROM engagement_stage stage
    WHERE stage.event_id IS NULL OR stage.event_id IN (SELECT event_id FROM claimed)
), inserted AS (
    INSERT INTO {Engagement._meta.db_table} (event_id, ts, product_id, kind, categories, received_at)
    SELECT event_id, ts, product_id, kind, string_to_array(categories, ','), now() FROM chosen
), grouped AS MATERIALIZED (
    SELECT nextval('{Engagement._meta.db_table}_id_seq') AS entry, g.*
    FROM (
        SELECT product_id, to_timestamp(floor(extract(epoch FROM ts))) AS second, queue, categories,
               count(*) FILTER (WHERE kind = 'view') AS views, count(*) FILTER (WHERE kind = 'wish') AS wishes
        FROM chosen GROUP BY 1, 2, 3, 4
    ) AS g
), queued AS (
    INSERT INTO {PendingEngagement._meta.db_table}
        (shard, entry, product_id, ts, categories, named, views, wishes, queued_at)
    SELECT split_part(item, ':', 1)::smallint, grouped.entry, grouped.product_id, grouped.second,
           string_to_array(split_part(item, ':', 2), ','), string_to_array(grouped.categories, ','),
           grouped.views, grouped.wishes, now()
    FROM grouped, unnest(string_to_array(grouped.queue, ';')) AS item
)
SELECT ord FROM chosen
"""


def _store(rows: list[_Row], result: IngestResult) -> tuple[int, int]:
    """Insert the rows in bulk; return (how many were stored, duplicates found only at insert time)."""
    locks.layout_read_lock()
    number, layout = layout_checked()
    if not rows:
        return 0, 0
    # Read under the layout's lock, as for sales: a switch to another tree waits for this batch.
    tree = version_tree(number)
    _ensure_categories(rows)
    engagement_partitions_ensure({row.ts for row in rows})
    with connection.cursor() as cursor:
        cursor.execute(_STAGE)
        queue_of: dict[tuple, str] = {}
        with cursor.copy("COPY engagement_stage FROM STDIN (FORMAT BINARY)") as copy:
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
                        row.kind,
                        ",".join(row.categories),
                        row.digest,
                        queue,
                    )
                )
        cursor.execute(_PLACEHOLDER_PRODUCTS, [sorted({row.product_id for row in rows})])
        cursor.execute(_INSERT)
        stored = {index for (index,) in cursor.fetchall()}
        cursor.execute("DELETE FROM engagement_stage")
    tick_wake_on_commit(layout, {tree.expand(row.categories) for row in rows if row.index in stored})
    raced = [row for row in rows if row.index not in stored]
    late_duplicates = 0
    if raced:
        digests = _stored_digests([row.event_id for row in raced])
        for row in raced:
            if digests.get(row.event_id) == row.digest:
                late_duplicates += 1
            else:
                result.rejected.append({"index": row.index, "id": row.event_id, "error": DUPLICATE_ID})
    return len(stored), late_duplicates

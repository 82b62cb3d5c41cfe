"""Views and wishes through the batch ingest (rankings.ingest.batch), the one sales take.

What differs: an id is optional (without one every event counts), there are no
returns and no totals to bound, and the raw table keeps only the retention
(rankings.conf.engagement_retention_seconds) behind the engine's clock. An event
already older than that on arrival is counted as dropped-too-old and not stored;
de-duplication of ids holds within the retention, as the ids are pruned with
their days.
"""

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from rankings.conf import engagement_retention_seconds
from rankings.engine import locks
from rankings.engine.partitions import engagement_partitions_ensure
from rankings.engine.prune import engine_now
from rankings.ingest.batch import (
    DUPLICATE_ID,
    Attempt,
    BatchIngest,
    IngestResult,
    canonical_json,
    catalogue_of,
)
from rankings.ingest.events import EngagementEventSerializer
from rankings.models import Engagement, EngagementId, PendingEngagement


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
    return hashlib.md5(canonical_json(canonical).encode(), usedforsecurity=False).hexdigest()


def retention_cutoff(now: dt.datetime | None = None) -> dt.datetime | None:
    """The oldest instant engagement events are kept from, by the engine's clock (`now`, default the
    latest tick's); None before the first tick, when nothing is too old yet."""
    now = now or engine_now()
    if now is None:
        return None
    return now - dt.timedelta(seconds=engagement_retention_seconds())


def _resolve(
    valid: list[tuple[int, dict]], result: IngestResult, stored_digests: Callable
) -> tuple[list[_Row], int]:
    """The rows to store, in order, and how many events were resends of ids already taken."""
    rows: list[_Row] = []
    duplicates = 0
    if not valid:
        return rows, duplicates
    stored = stored_digests([data["id"] for _, data in valid if data.get("id")])
    catalogue = catalogue_of({data["productId"] for _, data in valid if not data.get("categories")})
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


class EngagementIngest(BatchIngest):
    serializer_class = EngagementEventSerializer
    id_table = EngagementId._meta.db_table
    stage_table = "engagement_stage"
    stage_columns = (
        "ord integer, event_id varchar(128), ts timestamptz, product_id varchar(64), kind varchar(4),"
        " categories text, digest varchar(32), queue text"
    )
    stage_types = ["int4", "varchar", "timestamptz", "varchar", "varchar", "text", "varchar", "text"]
    insert = _INSERT
    # An event rejected for a kind that is neither is counted as "unknown".
    kinds = ("view", "wish", "unknown")

    def kind_of(self, event) -> str:
        kind = event.get("kind") if isinstance(event, dict) else None
        return kind if kind in self.kinds[:2] else self.kinds[2]

    def attempt(self, valid: list[tuple[int, dict]], result: IngestResult, *, first: bool) -> Attempt:
        """`accepted` counts the events stored and those dropped as older than the retention."""
        # Held until the commit: no day this batch stores into is dropped meanwhile.
        locks.retention_read_lock()
        cutoff = retention_cutoff()
        dropped = {index for index, data in valid if cutoff is not None and data["ts"] < cutoff}
        kept = [(index, data) for index, data in valid if index not in dropped]
        rows, duplicates = _resolve(kept, result, self.stored_digests)
        stored, late_duplicates = self.store(rows, result)
        return Attempt(
            accepted=len(stored) + len(dropped),
            duplicates=duplicates + late_duplicates,
            too_old=len(dropped),
            accepted_at=stored | dropped,
        )

    def before_stage(self, rows: list[_Row]) -> None:
        engagement_partitions_ensure({row.ts for row in rows})

    def staged(self, row: _Row, queue: str) -> tuple:
        return (
            row.index,
            row.event_id,
            row.ts,
            row.product_id,
            row.kind,
            ",".join(row.categories),
            row.digest,
            queue,
        )


_ingest = EngagementIngest()


def engagements_ingest(
    *, events: list, source: str = "engage-api", now: dt.datetime | None = None
) -> IngestResult:
    """Validate `events` in order and store the valid ones; return what became of each.

    `accepted` counts the events stored and those dropped as older than the retention.
    """
    return _ingest(events=events, source=source, now=now)

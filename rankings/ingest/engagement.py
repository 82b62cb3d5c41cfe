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
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import cast

from rankings.conf import engagement_retention_seconds
from rankings.engine import locks
from rankings.engine.partitions import engagement_partitions_ensure
from rankings.engine.prune import engine_now
from rankings.ingest.batch import (
    DUPLICATE_ID,
    Attempt,
    BatchIngest,
    IngestResult,
    catalogue_of,
    json_text,
    slugs_text,
)
from rankings.ingest.events import EngagementEventSerializer
from rankings.models import Engagement, EngagementId, PendingEngagement


@dataclass(slots=True)
class _Row:
    """A validated engagement event, ready to store. Made by position in `_resolve`, once a view: a
    call by keyword takes twice as long."""

    index: int
    event_id: str | None
    ts: dt.datetime
    product_id: str
    kind: str
    categories: list[str]
    digest: str | None


def engagement_digest(data: dict) -> str:
    """Identity of a valid event's content, so a resend is told from a reused id: the MD5 of
    json.dumps([id, ts to the microsecond, productId, sorted categories or None, kind]), written
    directly (a valid product id and kind need no escape)."""
    text = (
        f'[{json_text(data["id"])}, {round(data["ts"].timestamp(), 6)!r}, "{data["productId"]}", '
        f'{slugs_text(data.get("categories"))}, "{data["kind"]}"]'
    )
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


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
    """The rows to store, in order, and how many events were resends of ids already taken.

    An id the batch names once is not looked up: its claim (`EngagementIngest.claimed`) finds it
    taken, and the row is then told a resend or a reuse (`_late_duplicates`). An id named more than once is, so that
    each of its events is judged against the event stored under it, if any, and not against the
    batch's first."""
    rows: list[_Row] = []
    duplicates = 0
    if not valid:
        return rows, duplicates
    events = list(map(itemgetter(1), valid))
    named = Counter(filter(None, map(dict.get, events, repeat("id"))))  # in C
    stored = stored_digests([event_id for event_id, times in named.items() if times > 1])
    lists = list(map(dict.get, events, repeat("categories")))
    # The catalogue's categories, for the events that name none: as a rule, a batch of views names
    # its categories in every event, which C tells.
    catalogue = (
        {}
        if all(lists)
        else catalogue_of({data["productId"] for data, given in zip(events, lists, strict=True) if not given})
    )
    seen: dict[str, str] = {}
    for (index, data), categories in zip(valid, lists, strict=True):
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
        product_id = data["productId"]
        # The catalogue's list is a product's, shared by its rows: never changed.
        categories = categories or catalogue.get(product_id, (0, []))[1]
        rows.append(_Row(index, event_id, data["ts"], product_id, data["kind"], categories, digest))
    return rows, duplicates


# The ids of the batch's events that came with one are claimed in EngagementId first, in one
# statement (a concurrent batch's same id waits, then is skipped); the events without an id and
# those whose id was claimed are then copied straight into the raw table.
_CLAIM = f"""
INSERT INTO {EngagementId._meta.db_table} (event_id, digest, ts)
SELECT * FROM unnest(
    string_to_array(%s, E'\\n'), string_to_array(%s, E'\\n'), string_to_array(%s, E'\\n')::timestamptz[]
)
ORDER BY 1  -- a fixed order: concurrent batches wait rather than deadlock
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id
"""

# The stored events are queued grouped: one row per product, whole second and list of categories,
# on each shard they count in, with how many views and wishes the group holds. A batch's few lists
# of categories are sent once each, with the shards and boards they are queued for (`lists`), and
# each group names its list by number: the lists' texts are split once, not once a group.
_QUEUE = f"""
WITH lists AS MATERIALIZED (
    SELECT l.list, split_part(item, ':', 1)::smallint AS shard,
           string_to_array(split_part(item, ':', 2), ',') AS categories,
           string_to_array(substr(l.named, 2), ',') AS named
    FROM unnest(string_to_array(%s, E'\\n'), string_to_array(%s, E'\\n')) WITH ORDINALITY AS l(queue, named, list),
         unnest(string_to_array(l.queue, ';')) AS item
), grouped AS MATERIALIZED (
    SELECT nextval('{Engagement._meta.db_table}_id_seq') AS entry, g.*
    FROM unnest(
        string_to_array(%s, E'\\n'), string_to_array(%s, ',')::bigint[], string_to_array(%s, ',')::bigint[],
        string_to_array(%s, ',')::int[], string_to_array(%s, ',')::int[]
    ) AS g(product_id, second, list, views, wishes)
)
INSERT INTO {PendingEngagement._meta.db_table}
    (shard, entry, product_id, ts, categories, named, views, wishes, queued_at)
SELECT lists.shard, grouped.entry, grouped.product_id, to_timestamp(grouped.second), lists.categories,
       lists.named, grouped.views, grouped.wishes, now()
FROM grouped JOIN lists USING (list)
"""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_SECOND = dt.timedelta(seconds=1)

# The raw rows go in PostgreSQL's binary COPY format, each field's bytes made once a batch (an
# instant, a product, a kind, a list of categories): PostgreSQL then parses no text, which spared it
# a third of a microsecond a view where the client spends a tenth more (psycopg's own binary rows
# make each field again for every row, its arrays in Python).
_RAW_COLUMNS = "event_id, ts, product_id, kind, categories"  # received_at: the database's
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # no flags, no header extension
_TRAILER = b"\xff\xff"
_FIELD_COUNT = struct.pack(">h", len(_RAW_COLUMNS.split(", ")))
_NULL = struct.pack(">i", -1)
_POSTGRES_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)
_VARCHAR = 1043  # the type of the categories' elements
# Rows handed to PostgreSQL at a time, so that it stores them while Python makes the next: 250,
# 1,000 and 4,000 stored 10,000 views alike, a fifth faster than one piece at the end (bench ladder).
COPY_ROWS = 250


def _binary_text(value: str) -> bytes:
    """A text field: its length, then its UTF-8 (the connection's encoding, Django's setting)."""
    data = value.encode()
    return struct.pack(">i", len(data)) + data


def _binary_instant(instant: dt.datetime) -> bytes:
    """A timestamptz field: microseconds since 2000-01-01 UTC."""
    return struct.pack(">iq", 8, (instant - _POSTGRES_EPOCH) // _MICROSECOND)


def _binary_slugs(slugs: tuple[str, ...]) -> bytes:
    """A varchar[] field: one dimension from 1 (none for no slug), no nulls, each slug a text."""
    if not slugs:
        array = struct.pack(">iii", 0, 0, _VARCHAR)
    else:
        array = struct.pack(">iiiii", 1, 0, _VARCHAR, len(slugs), 1) + b"".join(map(_binary_text, slugs))
    return struct.pack(">i", len(array)) + array


class EngagementIngest(BatchIngest):
    serializer_class = EngagementEventSerializer
    id_table = EngagementId._meta.db_table
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
        dropped: set[int] = set()
        kept = valid
        # A batch seldom holds an event that old: its oldest instant, found in C, says whether to look.
        if (
            cutoff is not None
            and min(map(itemgetter("ts"), map(itemgetter(1), valid)), default=cutoff) < cutoff
        ):
            dropped = {index for index, data in valid if data["ts"] < cutoff}
            kept = [(index, data) for index, data in valid if index not in dropped]
        rows, duplicates = _resolve(kept, result, self.stored_digests)
        stored, late_duplicates = self.store(rows, result)
        return Attempt(
            accepted=len(stored) + len(dropped),
            duplicates=duplicates + late_duplicates,
            too_old=len(dropped),
            accepted_at=stored | dropped,
        )

    def claimed(self, cursor, rows: list[_Row]) -> list[_Row]:
        """Claim the rows' ids; the rows without one, and those whose id was claimed."""
        identified = [row for row in rows if row.event_id is not None]
        if not identified:
            return rows
        # As the queue's columns below: one text each, of lines (an id holds no control character).
        cursor.execute(
            _CLAIM,
            [
                "\n".join(cast(str, row.event_id) for row in identified),
                "\n".join(cast(str, row.digest) for row in identified),  # set with the id
                "\n".join(row.ts.isoformat() for row in identified),
            ],
        )
        claimed = {event_id for (event_id,) in cursor.fetchall()}
        return [row for row in rows if row.event_id is None or row.event_id in claimed]

    def write(self, cursor, rows: list[_Row], queue_of: Callable[[_Row], str]) -> set[int]:
        """COPY the rows (their ids claimed) into the raw table, and queue them grouped."""
        # ts -> its field, the start of a row without an id, and its whole second
        instants: dict[dt.datetime, tuple[bytes, bytes, int]] = {}
        for row in rows:
            if row.ts not in instants:
                stamp = _binary_instant(row.ts)
                instants[row.ts] = (stamp, _FIELD_COUNT + _NULL + stamp, (row.ts - _EPOCH) // _SECOND)
        engagement_partitions_ensure(instants)
        groups: dict[tuple, list] = {}  # (product, second, categories) -> [views, wishes, a row of them]
        products: dict[str, bytes] = {}  # a product -> its field
        tails: dict[tuple, bytes] = {}  # (kind, categories) -> the row's last two fields
        # Sent as they are made, COPY_ROWS rows at a time, so that PostgreSQL stores rows while Python
        # makes the next ones.
        with cursor.copy(
            f"COPY {Engagement._meta.db_table} ({_RAW_COLUMNS}) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            pending = [_SIGNATURE]  # what is made and not yet handed over
            for row in rows:
                stamp, start, second = instants[row.ts]
                if row.event_id is not None:
                    start = _FIELD_COUNT + _binary_text(row.event_id) + stamp
                product = products.get(row.product_id)
                if product is None:
                    product = products[row.product_id] = _binary_text(row.product_id)
                slugs = tuple(row.categories)
                tail = tails.get((row.kind, slugs))
                if tail is None:
                    tail = tails[row.kind, slugs] = _binary_text(row.kind) + _binary_slugs(slugs)
                pending.append(start + product + tail)
                if len(pending) >= COPY_ROWS:
                    copy.write(b"".join(pending))
                    pending.clear()
                key = (row.product_id, second, slugs)
                counts = groups.get(key)
                if counts is None:
                    counts = groups[key] = [0, 0, row]
                counts[row.kind == "wish"] += 1
            pending.append(_TRAILER)
            copy.write(b"".join(pending))
        # Each list of categories, by the shards and boards it is queued for (with split boards, a
        # product's too) and as named: numbered from 1 in the order first met.
        lists: dict[tuple[str, str], int] = {}
        numbers = []
        for (_, _, slugs), counts in groups.items():
            # Led by a comma, so that no line is empty: one empty line, the only list's, would split
            # into no line at all.
            queued = (queue_of(counts[2]), "," + ",".join(slugs))
            numbers.append(lists.setdefault(queued, len(lists) + 1))
        # Each column as one text of lines (or of numbers), which none of its values can hold: psycopg's
        # dumper of lists is slower than the statement.
        cursor.execute(
            _QUEUE,
            [
                "\n".join(queue for queue, _ in lists),
                "\n".join(named for _, named in lists),
                "\n".join(product_id for product_id, _, _ in groups),
                ",".join(str(second) for _, second, _ in groups),
                ",".join(map(str, numbers)),
                ",".join(str(counts[0]) for counts in groups.values()),
                ",".join(str(counts[1]) for counts in groups.values()),
            ],
        )
        return set(map(attrgetter("index"), rows))


_ingest = EngagementIngest()


def engagements_ingest(
    *, events: list, source: str = "engage-api", now: dt.datetime | None = None
) -> IngestResult:
    """Validate `events` in order and store the valid ones; return what became of each.

    `accepted` counts the events stored and those dropped as older than the retention.
    """
    return _ingest(events=events, source=source, now=now)

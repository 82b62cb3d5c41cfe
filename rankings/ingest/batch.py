"""The one way in for a batch of events, sales or views and wishes: validate, stage, store, log.

A batch is checked event by event, in the order given; the valid events are
stored in one transaction, together with their places in the tick's work
queue, and committed before the caller replies. A bad event is rejected with
its index and reason and costs the others nothing.

What every kind of event shares lives here (`BatchIngest`): the validation
loop, the retries of a deadlock or serialization failure, the catalogue read
for what events leave out, placeholders for unknown categories and products,
each row's place in the tick's work queue, the ids found taken only at insert
time, and the log row. A kind of event (`rankings.ingest.sales`,
`rankings.ingest.engagement`) says which serializer it uses, how it resolves
its valid events into rows, and how it writes them with their queue rows.
"""

import contextlib
import datetime as dt
import gc
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Any, ClassVar, TypeVar

from django.db import OperationalError, connection, transaction
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from catalogue.models import Category, Product
from rankings.conf import rankings_settings
from rankings.engine import locks
from rankings.engine.counts import counts_add
from rankings.engine.shards import Layout, layout_checked
from rankings.engine.tree import Tree, version_tree
from rankings.ingest.events import EventIdField, EventValidator, duration_text
from rankings.ingest.wake import tick_wake_on_commit
from rankings.models import IngestLog

DUPLICATE_ID = "id already used by a different event"

# A deadlock or serialization failure is retried this many times in all,
# after a short random pause that grows with each attempt.
ATTEMPTS = 5
RETRY_PAUSE = 0.05  # seconds, doubled each attempt, times a random factor in [0.5, 1)
_RETRYABLE = {"40001", "40P01"}  # serialization_failure, deadlock_detected

T = TypeVar("T")

# The total of ingested events, by "kind:outcome" (rankings.engine.counts): /metrics serves it.
INGESTED = "ingested"
OUTCOMES = ("accepted", "duplicate", "rejected")


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


class Retry(Exception):
    """Raised by a kind of event inside an attempt: roll it back and make it again."""


def retried(attempt: Callable[[int], T]) -> T:
    """attempt(n), n = 1, 2, …, each in a transaction of its own, until one commits: one that raised
    Retry, or met a deadlock or serialization failure, is rolled back and made again, after a
    short pause for the latter, ATTEMPTS times in all."""
    number = 1
    while True:
        try:
            with transaction.atomic():
                return attempt(number)
        except Retry:
            if number == ATTEMPTS:
                raise
        except OperationalError as error:
            if number == ATTEMPTS or getattr(error.__cause__, "sqlstate", None) not in _RETRYABLE:
                raise
            time.sleep(RETRY_PAUSE * 2 ** (number - 1) * random.uniform(0.5, 1))
        number += 1


@dataclass(slots=True)
class Attempt:
    """What one attempt stored, for the reply and the log."""

    accepted: int = 0
    duplicates: int = 0
    too_old: int = 0
    # The indexes of the events accepted: what the counts of a batch of several kinds are made from.
    accepted_at: set[int] = field(default_factory=set)


# json.dumps with its defaults, through one encoder made once (json.dumps makes one a call): the
# digests of the events stored already must come out the same.
_encoder = json.JSONEncoder()


def json_text(value: str | None) -> str:
    """`value` as json.dumps writes it in an event's digest: a string that is printable ASCII with
    no quote and no backslash (every id a shop's system makes, nearly) as it is, between quotes;
    any other string through the encoder, for its escapes; None as null."""
    if value is None:
        return "null"
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return _encoder.encode(value)


def slugs_text(slugs: list[str] | None) -> str:
    """An event's categories as its digest holds them: sorted, as json.dumps writes a list (a valid
    slug needs no escape), or null where it names none."""
    return '["' + '", "'.join(sorted(slugs)) + '"]' if slugs else "null"


@contextlib.contextmanager
def collector_paused():
    """The cyclic garbage collector held off for a batch: the batch's events, rows and texts, a
    dozen objects an event, all live until its reply, so each collection their allocations trigger
    walks them again only to keep them (a sixth of the CPU of a batch of 10,000 views in a web
    worker, whose startup heap is frozen; half in a process whose heap is not). What they leave is
    freed by reference counting as ever; a cycle left behind waits for the next collection, which
    walks whatever the batch made that still lives: the API takes a batch's items out of the
    request's parsed body for that reason (`rankings.serving.api.BatchApi`)."""
    if not gc.isenabled():  # paused already: by an enclosing batch, or another thread's
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def too_far_ahead() -> str:
    return f"ts is more than {duration_text(rankings_settings.MAX_FUTURE_SECONDS)} in the future"


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
# A table that grows with the shop (every sale's id, every product) is looked up
# one id at a time instead (keyed_lookup): matched by a join, a batch's 1,000 ids
# cost the planner more as 1,000 index probes than as a scan of a table of up to
# some 100,000 rows (five times that for 5,000 ids), so it read all of them for
# every batch (12 ms a batch at 90,000 stored ids, where the probes take 1.2 ms).


def keyed_lookup(columns: str, table: str, key: str) -> str:
    """A statement selecting `columns` of `table`'s rows whose unique `key` is one of a list of
    strings, each found by a probe of the key's index. Its one parameter is the keys as one text of
    lines (an id, a product id holds no control character): psycopg dumps a list of a thousand
    strings item by item in Python, in three times what the whole statement then takes."""
    return (
        f"SELECT found.* FROM unnest(string_to_array(%s, E'\\n')) AS wanted(key)"
        f" CROSS JOIN LATERAL (SELECT {columns} FROM {table} WHERE {key} = wanted.key LIMIT 1) AS found"
    )


def catalogue_of(product_ids: set[str]) -> dict[str, tuple[int, list[str]]]:
    """product id -> (price in cents, category slugs) for the known products among `product_ids`:
    one query for the whole batch."""
    if not product_ids:
        return {}
    product = Product._meta.db_table
    link = Product.categories.through._meta.db_table
    category = Category._meta.db_table
    with connection.cursor() as cursor:
        # Each product's categories by a subquery of its own: probes of the links' index, where a
        # join could hash every link of the catalogue.
        cursor.execute(
            f"""
            SELECT p.product_id, p.price_cents, ARRAY(
                SELECT c.slug FROM {link} l JOIN {category} c ON c.id = l.category_id
                WHERE l.product_id = p.id ORDER BY c.slug
            )
            FROM ({keyed_lookup("id, product_id, price_cents", product, "product_id")}) AS p
            """,
            ["\n".join(product_ids)],
        )
        return {pid: (price, slugs) for pid, price, slugs in cursor.fetchall()}


_CATEGORIES_KNOWN = (
    f"SELECT slug, has_sales FROM {Category._meta.db_table} WHERE slug IN (SELECT unnest(%s::text[]))"
)

# Rows are locked in slug order, so that two batches marking the same categories never wait on each other.
_MARK_CATEGORIES = f"""
UPDATE {Category._meta.db_table} SET has_sales = true
WHERE id IN (
    SELECT id FROM {Category._meta.db_table} WHERE slug IN (SELECT unnest(%s::text[])) ORDER BY slug FOR UPDATE
)
RETURNING slug
"""


def _ensure_categories(slugs: set[str]) -> None:
    """Create placeholders for the unknown of `slugs`, the categories a batch's events count in (no
    event is lost for want of them), and mark every one as having sales, which keeps it from being
    deleted.

    Only a category's first events write its row. Marking takes the row lock,
    so a delete running meanwhile either sees the mark or goes first, and then
    the category is created again below.
    """
    if not slugs:
        return
    with connection.cursor() as cursor:
        # A statement of its own, not the ORM's: every batch asks, and building the query cost more
        # than answering it.
        cursor.execute(_CATEGORIES_KNOWN, [list(slugs)])
        known = dict(cursor.fetchall())
        present = {slug for slug, has_sales in known.items() if has_sales}
        unmarked = sorted(slug for slug, has_sales in known.items() if not has_sales)
        if unmarked:
            cursor.execute(_MARK_CATEGORIES, [unmarked])
            present.update(slug for (slug,) in cursor.fetchall())
    if new := sorted(slugs - present):
        Category.objects.bulk_create(
            [Category(slug=s, name=s, is_placeholder=True, has_sales=True) for s in new],
            ignore_conflicts=True,
        )


def _slugs_named(valid: list[tuple[int, dict]]) -> set[str]:
    """Every slug the valid events name, returns' too, gathered in C."""
    lists = map(dict.get, map(itemgetter(1), valid), repeat("categories"))
    return set(chain.from_iterable(filter(None, lists)))


def _new_categories_bounded(valid: list[tuple[int, dict]], invalid: list[dict]) -> list[tuple[int, dict]]:
    """The events, in order, up to those that would take the batch's new categories (placeholders to
    create) past MAX_BATCH_NEW_CATEGORIES; the others are rejected into `invalid`, and so is a
    return of a sale rejected here. A return counts in its original's categories, which exist: what
    it names creates nothing."""
    most = rankings_settings.MAX_BATCH_NEW_CATEGORIES
    if len(_slugs_named(valid)) <= most:  # the common case, told in C: no lookup
        return valid
    named = {slug for _, data in valid if not data.get("returnOf") for slug in data.get("categories") or ()}
    if len(named) <= most:
        return valid
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT slug FROM {Category._meta.db_table} WHERE slug IN (SELECT unnest(%s::text[]))",
            [list(named)],
        )
        new = named - {slug for (slug,) in cursor.fetchall()}
    taken: set[str] = set()
    refused: set[str | None] = set()  # sales to be sent again, and with them their returns
    kept = []
    for index, data in valid:
        wanted = new.intersection(data.get("categories") or ()) - taken if not data.get("returnOf") else ()
        if len(taken) + len(wanted) > most or data.get("returnOf") in refused - {None}:
            refused.add(data.get("id"))
            invalid.append({"index": index, "id": data.get("id"), "error": too_many_new(most)})
        else:
            taken.update(wanted)
            kept.append((index, data))
    return kept


def too_many_new(most: int, item: str = "event") -> str:
    """Why an item (an event, a product) whose new categories would take its batch past `most` is rejected."""
    return (
        f"categories: this batch names more than {most:,} categories the catalogue does not have; "
        f"send this {item} again in another batch"
    )


def _queue_of(layout: Layout, tree: Tree) -> Callable[[Any], str]:
    """row -> its queue entries (see _queue_entries), each worked out once for a batch's few distinct
    category lists (and, with split boards, products: the queue then depends on the product's part)."""
    known: dict[tuple, str] = {}

    def queue_of(row) -> str:
        key = (tuple(row.categories), row.product_id if layout.split else "")
        queue = known.get(key)
        if queue is None:
            queue = known[key] = _queue_entries(key[0], layout, tree, row.product_id)
        return queue

    return queue_of


def _queue_entries(categories: tuple[str, ...], layout: Layout, tree: Tree, product_id: str) -> str:
    """'shard:slug,slug;shard:slug': each shard an event is queued for, with the boards it counts in
    there (its categories and their ancestors in the active version's tree, each once; of a split
    category, the part that holds the product)."""
    boards = layout.queued(tree.expand(categories), product_id)
    return ";".join(f"{shard}:{','.join(slugs)}" for shard, slugs in sorted(boards.items()))


class BatchIngest:
    """The steps every kind of event goes through; a subclass names its tables and statements and
    resolves its valid events into rows (objects with index, event_id, ts, product_id, categories
    and digest)."""

    serializer_class: type
    id_table: str  # where event ids are unique, with the digest of the event that took each
    kinds: ClassVar[tuple[str, ...]]  # what its events are counted as in /metrics (see kind_of)
    # Where there are several kinds: the field in which a valid event names its own (one of `kinds`).
    kind_field: ClassVar[str] = "kind"
    # Taken first, with what the kind needs ready in the same round trip (its staging table).
    layout_lock_sql: ClassVar[str] = f"SELECT pg_advisory_xact_lock_shared({locks.LAYOUT_NAMESPACE}, 0)"

    def __call__(self, *, events: list, source: str, now: dt.datetime | None = None) -> IngestResult:
        """Validate `events` in order and store the valid ones; return what became of each."""
        with collector_paused():
            return self._ingested(events, source, now or timezone.now())

    def _ingested(self, events: list, source: str, now: dt.datetime) -> IngestResult:
        valid, invalid = self._validated(events, now)
        if not events:
            return IngestResult()  # nothing happened: an empty call leaves no trace in the log
        valid = _new_categories_bounded(valid, invalid)
        self.prepare(valid)

        def attempt(number: int) -> IngestResult:
            result = IngestResult(rejected=list(invalid))
            self._attempt(events, valid, result, source, now, first=number == 1)
            return result

        result = retried(attempt)
        result.rejected.sort(key=lambda r: r["index"])
        return result

    def _validated(self, events: list, now: dt.datetime) -> tuple[list[tuple[int, dict]], list[dict]]:
        """(index, data) of the valid events, and the rejections of the others."""
        limit = now + dt.timedelta(seconds=rankings_settings.MAX_FUTURE_SECONDS)
        validate = EventValidator(self.serializer_class)
        every = validate.all_plain(events)
        if every is not None and max(map(itemgetter("ts"), every)) <= limit:
            return list(enumerate(every)), []
        valid: list[tuple[int, dict]] = []
        invalid: list[dict] = []
        for index, event in enumerate(events):
            data, error = validate(event)
            if data is None:
                invalid.append({"index": index, "id": _id_of(event), "error": error})
            elif data["ts"] > limit:
                invalid.append({"index": index, "id": data.get("id"), "error": too_far_ahead()})
            else:
                valid.append((index, data))
        return valid, invalid

    def _attempt(
        self,
        events: list,
        valid: list[tuple[int, dict]],
        result: IngestResult,
        source: str,
        now: dt.datetime,
        *,
        first: bool,
    ) -> None:
        """One attempt at storing the valid events, inside the caller's transaction, which also
        adds what became of them to the ingest counts: they stand or fall with the events."""
        done = self.attempt(valid, result, first=first)
        result.accepted = done.accepted
        result.duplicates = done.duplicates
        with connection.cursor() as cursor:
            cursor.execute(
                _LOGGED,
                [now, source, result.accepted, result.duplicates, len(result.rejected), done.too_old],
            )
        counts_add(INGESTED, self._counted(events, result, done.accepted_at))

    def kind_of(self, event) -> str:
        """What `event` (as sent) is counted as: one of `kinds`."""
        return self.kinds[0]

    def _counted(self, events: list, result: IngestResult, accepted_at: set[int]) -> Counter[str]:
        """ "kind:outcome" -> events, adding up to what the reply says (accepted, duplicates,
        rejected), each event counted as its kind when there are several."""
        if len(self.kinds) == 1:
            kind = self.kinds[0]
            return Counter(
                {
                    f"{kind}:accepted": result.accepted,
                    f"{kind}:duplicate": result.duplicates,
                    f"{kind}:rejected": len(result.rejected),
                }
            )
        rejected = {r["index"] for r in result.rejected}
        duplicate = set(range(len(events))).difference(rejected, accepted_at)
        counted: Counter[str] = Counter()
        for outcome, indexes in (
            ("accepted", accepted_at - rejected),
            ("duplicate", duplicate),
            ("rejected", rejected),
        ):
            chosen = map(events.__getitem__, indexes)
            # A valid event names its kind in its field (read in C); a rejected one may be anything.
            kinds = (
                map(self.kind_of, chosen)
                if outcome == "rejected"
                else map(dict.get, chosen, repeat(self.kind_field))
            )
            for named, count in Counter(kinds).items():
                counted[f"{named}:{outcome}"] = count
        return counted

    def prepare(self, valid: list[tuple[int, dict]]) -> None:
        """What to do once, before the first attempt's transaction."""

    def attempt(self, valid: list[tuple[int, dict]], result: IngestResult, *, first: bool) -> Attempt:
        """Resolve and store the valid events; rejections go to `result`."""
        raise NotImplementedError

    def claimed(self, cursor, rows: list) -> list:
        """The rows to write: those whose id a kind that claims ids before writing claimed here, and
        those without one (all of them, for a kind whose write claims the ids itself)."""
        return rows

    def write(self, cursor, rows: list, queue_of: Callable[[Any], str]) -> set[int]:
        """Insert the rows whose id is not taken, each with its queue rows (`queue_of(row)`, see
        _queue_entries); return their indexes."""
        raise NotImplementedError

    def stored_digests(self, event_ids: list[str]) -> dict[str, str]:
        """event id -> digest of the event stored under it, for the ids already taken."""
        if not event_ids:
            return {}
        with connection.cursor() as cursor:
            cursor.execute(
                keyed_lookup("event_id, digest", self.id_table, "event_id"), ["\n".join(event_ids)]
            )
            return dict(cursor.fetchall())

    def store(self, rows: list, result: IngestResult) -> tuple[set[int], int]:
        """Insert the rows in bulk; return (the indexes stored, duplicates found only at insert time).

        Refuses (ShardCountMismatch) while RANKINGS_SHARDS disagrees with the
        installation's count. The events are queued under the active version's layout,
        read under the shared layout lock, which this transaction keeps until it commits:
        a switch-over that re-lays out the shards waits for it and then re-keys its rows.
        """
        with connection.cursor() as cursor:
            cursor.execute(self.layout_lock_sql)
        number, layout = layout_checked()
        if not rows:
            return set(), 0
        # Read under the same lock as the layout: a switch to a version with another tree re-queues
        # what was queued before it, and an ingest that reads after it waits for its commit.
        tree = version_tree(number)
        with connection.cursor() as cursor:
            chosen = self.claimed(cursor, rows)
        stored: set[int] = set()
        counted_in: set[tuple[str, ...]] = set()  # the lists of categories of the rows to store
        if chosen:
            counted_in = _lists_of(chosen)
            # Only what is to be stored makes categories and placeholders: never an event whose id
            # another event holds.
            _ensure_categories(set(chain.from_iterable(counted_in)))
            with connection.cursor() as cursor:
                _placeholders_create(cursor, chosen)
                stored = self.write(cursor, chosen, _queue_of(layout, tree))
        # Once committed, these events wake their shards' ticks rather than wait for the beat.
        written, raced = _parted(rows, stored)
        if len(written) < len(chosen):
            counted_in = _lists_of(written)
        tick_wake_on_commit(layout, {tree.expand(categories) for categories in counted_in})
        return stored, self._late_duplicates(raced, result)

    def _late_duplicates(self, raced: list, result: IngestResult) -> int:
        """Of the rows not stored, their id taken (before this batch, or by a concurrent batch between
        our check and our insert), count the resends and reject the reused ids."""
        late_duplicates = 0
        if raced:
            stored = self.stored_digests([row.event_id for row in raced])
            for row in raced:
                if stored.get(row.event_id) == row.digest:
                    late_duplicates += 1
                else:
                    result.rejected.append({"index": row.index, "id": row.event_id, "error": DUPLICATE_ID})
        return late_duplicates


def _lists_of(rows: list) -> set[tuple[str, ...]]:
    """The rows' lists of categories, each once: a batch's few, found in C."""
    return set(map(tuple, map(attrgetter("categories"), rows)))


# A batch's row in the ingest log, by a statement of its own: the ORM's insert cost a batch more to
# build than PostgreSQL spends on it.
_LOGGED = (
    f"INSERT INTO {IngestLog._meta.db_table} (at, source, accepted, duplicates, rejected, too_old)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)


def _parted(rows: list, stored: set[int]) -> tuple[list, list]:
    """The rows whose index is in `stored`, and the others: as a rule all and none, told without a
    look at each row."""
    if len(stored) == len(rows):
        return rows, []
    return [row for row in rows if row.index in stored], [row for row in rows if row.index not in stored]


# Unknown products become placeholders before the events that refer to them are
# inserted, each linked to the categories of its first event in the batch only:
# at most MAX_EVENT_CATEGORIES, however many the batch's other events name (the
# union over a batch of 5,000 could file one product under 100,000 categories,
# and every read of its categories would pay for them). Each of the batch's
# distinct product ids is looked up in the index (a subquery per id): NOT EXISTS
# let the planner hash the whole catalogue for every batch instead.
_PLACEHOLDER_PRODUCTS = f"""
WITH wanted AS (
    SELECT * FROM unnest(string_to_array(%s, E'\\n'), string_to_array(%s, E'\\n'))
        WITH ORDINALITY AS wanted(product_id, categories, n)
), created AS (
    INSERT INTO {Product._meta.db_table} (product_id, name, price_cents, is_placeholder)
    SELECT wanted.product_id, wanted.product_id, 0, true
    FROM wanted
    WHERE (SELECT known.id FROM {Product._meta.db_table} known WHERE known.product_id = wanted.product_id) IS NULL
    ORDER BY wanted.n  -- sorted ids: concurrent batches wait rather than deadlock
    ON CONFLICT (product_id) DO NOTHING
    RETURNING id, product_id
)
INSERT INTO {Product.categories.through._meta.db_table} (product_id, category_id)
SELECT DISTINCT created.id, category.id
FROM created
JOIN wanted USING (product_id)
CROSS JOIN unnest(string_to_array(wanted.categories, ',')) AS named(slug)
JOIN {Category._meta.db_table} category ON category.slug = named.slug
ON CONFLICT DO NOTHING
"""


def _placeholders_create(cursor, rows: list) -> None:
    """Placeholders for the rows' unknown products, each in the categories of its first row."""
    first: dict[str, list[str]] = {}
    for row in rows:
        first.setdefault(row.product_id, row.categories)
    product_ids = sorted(first)
    # As one text of lines each (see keyed_lookup); a product's categories as one line. The only
    # product, without categories, sends an empty text, which splits into no line: unnest pairs
    # it with NULL, which names no category either.
    cursor.execute(
        _PLACEHOLDER_PRODUCTS,
        ["\n".join(product_ids), "\n".join(",".join(first[p]) for p in product_ids)],
    )

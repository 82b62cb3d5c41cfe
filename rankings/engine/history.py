"""A version's history from the sales.

A rebuild records, for its version, the snapshot of every hour boundary H from the earliest sale
(at most SNAPSHOT_KEEP_SECONDS before the engine's clock) up to the clock, each the board as of H
from every sale and engagement event known at the rebuild: a window as of H holds what was
counted at or before H in the window's buckets, exactly what snapshots.snapshots_recompute gives
for a tick that had counted nothing before H.

PostgreSQL hands the raw sales and events over half an hour at a time, each fact with the key of its
hour bucket, the first hour boundary at or after it (a fact exactly on a boundary is kept apart: it
is in the window of one more hour), and Python adds them up into buckets per (product, list of
categories, hour). Two connections read them side by side in spans of hours of about as many sales
each, both in the snapshot the history's transaction exported (rankings.engine.readers), while
Python adds up the spans already read. A bucket keyed b
is in the snapshot of every hour from b to b + span (span: the window's length less one bucket),
the last excluded unless exact. Python holds the buckets as arrays and, a category at a time, takes
the buckets of the lists that count in it (the version's tree expands each list once); numpy makes
each hour's scores from the last hour's by the buckets that enter the window and leave it, and ranks
each hour's board (its first DEPTH ranks: score descending, then the products' byte order) among the
few products that can lead it (_Leaders). What it writes is what the live
ticks write (snapshots.take): the first SNAPSHOT_DEPTH product ids of every non-empty board of the
windows SNAPSHOT_WINDOWS, per metric, and the hours themselves, in one COPY that PostgreSQL stores
while Python ranks on.
"""

import datetime as dt
import logging
import math
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import islice

import numpy as np
import psycopg
from django.db import connection
from psycopg.copy import QueuedLibpqWriter
from tqdm import tqdm

from rankings.conf import METRICS, rankings_settings
from rankings.engine.readers import own_transaction, snapshot_export, snapshot_reader
from rankings.engine.shards import ALL, Layout
from rankings.engine.snapshots import HOUR, instant, snapshot_windows
from rankings.engine.tree import Tree
from rankings.engine.windows import configured_windows
from rankings.models import Sale, ShardState, Snapshot, SnapshotHour

log = logging.getLogger(__name__)

# The facts are read by READERS connections side by side, in SPANS spans of hours taken in turn.
# More spans overlap more of PostgreSQL's grouping with Python's adding up, but each scans pages of
# the others' where sales are not in time order (at 10 million sales in random order, the read took
# 13.4 s in 4 spans, 14.5 s in 2, 16.0 s in 8). In time order, 8 read a little faster (6.2 s against
# 6.5 s), but whole rebuilds were no faster (17.7 and 18.5 s against 17.3 and 18.1 s, in turn).
READERS = 2
SPANS = 4
# Memory for _HOURLY's strings, for each statement: a span's are kept whole until its scan ends, not
# written to disk in between (those of all 10 million sales make about half a gigabyte).
WORK_MEM = "1GB"

# Every sale and engagement event from `lo` up to `hi` (and no later than the last hour), by its
# hour bucket: keyed `b`, the first hour boundary at or after the fact, and `exact`, whether the
# fact lies on it. The facts of half an hour of a bucket come back as one row: each fact's product
# and list of categories (as the fact counts in them) as one text, comma-joined (neither a product
# id nor a slug holds a comma or a space: every ingest path checks both, though the tables do not),
# the facts' texts space-separated, and each metric as one string of big-endian numbers. So millions
# of facts are read as a few thousand rows, and Python adds up the facts of each pair of a product
# and a list of a row with numpy: grouping them by text in PostgreSQL took twice as long as the
# scan, the strings and the sums. One text a fact, not a product's and a list's apart: Python
# numbers each fact once, not twice, and PostgreSQL builds one string the less (a span of 2.5
# million sales: 2.4 s, against 2.9 s for the two texts). Half an hour, not the hour: a row's
# strings reach PostgreSQL's gigabyte a value only past some 40 million facts in one half hour (a
# bucket in two rows is added up later, as any board's buckets are); ten minutes took twice as long,
# PostgreSQL keeping six times as many strings.
# `t` is when a fact counts: a sale's counted_at, an event's whole second.
_HOURLY = """
WITH facts (product_id, categories, t, units, revenue, views, wishes) AS (
    SELECT s.product_id, array_to_string(s.categories, ','), s.counted_at, s.qty::bigint,
           CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END, 0::bigint, 0::bigint
    FROM rankings_sale s
    WHERE s.counted_at >= to_timestamp(%(lo)s) AND s.counted_at < to_timestamp(%(hi)s)
      AND s.counted_at <= to_timestamp(%(last)s)
    UNION ALL
    SELECT s.product_id, array_to_string(s.categories, ','), date_bin('1 second', s.ts, 'epoch'), 0, 0,
           (s.kind = 'view')::int::bigint, (s.kind = 'wish')::int::bigint
    FROM rankings_engagement s
    WHERE s.ts >= to_timestamp(%(lo)s) AND s.ts < to_timestamp(%(hi)s)
)
SELECT date_part('epoch', date_bin('1 hour', slice, 'epoch'))::bigint + CASE WHEN exact THEN 0 ELSE %(hour)s END,
       exact, string_agg(product_id || ',' || categories, ' '),
       string_agg(int8send(units), ''), string_agg(int8send(revenue), ''),
       string_agg(int8send(views), ''), string_agg(int8send(wishes), '')
FROM (SELECT *, date_bin('30 minutes', t, 'epoch') AS slice, t = date_bin('1 hour', t, 'epoch') AS exact FROM facts) AS f
GROUP BY slice, exact
"""


@dataclass
class HistoryReport:
    hours: int = 0
    boards: int = 0  # snapshot rows written
    products: int = 0  # product ids in them
    seconds: float = 0.0


def _earliest_sale() -> float | None:
    """When the earliest sale counts (epoch seconds), None without any."""
    earliest = Sale.objects.order_by("counted_at").values_list("counted_at", flat=True).first()
    return earliest.timestamp() if earliest is not None else None


def history_hours(clock: dt.datetime | None, earliest: float | None) -> list[int]:
    """The hours (epoch seconds) a history up to `clock` records: from the first boundary at or after
    the earliest sale (`earliest`), no more than the snapshots' keep behind the clock, to the clock."""
    if clock is None or earliest is None:
        return []
    t = clock.timestamp()
    start = max(
        math.ceil(earliest / HOUR) * HOUR,
        math.ceil((t - rankings_settings.SNAPSHOT_KEEP_SECONDS) / HOUR) * HOUR,
    )
    return list(range(start, math.floor(t / HOUR) * HOUR + 1, HOUR))


def engine_clock() -> dt.datetime | None:
    """The instant every shard that has ticked has reached (the earliest of theirs): every hour up
    to it is behind every shard, so no tick takes it again."""
    return (
        ShardState.objects.filter(as_of__isnull=False)
        .order_by("as_of")
        .values_list("as_of", flat=True)
        .first()
    )


def history_record(
    *, version: int, tree: Tree, layout: Layout, clock: dt.datetime | None, progress=None
) -> HistoryReport:
    """Record `version`'s snapshots of every hour up to `clock` from the sales (see above), counted
    with `tree`, a split category's by part as `layout` splits it (as the ticks take them), in place
    of any it has of those hours, in one transaction of a connection of its own; `progress(done)`
    is told how many categories are done, and may use Django's connection (it is not the
    history's)."""
    started = time.monotonic()
    earliest = _earliest_sale()
    hours = history_hours(clock, earliest)
    report = HistoryReport(hours=len(hours))
    if not hours:
        return report
    first, last = hours[0], hours[-1]
    windows = [(name, configured_windows()[name]) for name in snapshot_windows()]
    windows = [(name, w) for name, w in windows if w.bucket_seconds == HOUR]
    widest = max(((w.buckets - 1) * HOUR for _, w in windows), default=0)
    assert earliest is not None
    spans = [
        {"lo": lo, "hi": hi, "last": last, "hour": HOUR}
        for lo, hi in _spans(first - widest, math.floor(earliest / HOUR) * HOUR, last + 1)
    ]
    with own_transaction() as own, own.cursor() as writer:
        writer.execute(
            f"DELETE FROM {Snapshot._meta.db_table} WHERE version = %s AND at >= %s AND at <= %s",
            [version, instant(first), instant(last)],
        )
        writer.execute(
            f"INSERT INTO {SnapshotHour._meta.db_table} (version, at) SELECT %s, to_timestamp(at)"
            " FROM unnest(%s::bigint[]) AS at ON CONFLICT DO NOTHING",
            [version, hours],
        )
        hourly = _Hourly.read(snapshot_export(writer), spans)
        # One COPY for every board, its data sent by psycopg's writer thread: PostgreSQL stores one
        # category's ranks while Python ranks the next (a COPY a category waited for each in turn).
        with writer.copy(_COPY, writer=QueuedLibpqWriter(writer)) as copy:
            boards_of = tqdm(hourly.boards(tree, layout), desc="history", unit=" categories", leave=False)
            for done, boards in enumerate(boards_of, 1):
                lines = []
                for board_name, board in boards:
                    for name, w in windows:
                        span = (w.buckets - 1) * HOUR
                        head = f"{version}\t{{}}\t{_copy_text(name)}\t{{}}\t{_copy_text(board_name)}\t"
                        for at, metric, products in _ranked(board, first, len(hours), span):
                            lines.append(
                                head.format(instant(at).isoformat(), _copy_text(metric))
                                + _copy_text(" ".join(products))
                            )
                            report.boards += 1
                            report.products += len(products)
                            if len(lines) >= COPY_LINES:
                                copy.write("\n".join(lines) + "\n")
                                lines = []
                if lines:
                    copy.write("\n".join(lines) + "\n")
                if progress is not None:
                    progress(done)
    report.seconds = time.monotonic() - started
    return report


def _spans(start: int, begin: int, end: int) -> list[tuple[int, int]]:
    """The hours from `start` to `end` in SPANS spans of about as many sales each, the sales taken to
    begin at `begin` (the earliest's hour): so the first span starts at `start`, the others share
    the hours from `begin` alike. The read begins a window's length before the history's first
    hour, where a shop younger than the history's keep and that window has no sale: spans shared
    from there would hold unequal shares (of two, one three times the other's)."""
    begin = max(start, begin)
    cuts = sorted({begin + (end - begin) * i // SPANS // HOUR * HOUR for i in range(1, SPANS)} - {start})
    bounds = [start, *cuts, end]
    return list(zip(bounds, bounds[1:], strict=False))


# Written as text, each row's ranks rendered as one array literal: psycopg's binary dumper of a
# list of a thousand product ids costs several times what ranking them does.
_COPY = (
    f'COPY {Snapshot._meta.db_table} (version, at, "window", metric, category, products) FROM STDIN'
    " WITH (FORMAT TEXT)"
)
COPY_LINES = 2_000  # snapshot rows sent to PostgreSQL at a time
# COPY's text format: a backslash, tab, newline or carriage return in a value is escaped.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(value: str) -> str:
    return value.translate(_COPY_ESCAPES)


class _Numbering(dict[str, int]):
    """Names numbered in the order they are first met: a name not seen before is given the next."""

    def __missing__(self, name: str) -> int:
        number = self[name] = len(self)
        return number


def _numbered(names: list[str], numbering: _Numbering) -> np.ndarray:
    """Each of `names` by its number in `numbering`, in one pass (a set of the names not seen before,
    then a lookup of each, took a third longer)."""
    return np.fromiter(map(numbering.__getitem__, names), np.int64, count=len(names))


def _spans_read(snapshot: str, spans: list[dict]) -> Iterator[list[tuple]]:
    """The rows of _HOURLY in each of `spans` (each binds it), a span's as soon as it is read, in any
    order. READERS connections that see `snapshot` read them, each on a thread of its own and
    taking the next span left, one span more than the readers asked for ahead: PostgreSQL returns a
    span's rows only once it has grouped all its facts, and groups the next while the caller adds
    up the last's. If anything fails, a reader's query or the caller (the generator closed), no
    other span is begun, the queries running are cancelled and waited for, and what failed first
    is raised."""
    free: queue.SimpleQueue = queue.SimpleQueue()
    own = threading.local()  # a thread's connection: one a query failed on is used by no other
    failed: list[BaseException] = []
    stop = threading.Event()

    def span_read(params: dict) -> list[tuple]:
        if stop.is_set():
            return []
        if not hasattr(own, "reader"):
            own.reader = free.get()
        try:
            with own.reader.cursor(binary=True) as cursor:
                cursor.execute(_HOURLY, params)
                return cursor.fetchall()
        except BaseException as error:
            failed.append(error)
            stop.set()
            raise

    with ExitStack() as readers:
        connections = [
            readers.enter_context(snapshot_reader(snapshot, work_mem=WORK_MEM)) for _ in range(READERS)
        ]
        for reader in connections:
            free.put(reader)
        pool = readers.enter_context(ThreadPoolExecutor(max_workers=READERS))
        left = iter(spans)
        ahead = {pool.submit(span_read, params) for params in islice(left, READERS + 1)}
        try:
            while ahead:
                done, ahead = wait(ahead, return_when=FIRST_COMPLETED)
                for read in done:
                    if read.exception() is not None:
                        raise failed[0]  # not what followed from it
                    ahead |= {pool.submit(span_read, params) for params in islice(left, 1)}
                    yield read.result()
                del done, read  # the spans added up are not held while the next is waited for
        except BaseException:
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            # Until no span runs: a query that reaches its server after a cancel is cancelled again.
            # (A span the shutdown cancelled is done, though wait() never counts it so.)
            while ahead := {read for read in ahead if not read.done()}:
                for reader in connections:
                    _cancelled(reader)
                wait(ahead, timeout=1)
            raise


def _cancelled(reader: psycopg.Connection) -> None:
    """Cancel what `reader` runs, if anything; a cancel that fails is logged, not raised (the read
    is failing already, and the other readers are still to be cancelled)."""
    try:
        reader.cancel_safe(timeout=5)
    except psycopg.Error as error:
        log.warning("a history reader could not be cancelled: %r", error)


def _added(row: tuple, pairs: _Numbering) -> tuple[int, bool, tuple[np.ndarray, ...]]:
    """A row of _HOURLY as (its bucket key, whether it is exact, its columns): its pairs of a product
    and a list numbered in `pairs`, and the facts of each pair added up: sorted by pair, each run of a
    pair summed (np.unique and np.add.at, fact by fact, took three times as long)."""
    key, on_boundary, texts, *metrics = row
    facts = _numbered(texts.split(" "), pairs)
    by_pair = np.argsort(facts)
    ordered = facts[by_pair]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    added = np.stack([np.add.reduceat(np.frombuffer(v, dtype=">i8")[by_pair], starts) for v in metrics])
    return (
        key,
        on_boundary,
        (
            ordered[starts],
            np.full(len(starts), key, dtype=np.int64),
            np.full(len(starts), on_boundary, dtype=bool),
            added.astype(np.int64).T,
        ),
    )


@dataclass
class _Board:
    products: np.ndarray  # the product ids, in byte order
    column: np.ndarray  # each bucket's product (its place in `products`)
    b: np.ndarray  # each bucket's key (epoch seconds)
    exact: np.ndarray
    sums: list[np.ndarray]  # each metric's, as _Hourly's


@dataclass
class _Hourly:
    """The hour buckets of _HOURLY as arrays, one entry a bucket."""

    products: np.ndarray  # the product ids, in byte order
    product: np.ndarray  # each bucket's product (its place in `products`)
    lists: list[str]  # the lists of categories, comma-joined
    listed: np.ndarray  # each bucket's list (its place in `lists`)
    b: np.ndarray
    exact: np.ndarray
    # Each metric's sums (in METRICS' order), one a bucket; an empty array where no fact has the
    # metric (a shop without views and wishes), so that no board gathers it.
    sums: list[np.ndarray]
    scratch: np.ndarray  # one slot a product, for _board

    @classmethod
    def read(cls, snapshot: str, spans: list[dict]) -> "_Hourly":
        """The buckets of _HOURLY's facts in `spans`, read by connections that see `snapshot`
        (_spans_read), each span's rows added up here as soon as it is read, while PostgreSQL groups
        the next spans' facts."""
        pairs = _Numbering()  # "product,list" -> its number
        # Each row's bucket key, whether it is exact, and its columns, in any order.
        rows: list[tuple[int, bool, tuple[np.ndarray, ...]]] = []
        for read in _spans_read(snapshot, spans):
            rows.extend(_added(row, pairs) for row in read)
            del read  # not held while the next span is waited for
        # By bucket and, of a bucket, off its boundary first: so are a board's buckets, which then
        # enter a window and leave it hour by hour in this order (_ranked). Led by empty columns:
        # no bucket at all is arrays of none.
        rows.sort(key=lambda row: row[:2])
        empty = (
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=bool),
            np.zeros((0, len(METRICS)), dtype=np.int64),
        )
        columns = [empty, *(row[2] for row in rows)]
        pair, b, exact, sums = (np.concatenate(column) for column in zip(*columns, strict=True))
        # Each pair's product and list, numbered once a pair, not once a fact.
        places, lists = _Numbering(), _Numbering()
        split = [text.split(",", 1) for text in pairs]
        product = _numbered([product_id for product_id, _ in split], places)[pair]
        listed = _numbered([text for _, text in split], lists)[pair]
        names = list(places)
        order = sorted(range(len(names)), key=lambda i: names[i].encode())  # ties are ranked by bytes
        rank = np.empty(len(names), dtype=np.int64)
        rank[order] = np.arange(len(names))
        return cls(
            products=np.array([names[i] for i in order], dtype=object),
            product=rank[product],
            lists=list(lists),
            listed=listed,
            b=b,
            exact=exact,
            sums=[
                np.ascontiguousarray(sums[:, m]) if sums[:, m].any() else np.zeros(0, np.int64)
                for m in range(len(METRICS))
            ],
            scratch=np.zeros(len(names), dtype=np.int64),
        )

    def boards(self, tree: Tree, layout: Layout) -> Iterator[list[tuple[str, "_Board"]]]:
        """[(board, _Board)] of each category a bucket counts in under `tree` (`all`, and its list's
        categories with their ancestors): the category's own board, or each of its parts' if
        `layout` splits it."""
        counts = np.bincount(self.listed, minlength=len(self.lists))
        ends = np.cumsum(counts)
        by_list = np.argsort(self.listed, kind="stable")
        members: dict[str, list[int]] = {}
        for j, text in enumerate(self.lists):
            for category in (ALL, *tree.expand(text.split(",") if text else ())):
                members.setdefault(category, []).append(j)
        for category in sorted(members):
            # Runs already in order, one a list: merged by the stable sort (timsort), in a third of
            # the quicksort's time.
            rows = np.sort(
                np.concatenate([by_list[ends[j] - counts[j] : ends[j]] for j in members[category]]),
                kind="stable",
            )
            yield list(self._parts(category, rows, layout))

    def _parts(self, category: str, rows: np.ndarray, layout: Layout) -> Iterator[tuple[str, "_Board"]]:
        if category not in layout.split:
            yield category, self._board(rows)
            return
        present = np.unique(self.product[rows])
        names = [layout.board_of(category, self.products[p]) for p in present.tolist()]
        parts = sorted(set(names))
        place = {name: i for i, name in enumerate(parts)}
        # The part of each product present, then of each row.
        number = np.array([place[name] for name in names], dtype=np.int64)
        part = number[np.searchsorted(present, self.product[rows])]
        order = np.argsort(part, kind="stable")
        ends = np.cumsum(np.bincount(part, minlength=len(parts)))
        for i, name in enumerate(parts):
            yield name, self._board(rows[order[ends[i - 1] if i else 0 : ends[i]]])

    def _board(self, rows: np.ndarray) -> "_Board":
        # The products present, in byte order, and each bucket's among them, in time linear in the
        # board's buckets (np.unique sorted them all: a second for `all`'s millions): each product's
        # slot of the scratch array takes the place of one of its buckets (whichever write lands),
        # so the buckets found in their product's slot are one of each product.
        product = self.product[rows]
        places = np.arange(len(product))
        self.scratch[product] = places
        present = np.sort(product[self.scratch[product] == places])
        self.scratch[present] = np.arange(len(present))
        return _Board(
            products=self.products[present],
            column=self.scratch[product],
            b=self.b[rows],
            exact=self.exact[rows],
            sums=[column[rows] if column.size else column for column in self.sums],
        )


def _ranked(board: _Board, first: int, hours: int, span: int):
    """(hour, metric, first DEPTH product ids) of every non-empty board of one window, hour by hour."""
    depth = rankings_settings.SNAPSHOT_DEPTH
    # The hour (an index from `first`) each bucket enters the window at, and the first it is out of
    # it: its value is added at the one and taken away at the other. Both in order, as the buckets
    # are (_Hourly.read): hour i's are the buckets from enter[i] to enter[i + 1], and from leave[i] to
    # leave[i + 1] (a change at `hours` is never made).
    enters = np.clip((board.b - first) // HOUR, 0, hours)
    leaves = np.clip((board.b + span + board.exact * HOUR - first) // HOUR, 0, hours)
    every = np.arange(hours + 1)
    enter, leave = np.searchsorted(enters, every).tolist(), np.searchsorted(leaves, every).tolist()
    column = board.column
    for m, metric in enumerate(METRICS):
        values = board.sums[m]
        if not values.any():
            continue  # no fact of this metric: every hour's board is empty
        leaders = _Leaders(len(board.products), depth)
        ranked = leaders.first()
        for i in range(hours):
            entering, leaving = slice(enter[i], enter[i + 1]), slice(leave[i], leave[i + 1])
            if entering.stop > entering.start or leaving.stop > leaving.start:  # else the last hour's board
                leaders.change(
                    np.concatenate((column[entering], column[leaving])),
                    np.concatenate((values[entering], -values[leaving])),
                )
                ranked = leaders.first()
            if ranked.size:
                yield first + i * HOUR, metric, board.products[ranked].tolist()


class _Leaders:
    """The first `depth` ranks of a board (score descending, then column: the products' byte order;
    a score of 0 or less unranked) whose scores change a few products at a time.

    It holds every product that scores at least `floor` (and perhaps some that fell below it since):
    where `depth` of them still do, the first ranks are among them, as every other product scores
    less. Only the changed products are looked at, then, and those held: an hour of a board of a
    million products costs what its changes do. Where fewer do, every score is looked at once and the
    floor goes back to 1 (every ranked product held). Where the held have doubled since the floor was
    last set (and are more than 4 × depth), it is raised to the score ranked 2 × depth among them; a
    floor among many tied products cannot rise, and is not tried again until they double once more."""

    def __init__(self, width: int, depth: int):
        self.scores = np.zeros(width, dtype=np.int64)
        self.depth = depth
        self.floor = 1
        self.held = np.zeros(0, dtype=np.int64)  # columns, in order
        self.holds = np.zeros(width, dtype=bool)
        self.set_with = 2 * depth  # how many were held when the floor was last set
        # A score below keyed_below fits beside a column in one int64 (first); revenue in cents may
        # not, and is then sorted by score and column apart.
        self.column_bits = max(width - 1, 1).bit_length()
        self.column_mask = (1 << self.column_bits) - 1
        self.keyed_below = 1 << (62 - self.column_bits)

    def change(self, columns: np.ndarray, changes: np.ndarray) -> None:
        """Add `changes` to the scores of `columns` (a column may come more than once)."""
        np.add.at(self.scores, columns, changes)
        risen = columns[(self.scores[columns] >= self.floor) & ~self.holds[columns]]
        if risen.size:
            risen = np.unique(risen)
            self.holds[risen] = True
            # Two runs in order, merged by the stable sort (timsort).
            self.held = np.sort(np.concatenate((self.held, risen)), kind="stable")

    def first(self) -> np.ndarray:
        """The columns of the first `depth` ranks, in rank order."""
        scores, depth = self.scores, self.depth
        values = scores[self.held]
        values = self._keep(values >= self.floor, values)
        if self.held.size < depth and self.floor > 1:  # too few left: every score is looked at
            self.holds[self.held] = False
            self.held = np.flatnonzero(scores > 0)
            self.holds[self.held] = True
            values = scores[self.held]
            self.floor, self.set_with = 1, 2 * depth
        if self.held.size > 2 * self.set_with:
            floor = int(np.partition(values, self.held.size - 2 * depth)[self.held.size - 2 * depth])
            if floor > self.floor:
                self.floor = floor
                values = self._keep(values >= floor, values)
            self.set_with = self.held.size
        if values.size and values.max() < self.keyed_below:
            # Score and column as one number, the column less the score shifted above the column's
            # bits: the least `depth` numbers are the first ranks, ties by column, with no argsort;
            # the column is the number's low bits (two's complement).
            keys = self.held - (values << self.column_bits)
            if keys.size > depth:
                keys = np.partition(keys, depth - 1)[:depth]
            keys.sort()
            return keys & self.column_mask
        above = self.held
        if above.size > depth:
            kept = values >= np.partition(values, above.size - depth)[above.size - depth]
            above, values = above[kept], values[kept]
        # Held in column order, which a stable sort by score keeps among ties.
        return above[np.argsort(-values, kind="stable")][:depth]

    def _keep(self, kept: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Hold only the held products marked `kept`; `values` are the held products' scores, and
        those of the ones kept are returned."""
        if kept.all():
            return values
        self.holds[self.held[~kept]] = False
        self.held = self.held[kept]
        return values[kept]


# The hours the active version ticked after the target's history ends, carried over to it: the
# snapshots of every board of those hours and the hours themselves.
_CARRY = f"""
WITH reach AS (
    SELECT coalesce(max(at), '-infinity'::timestamptz) AS last FROM {SnapshotHour._meta.db_table} WHERE version = %(target)s
), boards AS (
    INSERT INTO {Snapshot._meta.db_table} (version, at, "window", metric, category, products)
    SELECT %(target)s, s.at, s."window", s.metric, s.category, s.products
    FROM {Snapshot._meta.db_table} s, reach WHERE s.version = %(source)s AND s.at > reach.last
    ON CONFLICT DO NOTHING
)
INSERT INTO {SnapshotHour._meta.db_table} (version, at)
SELECT %(target)s, h.at FROM {SnapshotHour._meta.db_table} h, reach WHERE h.version = %(source)s AND h.at > reach.last
ON CONFLICT DO NOTHING
"""


def history_carry(*, source: int, target: int) -> int:
    """In a switch's transaction, from `source` (the version it retires) to `target`: the snapshots of
    the hours after the last of `target`'s history, which the live ticks took for `source` while
    `target` was built or kept; then the ticks carry `target`'s history on from there. Returns the
    hours carried over."""
    if source == target:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(_CARRY, {"source": source, "target": target})
        return cursor.rowcount


def history_delete(version: int) -> None:
    """Delete a version's history (a version deleted, failed or about to be built again)."""
    Snapshot.objects.filter(version=version).delete()
    SnapshotHour.objects.filter(version=version).delete()

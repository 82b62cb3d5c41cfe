"""The raw sales and engagement events by hour bucket: what a rebuild reads of them, once, for both
its boards and its history.

PostgreSQL hands the raw sales and events over half an hour at a time, each fact with the key of its
hour bucket, the first hour boundary at or after it (a fact exactly on a boundary is kept apart: it
is in the window of one more hour), and Python adds them up into buckets per (product, list of
categories, hour). Two connections read them side by side in spans of hours of about as many sales
each, both in a snapshot another transaction exported (rankings.engine.readers), while Python adds
up the spans already read. From the buckets, a rebuild takes every board's sums of each window whose
buckets are whole hours (Hourly.totals: a window's facts are whole buckets, so no sale is read a
second time for the boards), and the history every hour's boards (Hourly.boards,
rankings.engine.history).
"""

import logging
import math
import queue
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import islice

import numpy as np
import psycopg

from rankings.conf import METRICS, SALES_METRICS
from rankings.engine.readers import snapshot_reader
from rankings.engine.shards import ALL, Layout
from rankings.engine.snapshots import HOUR
from rankings.engine.tree import Tree

log = logging.getLogger(__name__)

# The facts are read by READERS connections side by side, in SPANS spans of hours taken in turn.
# More spans overlap more of PostgreSQL's grouping with Python's adding up, and leave less to add up
# once PostgreSQL is done, but each scans pages of the others' where sales are not in time order (at
# 10 million sales in random order, the read took 13.4 s in 4 spans, 14.5 s in 2, 16.0 s in 8). A
# shop's sales are written about in time order: there, since the boards of whole hours come from
# this read, a rebuild's boards took 6.9-8.2 s in 8 spans against 7.9-9.0 s in 4 (six pairs in turn,
# 8 the faster in five).
READERS = 2
SPANS = 8
# Memory for _HOURLY's strings, for each statement: a span's are kept whole until its scan ends, not
# written to disk in between (those of all 10 million sales make about half a gigabyte).
WORK_MEM = "1GB"
# Rows of a rebuild's boards of whole hours added up at a time (Totals.rows).
TOTALS_ROWS = 25_000

# Every sale and engagement event from `lo` up to `hi`, by its hour bucket: keyed `b`, the first hour
# boundary at or after the fact, and `exact`, whether the fact lies on it. The sales of half an hour
# of a bucket come back as one row, and its events as another (`kind`): each fact's product and list
# of categories (as the fact counts in them) as one text, comma-joined (neither a product id nor a
# slug holds a comma or a space: every ingest path checks both, though the tables do not), the facts'
# texts space-separated, and each of its kind's two metrics (units and revenue, or views and wishes)
# as one string of big-endian numbers. So millions of facts are read as a few thousand rows, and
# Python adds up the facts of each pair of a product and a list of a row with numpy: grouping them by
# text in PostgreSQL took twice as long as the scan, the strings and the sums. One text a fact, not a
# product's and a list's apart: Python numbers each fact once, not twice, and PostgreSQL builds one
# string the less (a span of 2.5 million sales: 2.4 s, against 2.9 s for the two texts). A sale's two
# metrics, not four, the views and wishes it never has: such a span 2.2–3.1 s against 2.6–3.5 s, in
# six pairs taken in turn (whole reads moved more than that between runs, either way).
# Half an hour, not the hour: a row's strings reach PostgreSQL's gigabyte a value only past some 40
# million facts in one half hour (a bucket in several rows is added up later, as any board's buckets
# are); ten minutes took twice as long, PostgreSQL keeping six times as many strings.
# `t` is when a fact counts: a sale's counted_at, an event's whole second.
_SALES = 0  # the kind of a row of sales; 1, of events
_HOURLY = """
WITH facts (kind, product_id, categories, t, m1, m2) AS (
    SELECT 0, s.product_id, array_to_string(s.categories, ','), s.counted_at, s.qty::bigint,
           CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END
    FROM rankings_sale s
    WHERE s.counted_at >= to_timestamp(%(lo)s) AND s.counted_at < to_timestamp(%(hi)s)
    UNION ALL
    SELECT 1, s.product_id, array_to_string(s.categories, ','), date_bin('1 second', s.ts, 'epoch'),
           (s.kind = 'view')::int::bigint, (s.kind = 'wish')::int::bigint
    FROM rankings_engagement s
    WHERE s.ts >= to_timestamp(%(lo)s) AND s.ts < to_timestamp(%(hi)s)
)
SELECT date_part('epoch', date_bin('1 hour', slice, 'epoch'))::bigint + CASE WHEN exact THEN 0 ELSE %(hour)s END,
       exact, kind, string_agg(product_id || ',' || categories, ' '),
       string_agg(int8send(m1), ''), string_agg(int8send(m2), '')
FROM (SELECT *, date_bin('30 minutes', t, 'epoch') AS slice, t = date_bin('1 hour', t, 'epoch') AS exact FROM facts) AS f
GROUP BY slice, exact, kind
"""


def spans(start: int, begin: int, end: int) -> list[tuple[int, int]]:
    """The hours from `start` to `end` in SPANS spans of about as many sales each, the sales taken to
    begin at `begin` (the earliest's hour): so the first span starts at `start`, the others share
    the hours from `begin` alike. The read begins a window's length before the history's first
    hour, where a shop younger than the history's keep and that window has no sale: spans shared
    from there would hold unequal shares (of two, one three times the other's)."""
    begin = max(start, begin)
    cuts = sorted({begin + (end - begin) * i // SPANS // HOUR * HOUR for i in range(1, SPANS)} - {start})
    bounds = [start, *cuts, end]
    return list(zip(bounds, bounds[1:], strict=False))


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
        log.warning("a reader of the hour buckets could not be cancelled: %r", error)


def _added(row: tuple, pairs: _Numbering) -> tuple[int, bool, int, tuple[np.ndarray, ...]]:
    """A row of _HOURLY as (its bucket key, whether it is exact, its sales, its columns): its pairs of
    a product and a list numbered in `pairs`, and the facts of each pair added up: sorted by pair,
    each run of a pair summed (np.unique and np.add.at, fact by fact, took three times as long)."""
    key, on_boundary, kind, texts, *metrics = row
    facts = _numbered(texts.split(" "), pairs)
    by_pair = np.argsort(facts)
    ordered = facts[by_pair]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    added = np.zeros((len(starts), len(METRICS)), dtype=np.int64)
    first = 0 if kind == _SALES else len(SALES_METRICS)  # a row's two metrics: its kind's
    for m, v in enumerate(metrics, first):
        added[:, m] = np.add.reduceat(np.frombuffer(v, dtype=">i8")[by_pair], starts)
    return (
        key,
        on_boundary,
        len(facts) if kind == _SALES else 0,
        (
            ordered[starts],
            np.full(len(starts), key, dtype=np.int64),
            np.full(len(starts), on_boundary, dtype=bool),
            added,
        ),
    )


@dataclass
class Board:
    products: np.ndarray  # the product ids, in byte order
    places: np.ndarray  # each one's place in Hourly.products
    column: np.ndarray  # each bucket's product (its place in `products`)
    b: np.ndarray  # each bucket's key (epoch seconds)
    exact: np.ndarray
    sums: list[np.ndarray]  # each metric's, as Hourly's


@dataclass
class Hourly:
    """The hour buckets of _HOURLY as arrays, one entry a bucket."""

    products: np.ndarray  # the product ids, in byte order
    lists: list[str]  # the lists of categories, comma-joined
    b: np.ndarray
    exact: np.ndarray
    # Each metric's sums (in METRICS' order), one a bucket; an empty array where no fact has the
    # metric (a shop without views and wishes), so that no board gathers it.
    sums: list[np.ndarray]
    scratch: np.ndarray  # one slot a product, for _board
    pair: np.ndarray  # each bucket's pair of a product and a list
    pair_product: np.ndarray  # each pair's product (its place in `products`)
    pair_listed: np.ndarray  # each pair's list (its place in `lists`)
    # The sales of each row _HOURLY gave (half an hour of a bucket): its bucket's key, whether it is
    # exact, and how many sales it holds.
    tallies: tuple[np.ndarray, np.ndarray, np.ndarray]

    @classmethod
    def read(cls, snapshot: str, lo: int, hi: int, *, earliest: float | None) -> "Hourly":
        """The buckets of the facts from `lo` up to `hi` (epoch seconds, on hours; the earliest sale
        at `earliest`, if any), read by connections that see `snapshot` (_spans_read), each span's
        rows added up here as soon as it is read, while PostgreSQL groups the next spans' facts."""
        begin = lo if earliest is None else math.floor(earliest / HOUR) * HOUR
        params = [{"lo": start, "hi": end, "hour": HOUR} for start, end in spans(lo, begin, hi)]
        pairs = _Numbering()  # "product,list" -> its number
        # Each row's bucket key, whether it is exact, its sales and its columns, in any order.
        rows: list[tuple[int, bool, int, tuple[np.ndarray, ...]]] = []
        for read in _spans_read(snapshot, params):
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
        columns = [empty, *(row[3] for row in rows)]
        pair, b, exact, sums = (np.concatenate(column) for column in zip(*columns, strict=True))
        # Each pair's product and list, numbered once a pair, not once a fact.
        places, lists = _Numbering(), _Numbering()
        split = [text.split(",", 1) for text in pairs]
        pair_product = _numbered([product_id for product_id, _ in split], places)
        pair_listed = _numbered([text for _, text in split], lists)
        names = list(places)
        order = sorted(range(len(names)), key=lambda i: names[i].encode())  # ties are ranked by bytes
        rank = np.empty(len(names), dtype=np.int64)
        rank[order] = np.arange(len(names))
        pair_product = rank[pair_product]
        return cls(
            products=np.array([names[i] for i in order], dtype=object),
            lists=list(lists),
            b=b,
            exact=exact,
            sums=[
                np.ascontiguousarray(sums[:, m]) if sums[:, m].any() else np.zeros(0, np.int64)
                for m in range(len(METRICS))
            ],
            scratch=np.zeros(len(names), dtype=np.int64),
            pair=pair,
            pair_product=pair_product,
            pair_listed=pair_listed,
            tallies=(
                np.array([row[0] for row in rows], dtype=np.int64),
                np.array([row[1] for row in rows], dtype=bool),
                np.array([row[2] for row in rows], dtype=np.int64),
            ),
        )

    def sales(self, start: int, stop: int) -> int:
        """How many sales count from `start` up to `stop` (epoch seconds, on hours)."""
        b, exact, sales = self.tallies
        return int(sales[_inside(b, exact, start, stop)].sum())

    def totals(self, bounds: list[tuple[int, int]], tree: Tree) -> "Totals":
        """Each (category, product)'s sums of every metric from each `bounds`' start up to its stop
        (epoch seconds, on hours), a pair's sums counted in `all` and in each category its list
        counts in under `tree` (with their ancestors), as a rebuild's boards hold them."""
        pairs = len(self.pair_product)
        sums = np.zeros((pairs, len(bounds), len(METRICS)), dtype=np.int64)
        for i, (start, stop) in enumerate(bounds):
            inside = _inside(self.b, self.exact, start, stop)
            pair = self.pair[inside]
            for m, column in enumerate(self.sums):
                if column.size:
                    # Added up as doubles, exact all the same: every partial sum is of one product's
                    # sales and refunds, and ingest keeps a product's lifetime units and revenue
                    # within 2^53 - 1 (rankings.ingest.sales.MAX_PRODUCT_TOTAL), a refund within its
                    # sale, so every partial sum is an integer a double holds exactly.
                    sums[:, i, m] = np.bincount(pair, weights=column[inside], minlength=pairs)
        # Each pair once in each category of its list.
        categories = _Numbering()
        expanded = [[categories[c] for c in each] for each in self._categories(tree)]
        widths = np.array([len(each) for each in expanded], dtype=np.int64)
        flat = np.array([c for each in expanded for c in each], dtype=np.int64)
        width = widths[self.pair_listed]
        of = np.repeat(np.arange(pairs), width)  # each row's pair
        nth = np.arange(len(of)) - np.repeat(np.cumsum(width) - width, width)  # of its pair's categories
        category = flat[(np.cumsum(widths) - widths)[self.pair_listed[of]] + nth]
        # A product sold in two lists that share a category has a pair of each there: added up.
        key = category * max(len(self.products), 1) + self.pair_product[of]
        order = np.argsort(key, kind="stable")
        key = key[order]
        firsts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1]))) if key.size else key
        return Totals(
            categories=list(categories),
            products=self.products,
            key=key[firsts],
            entries=of[order],
            firsts=firsts,
            sums=sums,
        )

    def _categories(self, tree: Tree) -> list[tuple[str, ...]]:
        """The categories each list counts in under `tree`: `all`, then its own with their ancestors."""
        return [(ALL, *tree.expand(text.split(",") if text else ())) for text in self.lists]

    def boards(self, tree: Tree, layout: Layout) -> Iterator[list[tuple[str, "Board"]]]:
        """[(board, Board)] of each category a bucket counts in under `tree` (`all`, and its list's
        categories with their ancestors): the category's own board, or each of its parts' if
        `layout` splits it."""
        listed = self.pair_listed[self.pair]  # each bucket's list
        counts = np.bincount(listed, minlength=len(self.lists))
        ends = np.cumsum(counts)
        # In the smallest type that holds every list's number: numpy sorts 8- and 16-bit numbers stably
        # by radix, those of 4 million buckets in a fifth of the time.
        by_list = np.argsort(listed.astype(np.min_scalar_type(len(self.lists))), kind="stable")
        members: dict[str, list[int]] = {}
        for j, categories in enumerate(self._categories(tree)):
            for category in categories:
                members.setdefault(category, []).append(j)
        # `all`, the largest board, last: PostgreSQL stores the categories' ranks from the first
        # while Python ranks the next, and `all`'s while it stores theirs (the history of 10,000,000
        # sales took 0.3-0.6 s less so, together with `all`'s buckets taken whole).
        for category in sorted(members, key=lambda c: (c == ALL, c)):
            if len(members[category]) == len(self.lists):  # every list's, as `all`'s: every bucket
                rows = np.arange(len(listed))
            else:
                # Runs already in order, one a list: merged by the stable sort (timsort), in a third
                # of the quicksort's time.
                rows = np.sort(
                    np.concatenate([by_list[ends[j] - counts[j] : ends[j]] for j in members[category]]),
                    kind="stable",
                )
            yield list(self._parts(category, rows, layout))

    def _parts(self, category: str, rows: np.ndarray, layout: Layout) -> Iterator[tuple[str, "Board"]]:
        if category not in layout.split:
            yield category, self._board(rows)
            return
        product = self.pair_product[self.pair[rows]]
        present = np.unique(product)
        names = [layout.board_of(category, self.products[p]) for p in present.tolist()]
        parts = sorted(set(names))
        place = {name: i for i, name in enumerate(parts)}
        # The part of each product present, then of each row.
        number = np.array([place[name] for name in names], dtype=np.int64)
        part = number[np.searchsorted(present, product)]
        order = np.argsort(part, kind="stable")
        ends = np.cumsum(np.bincount(part, minlength=len(parts)))
        for i, name in enumerate(parts):
            yield name, self._board(rows[order[ends[i - 1] if i else 0 : ends[i]]])

    def _board(self, rows: np.ndarray) -> "Board":
        # The products present, in byte order, and each bucket's among them, in time linear in the
        # board's buckets (np.unique sorted them all: a second for `all`'s millions): each product's
        # slot of the scratch array takes the place of one of its buckets (whichever write lands),
        # so the buckets found in their product's slot are one of each product.
        product = self.pair_product[self.pair[rows]]
        places = np.arange(len(product))
        self.scratch[product] = places
        present = np.sort(product[self.scratch[product] == places])
        self.scratch[present] = np.arange(len(present))
        return Board(
            products=self.products[present],
            places=present,
            column=self.scratch[product],
            b=self.b[rows],
            exact=self.exact[rows],
            sums=[column[rows] if column.size else column for column in self.sums],
        )


def _inside(b: np.ndarray, exact: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Whether each bucket (keyed `b`, `exact` or not) is inside [`start`, `stop`), both on hours: a
    bucket off its boundary holds the facts of the hour before its key, an exact one those on it."""
    return np.where(exact, (start <= b) & (b < stop), (start < b) & (b <= stop))


@dataclass
class Totals:
    """A rebuild's sums of every board of the windows of whole hours (Hourly.totals), one row a
    category and product, added up from its pairs' as they are asked for, TOTALS_ROWS rows at a
    time: a catalogue of millions holds tens of millions."""

    categories: list[str]
    products: np.ndarray  # the product ids
    key: np.ndarray  # each row's category (its place in `categories`) × len(products) + product, ascending
    entries: np.ndarray  # the pairs each row adds up, row after row
    firsts: np.ndarray  # where each row's begin in `entries`
    sums: np.ndarray  # each pair's, by window, then metric (METRICS' order)

    def rows(self, metrics: tuple[str, ...], owed: Iterable[tuple[str, str]] = ()) -> Iterator[list]:
        """[category, product id, the sums of `metrics` of each window in turn] of every row with any,
        and of every row `owed` names (category, product id), as board_stream.BoardStream takes a
        rebuild's aggregate: where a claimed sale and its queued return net to nothing, the board
        holds the sale until the return is claimed, and the stream takes what is owed off the row."""
        columns = [METRICS.index(metric) for metric in metrics]
        named = self._named(owed)
        width = max(len(self.products), 1)
        for start in range(0, len(self.key), TOTALS_ROWS):
            stop = min(start + TOTALS_ROWS, len(self.key))
            begin, end = self.firsts[start], self.firsts[stop] if stop < len(self.key) else len(self.entries)
            values = self.sums[self.entries[begin:end]][:, :, columns]
            values = np.add.reduceat(values, self.firsts[start:stop] - begin, axis=0).reshape(
                stop - start, -1
            )
            kept = np.flatnonzero(values.any(axis=1) | named[start:stop])
            key = self.key[start:stop][kept]
            categories, products = self.categories, self.products
            for c, p, row in zip(
                (key // width).tolist(), (key % width).tolist(), values[kept].tolist(), strict=True
            ):
                yield [categories[c], products[p], *row]

    def _named(self, owed: Iterable[tuple[str, str]]) -> np.ndarray:
        """Whether each row is one of `owed` (category, product id)."""
        named = np.zeros(len(self.key), dtype=bool)
        place = {name: i for i, name in enumerate(self.categories)}
        for category, product_id in owed:
            p = int(np.searchsorted(self.products, product_id))  # in byte order, as ASCII ids sort
            if category not in place or p == len(self.products) or self.products[p] != product_id:
                continue
            key = place[category] * max(len(self.products), 1) + p
            row = int(np.searchsorted(self.key, key))
            if row < len(self.key) and self.key[row] == key:
                named[row] = True
        return named

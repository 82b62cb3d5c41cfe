"""A version's history from the sales.

A rebuild records, for its version, the snapshot of every hour boundary H from the earliest sale
(at most SNAPSHOT_KEEP_SECONDS before the engine's clock) up to the clock, each the board as of H
from every sale and engagement event known at the rebuild: a window as of H holds what was
counted at or before H in the window's buckets, exactly what snapshots.snapshots_recompute gives
for a tick that had counted nothing before H.

Its facts are the hour buckets of the raw sales and events (rankings.engine.hourly), read in the
snapshot the history's transaction exported, or handed over by the rebuild that read them in its
own for its boards. A bucket keyed b
is in the snapshot of every hour from b to b + span (span: the window's length less one bucket),
the last excluded unless exact. Python holds the buckets as arrays and, a category at a time, takes
the buckets of the lists that count in it (the version's tree expands each list once); numpy makes
each hour's scores from the last hour's by the buckets that enter the window and leave it, and ranks
each hour's board (its first DEPTH ranks: score descending, then the products' byte order) among the
few products that can lead it (_Leaders), or, for a board of few products, makes every hour's scores
and ranks at once (_at_once). What it writes is what the live
ticks write (snapshots.take): the first SNAPSHOT_DEPTH product ids of every non-empty board of the
windows SNAPSHOT_WINDOWS, per metric, and the hours themselves, in one COPY that PostgreSQL stores
while Python ranks on.
"""

import datetime as dt
import logging
import math
import time
from dataclasses import dataclass

import numpy as np
from django.db import connection
from psycopg.copy import QueuedLibpqWriter
from tqdm import tqdm

from rankings.conf import METRICS, rankings_settings
from rankings.engine.hourly import Board, Hourly
from rankings.engine.readers import own_transaction, snapshot_export
from rankings.engine.shards import Layout
from rankings.engine.snapshots import HOUR, instant, snapshot_windows
from rankings.engine.tree import Tree
from rankings.engine.windows import Window, configured_windows
from rankings.models import Sale, ShardState, Snapshot, SnapshotHour

log = logging.getLogger(__name__)


@dataclass
class HistoryReport:
    hours: int = 0
    boards: int = 0  # snapshot rows written
    products: int = 0  # product ids in them
    seconds: float = 0.0


@dataclass
class HistoryFacts:
    """The hour buckets a rebuild read in its snapshot for its boards, handed to its history: read
    over at least history_reach(history_hours(clock, earliest)) for the clock the history goes up
    to."""

    earliest: float | None  # the earliest sale the rebuild found (earliest_sale)
    hourly: Hourly


def earliest_sale() -> float | None:
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


def _hour_windows() -> list[tuple[str, Window]]:
    """The windows of SNAPSHOT_WINDOWS a history records, by name: those of hour buckets."""
    windows = [(name, configured_windows()[name]) for name in snapshot_windows()]
    return [(name, w) for name, w in windows if w.bucket_seconds == HOUR]


def history_reach(hours: list[int]) -> tuple[int, int] | None:
    """The instants (epoch seconds, on hours) whose facts a history of `hours` (history_hours)
    reads: from a widest window's length before its first hour up to its last hour, that included;
    None where it records no hour."""
    if not hours:
        return None
    widest = max(((w.buckets - 1) * HOUR for _, w in _hour_windows()), default=0)
    return hours[0] - widest, hours[-1] + HOUR


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
    *,
    version: int,
    tree: Tree,
    layout: Layout,
    clock: dt.datetime | None,
    progress=None,
    facts: HistoryFacts | None = None,
) -> HistoryReport:
    """Record `version`'s snapshots of every hour up to `clock` from the sales (see above), counted
    with `tree`, a split category's by part as `layout` splits it (as the ticks take them), in place
    of any it has of those hours, in one transaction of a connection of its own; `progress(done)`
    is told how many categories are done, and may use Django's connection (it is not the
    history's). From `facts` where a rebuild read them, else read in that transaction's snapshot."""
    started = time.monotonic()
    earliest = facts.earliest if facts is not None else earliest_sale()
    hours = history_hours(clock, earliest)
    report = HistoryReport(hours=len(hours))
    reach = history_reach(hours)
    if reach is None:
        return report
    first, last = hours[0], hours[-1]
    windows = _hour_windows()
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
        if facts is not None:
            hourly = facts.hourly
        else:
            hourly = Hourly.read(snapshot_export(writer), *reach, earliest=earliest)
        # One COPY for every board, its data sent by psycopg's writer thread: PostgreSQL stores one
        # category's ranks while Python ranks the next (a COPY a category waited for each in turn).
        with writer.copy(_COPY, writer=QueuedLibpqWriter(writer)) as copy:
            copy.set_types(_COPY_TYPES)
            boards_of = tqdm(hourly.boards(tree, layout), desc="history", unit=" categories", leave=False)
            for done, boards in enumerate(boards_of, 1):
                for board_name, board in boards:
                    names = hourly.products[board.places]
                    for name, w in windows:
                        span = (w.buckets - 1) * HOUR
                        for at, metric, ranked in _ranked(board, first, len(hours), span):
                            copy.write_row(
                                (
                                    version,
                                    instant(at),
                                    name,
                                    metric,
                                    board_name,
                                    " ".join(names[ranked].tolist()),
                                )
                            )
                            report.boards += 1
                            report.products += len(ranked)
                if progress is not None:
                    progress(done)
    report.seconds = time.monotonic() - started
    return report


# In COPY's binary format: each row's ranks are one text, as the field's length and bytes, which
# PostgreSQL takes as they come, where its text format is scanned byte by byte for escapes.
_COPY = (
    f'COPY {Snapshot._meta.db_table} (version, at, "window", metric, category, products) FROM STDIN'
    " WITH (FORMAT BINARY)"
)
_COPY_TYPES = ["int4", "timestamptz", "varchar", "varchar", "varchar", "text"]


# A board whose products times hours (each with the hour past the last) are at most AT_ONCE_CELLS is
# ranked every hour at once (_at_once), a larger one hour by hour (_by_leaders). At once costs some 15
# to 20 ns a product an hour, however few change; hour by hour, tens of µs an hour that changes, and
# more the more change in it. Over 337 hours (14 days): boards cut from the benchmark's `all`, 2,000
# products, 0.046 s at once against 0.060 s; random boards of 800 products 2.4 to 3.6 ms against 8.1
# to 8.6 ms. Over 769 hours (32 days), the sparsest boards, one bucket a product: 512 products 3.0
# against 8.8 ms, 1,024 16.9 against 12.3 ms, 2,048 31.5 against 16.7 ms. At once holds a few
# arrays of at most 4 MB, whatever the snapshots' keep.
AT_ONCE_CELLS = 2**19


def _ranked(board: Board, first: int, hours: int, span: int):
    """(hour, metric, the columns of the first DEPTH ranks) of every non-empty board of one window,
    hour by hour."""
    depth = rankings_settings.SNAPSHOT_DEPTH
    # The hour (an index from `first`) each bucket enters the window at, and the first it is out of
    # it: its value is added at the one and taken away at the other. Both in order, as the buckets
    # are (Hourly.read). A change at `hours`, past the last hour, counts in none.
    enters = np.clip((board.b - first) // HOUR, 0, hours)
    leaves = np.clip((board.b + span + board.exact * HOUR - first) // HOUR, 0, hours)
    ranking = _at_once if len(board.products) * (hours + 1) <= AT_ONCE_CELLS else _by_leaders
    for m, metric in enumerate(METRICS):
        values = board.sums[m]
        if not values.any():
            continue  # no fact of this metric: every hour's board is empty
        for i, ranked in enumerate(ranking(board, values, enters, leaves, hours, depth)):
            if ranked.size:
                yield first + i * HOUR, metric, ranked


def _by_leaders(
    board: Board, values: np.ndarray, enters: np.ndarray, leaves: np.ndarray, hours: int, depth: int
):
    """Each hour's first ranks in turn, from the last hour's and the buckets that enter the window and
    leave it (_Leaders): hour i's are the buckets from enter[i] to enter[i + 1], and from leave[i] to
    leave[i + 1]."""
    every = np.arange(hours + 1)
    enter, leave = np.searchsorted(enters, every).tolist(), np.searchsorted(leaves, every).tolist()
    column = board.column
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
        yield ranked


def _at_once(
    board: Board, values: np.ndarray, enters: np.ndarray, leaves: np.ndarray, hours: int, depth: int
):
    """Each hour's first ranks in turn, from every hour's scores made at once: each product's changes
    by hour, added up along its hours (a product's hours side by side: an eighth of the time of
    adding up rows of an hour each), then each hour's scores sorted apart, all in one call."""
    width = len(board.products)
    # Each change as doubles, exact all the same: each cell adds up one product's buckets, its sales
    # and refunds, within 2^53 - 1 (as Hourly.totals).
    place = board.column * (hours + 1)
    cells = width * (hours + 1)
    changes = np.bincount(place + enters, weights=values, minlength=cells).astype(np.int64)
    changes -= np.bincount(place + leaves, weights=values, minlength=cells).astype(np.int64)
    # An hour a row; a score of 0 or less is unranked, as 0.
    scores = np.maximum(np.cumsum(changes.reshape(width, hours + 1), axis=1)[:, :hours].T, 0, order="C")
    ranked = np.minimum(np.count_nonzero(scores, axis=1), depth).tolist()
    bits = max(width - 1, 1).bit_length()
    if scores.max() < 1 << (62 - bits):
        firsts = _keyed_firsts(np.arange(width), scores, depth, bits)  # an unranked product's last
    else:
        firsts = np.argsort(-scores, axis=1, kind="stable")[:, :depth]  # ties in column order
    for i, count in enumerate(ranked):
        yield firsts[i, :count]


def _keyed_firsts(columns: np.ndarray, scores: np.ndarray, depth: int, bits: int) -> np.ndarray:
    """The columns of the first `depth` ranks along the last axis of `scores` (score descending,
    then column; `columns`, below 2^bits, are each score's), every score below 2^(62 - bits): score
    and column as one number, the column less the score shifted above the column's bits, so that the
    least `depth` numbers are the first ranks, ties by column, with no argsort; the column is the
    number's low bits (two's complement). As 32-bit numbers where they fit: sorted in a half to a
    third of the time."""
    keys = columns - (scores << bits)
    if keys.min() >= -(2**31):
        keys = keys.astype(np.int32)
    if keys.shape[-1] > depth:
        keys = np.partition(keys, depth - 1, axis=-1)[..., :depth]
    keys.sort(axis=-1)
    return keys & ((1 << bits) - 1)


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
            return _keyed_firsts(self.held, values, depth, self.column_bits)
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

"""Versions: rebuild every board from raw sales into a new version, compare, switch, expire.

A rebuild never writes the active version. It takes one consistent snapshot
(REPEATABLE READ, begun while every shard's tick lock is held, so the
snapshot sits exactly between two batches of each shard) and reads in it, once,
the raw sales and events by hour bucket (rankings.engine.hourly), which give
the sums of every board of the windows whose buckets are whole hours, and later
the version's history. The other windows' (a window of minutes: the last hour's
sales) PostgreSQL aggregates (by product and list of categories, then by
category, `all` among them, and product; split by product into parts that run
side by side on two connections). Both stream into the new version's boards
(rankings.operations.board_stream); it puts each shard's in place, then
catches up by replaying the batches the ticks committed since the snapshot.
Those batches are the very changes the active version received, so the new
version reaches the same sequence number with the same content.

A switch-over holds every shard's lock, brings the target version up to the
last batch, and then changes the one key readers consult: a reader sees the
old version or the new one, each whole.

A rebuild may lay the new version out otherwise (another shard count, pinned
categories): its boards are placed by its own layout, and it catches up by
replaying the same batches routed by category to its shards, each of its shards
remembering how far it has read each shard of the active layout (store's
from:K). Switching to it settles every shard at one instant, replays the rest,
and re-keys what PostgreSQL keeps by shard number (rankings.engine.relayout) in
the switch's transaction; the version it retires is told where the new
layout's batch numbers start, so that switching back works the same way.
"""

import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import OperationalError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from catalogue.models import TREE_LOCK_SQL, Category, Product
from rankings.conf import ENGAGEMENT_METRICS, SALES_METRICS, rankings_settings
from rankings.engine import locks, store
from rankings.engine.batches import shard_rebuild, shards_settle
from rankings.engine.history import (
    HistoryFacts,
    earliest_sale,
    history_carry,
    history_delete,
    history_hours,
    history_reach,
    history_record,
)
from rankings.engine.hourly import Hourly
from rankings.engine.names_copy import names_parts_fill
from rankings.engine.readers import snapshot_export, snapshot_reader
from rankings.engine.relayout import state_rekey
from rankings.engine.retree import tree_recount
from rankings.engine.shards import ALL, Layout, active, version_layout
from rankings.engine.snapshots import HOUR
from rankings.engine.tree import EXPAND_SQL, Tree, catalogue_tree, tree_affected, version_tree
from rankings.engine.windows import Window, configured_windows
from rankings.models import RankingVersion, ShardState
from rankings.operations.board_stream import BoardStream, stream
from rankings.operations.catch_up import VersionError, catch_up_version, version_gen
from rankings.operations.engagement_rebuild import engagement_pending, engagement_query

log = logging.getLogger(__name__)

# Memory for each hash of the rebuild's GROUP BYs (a group per product and list of categories, then
# per category and product), in each process that adds up (a reader and its parallel workers, each
# up to this times hash_mem_multiplier): enough to hash millions of groups without spilling to disk.
AGGREGATE_WORK_MEM = "512MB"

# The rebuild's GROUP BYs hash their groups. PostgreSQL cannot tell how many sales a part holds (a
# test of a hash of the product id: its plan expected 20,834 rows from each process where 1.8
# million came, its default guess of 1 in 200 for such a test, where a part holds 1 in PARTS), so it
# sorted a part's sales by product and list to add them up, about three times as long (13.2 to
# 15.4 s against 5.1 s for a part of 10,000,000 sales whose products keep their lists).
HASHED_SQL = "SET LOCAL enable_sort = off"

Progress = Callable[[float, str], None]


def _nothing(progress: float, message: str) -> None:
    pass


# Where each phase of a build starts on its progress bar (0…1): aggregating the
# raw sales takes most of a rebuild's time, writing the boards most of the rest.
PROGRESS_SNAPSHOT = 0.02  # taking the snapshot, aggregating it and writing the boards
PROGRESS_WRITE = 0.85  # putting the boards in place, shard by shard …
PROGRESS_WRITE_SPAN = 0.05  # … over this much of the bar
PROGRESS_HISTORY = 0.90  # recording the version's hourly history from the sales
PROGRESS_NAMES = 0.95  # copying the product names into a split category's parts
PROGRESS_CATCH_UP = 0.97  # replaying the batches ticked since the snapshot
PROGRESS_DONE = 1.0


@dataclass
class _Snapshot:
    """What a build read in one consistent snapshot of the raw sales."""

    # the new version's shard -> (its batch sequence number, the instant its boards are exact at)
    positions: dict[int, tuple[int, float]]
    sales: int
    # the batch log's era the positions follow (see RankingVersion.log_era)
    era: int
    # laid out unlike the active version: the active layout's shard -> its batch at the snapshot
    sources: dict[int, int] | None
    # the earliest instant of the shards that have ticked: the version's history goes up to it
    clock: dt.datetime | None = None
    # the hour buckets read in the snapshot, for the history too
    facts: HistoryFacts | None = None


class _BuildProgress:
    """Records a build's progress on its version's row (where the admin reads it) and tells the caller."""

    def __init__(self, number: int, progress: Progress):
        self.number = number
        self.progress = progress
        self.started = time.monotonic()
        self.sales: int | None = None  # known once the snapshot is aggregated

    def __call__(self, fraction: float, message: str) -> None:
        elapsed = time.monotonic() - self.started
        fields = {"progress": fraction, "message": message}
        if self.sales is not None:
            fields.update(sales=self.sales, rate=self.sales / elapsed if elapsed else 0.0)
        RankingVersion.objects.filter(number=self.number).update(**fields)
        self.progress(fraction, message)


def version_build(
    *, activate: bool = False, progress: Progress | None = None, layout: Layout | None = None
) -> RankingVersion:
    """Rebuild every board from raw sales into a new version laid out with `layout` (default: the
    active version's; see shards.layout_plan); optionally switch to it."""
    versions_fail_abandoned()
    number = (RankingVersion.objects.order_by("-number").values_list("number", flat=True).first() or 1) + 1
    layout = layout or active().layout
    # The catalogue's tree as it stands now is the one the version counts with, for good; frozen
    # under the tree lock, so that a category deleted meanwhile is either gone from it or kept.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(TREE_LOCK_SQL)
        version = RankingVersion.objects.create(
            number=number,
            state=RankingVersion.State.BUILDING,
            shards=layout.shards,
            pinned=list(layout.pinned),
            tree=dict(catalogue_tree().parents),
        )
    with locks.build_lock(number):
        try:
            _build(number, layout, _BuildProgress(number, progress or _nothing))
        except BaseException as error:
            _build_failed(number, error)
            raise
    if activate:
        version_switch(number=number)
    version.refresh_from_db()
    return version


def _build(number: int, layout: Layout, report: _BuildProgress) -> None:
    """Snapshot and aggregate the raw sales into the boards, put them in place, catch up; the version
    is then ready."""
    report(PROGRESS_SNAPSHOT, "taking a snapshot of the raw sales; aggregating them into boards")
    # A new number, but Redis may hold a leftover of it (a database restored from a backup): cleared
    # first, the boards written are then all the version has, and putting them in place needs no SCAN.
    store.version_delete(number)
    history_delete(number)
    load = store.BoardsLoad(number, fresh=True)
    snapshot = _snapshot_aggregate(layout, version_tree(number), load)
    RankingVersion.objects.filter(number=number).update(log_era=snapshot.era)
    report.sales = snapshot.sales
    report(PROGRESS_WRITE, f"aggregated {snapshot.sales:,} raw sales; putting the boards in place")
    _swap_boards(number, layout, snapshot, load, report)
    _history(number, snapshot, report)
    snapshot.facts = None  # the hour buckets, let go
    _names(number, report)
    report(PROGRESS_CATCH_UP, "catching up with the batches ticked since the snapshot")
    with locks.version_change_lock():
        catch_up_version(number)
    RankingVersion.objects.filter(number=number).update(
        state=RankingVersion.State.READY, built_at=timezone.now()
    )
    report(PROGRESS_DONE, "ready")


def _swap_boards(
    number: int, layout: Layout, snapshot: _Snapshot, load: store.BoardsLoad, report: _BuildProgress
) -> None:
    """Put each shard's boards written by `load` in place of the version's, one shard at a time."""
    gen = store.generation(number)
    store.shard_layout_set(number, layout.shards, layout.pinned)
    shards = layout.shards
    for shard in range(shards):
        seq, as_of = snapshot.positions[shard]
        store.boards_swap(load, shard=shard, seq=seq, as_of=as_of, gen=gen)
        if snapshot.sources is not None:
            store.shard_sources_set(
                version=number, shard=shard, gen=gen, sources=snapshot.sources, replace=True
            )
        placed = PROGRESS_WRITE + PROGRESS_WRITE_SPAN * (shard + 1) / shards
        report(placed, f"put shard {shard + 1} of {shards} in place")


def _history(number: int, snapshot: _Snapshot, report: _BuildProgress) -> None:
    """Record the version's hourly snapshots from the hour buckets read in the snapshot, up to its
    clock; the progress through the categories is on the version's row as it goes (the history's
    transaction is on a connection of its own)."""
    categories = Category.objects.count() + 1  # and `all`
    report(PROGRESS_HISTORY, "recording the hourly history of every board from the sales")
    recorded = history_record(
        version=number,
        tree=version_tree(number),
        layout=version_layout(number),
        clock=snapshot.clock,
        facts=snapshot.facts,
        progress=lambda done: report(
            PROGRESS_HISTORY + (PROGRESS_NAMES - PROGRESS_HISTORY) * min(done / categories, 1.0),
            f"recorded the hourly history of {done:,} categories",
        ),
    )
    log.info("version %s: %s", number, recorded)


def _names(number: int, report: _BuildProgress) -> None:
    """Copy every product's name into the version's split categories' parts, if it splits any."""
    if not version_layout(number).split:
        return
    products = max(Product.objects.count(), 1)
    names_parts_fill(
        number,
        progress=lambda done: report(
            PROGRESS_NAMES + (PROGRESS_CATCH_UP - PROGRESS_NAMES) * min(done / products, 1.0),
            f"copied the names of {done:,} products into the split categories' parts",
        ),
    )


def _build_failed(number: int, error: BaseException) -> None:
    """Mark the version failed, with the reason, and delete what Redis and its history hold of it."""
    RankingVersion.objects.filter(number=number).update(
        state=RankingVersion.State.FAILED, message=f"failed: {error!r}"[:2000]
    )
    store.version_delete(number)
    history_delete(number)


# Every sale counts in its categories and in `all`, split by product into PARTS (a product's sums,
# `all` among them, are all in one part), with no join to the catalogue or the work queue. A part's
# sales are first added up by product and list of categories, in PostgreSQL's parallel workers side
# by side; a product is sold in few lists, so each group, not each sale, is then counted in its
# categories (expanded with the tree) and added up again by category and product. The parts run on
# two connections that share the snapshot, each part's boards written to Redis while PostgreSQL adds
# up the next. The first column counts a row's sales; the rows of `all` add up to the sales
# aggregated. `sums` names each window's sums `w0`, `w1`, … (_aggregate_statement).
PARTS = 2
_PART = "mod(hashtext(s.product_id) & 2147483647, %(parts)s) = %(part)s"
_AGGREGATE = f"""
SELECT sum(s.sales)::bigint, u.category, s.product_id, {{totals}}
FROM (
    SELECT count(*) AS sales, s.product_id, s.categories, {{sums}}
    FROM rankings_sale s
    WHERE s.counted_at >= %(oldest)s AND s.counted_at < %(stop)s AND {_PART}
    GROUP BY s.product_id, s.categories
) AS s CROSS JOIN LATERAL (SELECT %(all)s::text UNION ALL ({{expand}})) AS u(category)
GROUP BY 2, 3
"""
# Sales a shard has not claimed yet are in none of its boards: their part is
# subtracted as the aggregate streams by (the queue is short, so this is a small query).
_PENDING = (
    """
SELECT p.shard, u.category, s.product_id, {sums}
FROM rankings_pendingsale p JOIN rankings_sale s ON s.id = p.sale_id AND s.counted_at = p.counted_at
CROSS JOIN LATERAL (SELECT %(all)s::text UNION ALL ("""
    + EXPAND_SQL
    + """)) AS u(category)
WHERE p.counted_at >= %(oldest)s AND p.counted_at < %(stop)s
  AND s.counted_at >= %(oldest)s AND s.counted_at < %(stop)s
GROUP BY 1, 2, 3
"""
)


def _snapshot_aggregate(target: Layout, tree: Tree, load: store.BoardsLoad) -> _Snapshot:
    """Write with `load` every board of the `target` layout, counted with `tree`, as of the snapshot,
    each as of its shard's instant in the active layout; the positions the new shards start from,
    and the hour buckets read for the history."""
    sales = 0
    with _snapshot_begun() as (live, states, era):
        with connection.cursor() as cursor:
            snapshot = snapshot_export(cursor)
        clock = min((as_of for _, as_of in states.values() if as_of is not None), default=None)
        groups = _shards_by_bounds(states)
        facts = _facts_read(snapshot, groups, clock)
        with (
            snapshot_reader(snapshot, work_mem=AGGREGATE_WORK_MEM) as first,
            snapshot_reader(snapshot, work_mem=AGGREGATE_WORK_MEM) as second,
        ):
            for reader in (first, second):
                reader.execute(HASHED_SQL)
            hourly = facts.hourly if facts is not None else None
            for as_of, shards in groups.items():
                sales = max(
                    sales, _aggregate_into((first, second), load, as_of, shards, live, target, tree, hourly)
                )
    live_positions = {}
    for shard in range(live.shards):
        seq, as_of = states.get(shard, (0, None))
        live_positions[shard] = (seq, as_of.timestamp() if as_of else 0.0)
    if target == live:
        return _Snapshot(
            positions=live_positions, sales=sales, era=era, sources=None, clock=clock, facts=facts
        )
    # Laid out otherwise: each shard counts its own batches from 0 and remembers each live shard's.
    latest = max((as_of for _, as_of in live_positions.values()), default=0.0)
    positions = {shard: (0, latest) for shard in range(target.shards)}
    sources = {shard: seq for shard, (seq, _) in live_positions.items()}
    return _Snapshot(positions=positions, sales=sales, era=era, sources=sources, clock=clock, facts=facts)


def _facts_read(
    snapshot: str, groups: dict[dt.datetime, list[int]], clock: dt.datetime | None
) -> HistoryFacts | None:
    """The hour buckets of every sale and event that a board of a window of whole hours holds as of
    any instant of `groups`, or that the history up to `clock` reads, read once in `snapshot`; None
    where neither needs any."""
    earliest = earliest_sale()
    reaches = [_reach(bounds) for bounds in map(_whole_bounds, groups) if bounds]
    history = history_reach(history_hours(clock, earliest))
    if history is not None:
        reaches.append(history)
    if not reaches:
        return None
    lo, hi = _reach(reaches)
    return HistoryFacts(earliest=earliest, hourly=Hourly.read(snapshot, lo, hi, earliest=earliest))


def _whole_windows() -> list[Window]:
    """The windows whose buckets are whole hours (a day's, a week's: any bucket aligned on hours):
    the hour buckets hold their sums."""
    return [w for w in configured_windows().values() if w.bucket_seconds % HOUR == 0]


def _whole_bounds(as_of: dt.datetime) -> list[tuple[int, int]]:
    """Each window of _whole_windows as of `as_of`, as _bounds gives it (on hours)."""
    return _bounds(_whole_windows(), as_of)


def _bounds(windows: list[Window], as_of: dt.datetime) -> list[tuple[int, int]]:
    """Each of `windows` as of `as_of`: the instants from its first bucket's start up to its last
    bucket's end (epoch seconds)."""
    t = int(as_of.timestamp())
    bounds = []
    for w in windows:
        first, last = w.bounds(t)
        bounds.append((first, last + w.bucket_seconds))
    return bounds


def _reach(bounds: list[tuple[int, int]]) -> tuple[int, int]:
    """From the first of `bounds`' starts up to the last of their stops."""
    return min(start for start, _ in bounds), max(stop for _, stop in bounds)


@contextmanager
def _snapshot_begun():
    """A REPEATABLE READ transaction whose snapshot was fixed while every shard's tick lock was held:
    yields the active layout, each shard's (seq, as_of) and the batch log's era, as of the snapshot."""
    _, _, live = active()
    with locks.all_shards_lock(live.shards) as ticks, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        # The first read fixes the snapshot, while no tick is between claim and apply;
        # then the ticks may go on, and this transaction keeps seeing the snapshot.
        states = {s.shard: (s.seq, s.as_of) for s in ShardState.objects.all()}
        number, _, now_live = active()
        era = RankingVersion.objects.filter(number=number).values_list("log_era", flat=True).first() or 0
        if now_live != live:
            # A switch-over re-laid out the shards between the first read and the locks.
            raise VersionError("the shard layout changed as the rebuild began; start it again")
        ticks.release()
        yield live, states, era


def _shards_by_bounds(states: dict[int, tuple[int, dt.datetime | None]]) -> dict[dt.datetime, list[int]]:
    """The shards that have ticked, grouped by the bounds of their windows at the instant their boards
    are exact at (one aggregate each; shards a bucket apart share it), each group under one instant."""
    windows = list(configured_windows().values())
    by_bounds: dict[tuple, tuple[dt.datetime, list[int]]] = {}
    for shard, (_, as_of) in sorted(states.items()):
        if as_of is not None:
            bounds = tuple(w.bounds(int(as_of.timestamp())) for w in windows)
            by_bounds.setdefault(bounds, (as_of, []))[1].append(shard)
    return dict(by_bounds.values())


def _aggregate_into(
    connections,
    load: store.BoardsLoad,
    as_of,
    shards: list[int],
    live: Layout,
    target: Layout,
    tree: Tree,
    hourly: Hourly | None,
) -> int:
    """Write with `load` the boards of the categories of the active layout's `shards` as of `as_of`:
    each window's sales and engagement in the snapshot, less what is pending, counted with `tree`,
    placed by the `target` layout. The windows of whole hours are summed from `hourly`, the hour
    buckets read in the snapshot; the others (a window of minutes) are aggregated by PostgreSQL,
    streamed on the two `connections` side by side, each taking the next one left. Returns how many
    sales were aggregated."""
    whole = _whole_windows()
    fine = [w for w in configured_windows().values() if w not in whole]
    with ThreadPoolExecutor(max_workers=2) as writer, ThreadPoolExecutor(max_workers=1) as side:
        into = functools.partial(BoardStream, load, writer, wanted=set(shards), live=live, target=target)
        streams, sales = [], 0
        if whole and hourly is not None:
            sums, params = _window_sums(whole, as_of)
            owed = {
                SALES_METRICS: _pending_sales(connections[0], sums, {**params, **tree.sql_params()}, live),
                ENGAGEMENT_METRICS: engagement_pending(connections[1], whole, as_of, live),
            }
            bounds = _whole_bounds(as_of)
            totals = hourly.totals(bounds, tree)
            for metrics, owing in owed.items():
                streams.append(into(windows=whole, metrics=metrics, owed=owing))
                streams[-1].take(totals.rows(metrics, owing))
            sales = hourly.sales(*_reach(bounds))
        if fine:
            sales = max(sales, _fine_aggregate(connections, side, into, as_of, live, tree, fine))
        for stream in streams:
            stream.written()
    return sales


def _fine_aggregate(connections, side, into, as_of, live: Layout, tree: Tree, windows: list[Window]) -> int:
    """The boards of `windows` (whose buckets are not whole hours) aggregated by PostgreSQL from the
    raw sales and events, streamed `into` the boards on both `connections`, one in the `side`
    thread; how many sales."""
    sums, params = _window_sums(windows, as_of)
    params.update(tree.sql_params(), parts=PARTS)
    by_part = _aggregate_statement(sums, tree.categories_sql())
    owed = _pending_sales(connections[0], sums, params, live)
    engagement_owed = engagement_pending(connections[1], windows, as_of, live)
    sales = functools.partial(into, windows=windows, metrics=SALES_METRICS, owed=owed)
    engaged = into(windows=windows, metrics=ENGAGEMENT_METRICS, owed=engagement_owed)
    aggregates = [
        *(_Aggregate(sales(), by_part, {**params, "part": part}, counts=True) for part in range(PARTS)),
        _Aggregate(engaged, *engagement_query(windows, as_of, tree)),
    ]
    left = list(aggregates)
    other = side.submit(_aggregates_run, left, connections[1])
    _aggregates_run(left, connections[0])
    other.result()  # re-raises, here, what failed in the other thread
    for aggregate in aggregates:
        aggregate.into.written()
    return sum(aggregate.sales for aggregate in aggregates)


@dataclass
class _Aggregate:
    """One GROUP BY of a rebuild and the boards its rows go to; with `counts`, its first column
    counts the sales of the row, and `sales` adds up those of the rows of `all` (each sale once)."""

    into: BoardStream
    query: str
    params: dict
    counts: bool = False
    sales: int = 0

    def run(self, connection) -> None:
        rows = stream(connection, self.query, self.params)
        self.into.take(self._counted(rows) if self.counts else rows)

    def _counted(self, rows: Iterable[tuple]) -> Iterator[list]:
        for sales, *row in rows:
            if row[0] == ALL:
                self.sales += sales
            yield row


def _aggregates_run(left: list[_Aggregate], connection) -> None:
    """Run on `connection` the aggregates `left`, each taken from the front (threads share the list:
    list.pop is atomic), until none is left."""
    while True:
        try:
            aggregate = left.pop(0)
        except IndexError:
            return
        aggregate.run(connection)


# A sale's units and revenue, a return's negative, summed as doubles: a sum of bigints would be a
# numeric, several times slower to add up and to pass between parallel workers. Exact all the same:
# every partial sum is of one product's sales and refunds, and ingest keeps a product's lifetime
# units and revenue within 2^53 - 1 (rankings.ingest.sales.MAX_PRODUCT_TOTAL) and a refund within
# its sale, so every partial sum is an integer a double holds exactly.
_REVENUE = "(CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END)::float8"


def _window_sums(windows: list[Window], as_of: dt.datetime) -> tuple[list[str], dict]:
    """Every window's units and revenue as of `as_of` (in the order of `windows`, units first), each
    a sum as a double (null where no sale is in the window), and their query parameters, with
    `oldest` and `stop` bounding all windows together.

    The statements that use it read only the sales between `oldest` and `stop`, so a window's bound
    that is one of those is not tested again: the widest window's sums are plain sums, and the
    windows of hour buckets, which all end with the current hour, test their start only. Every test
    left is one a sale of the window passes and a sale outside it fails."""
    bounds = [
        (dt.datetime.fromtimestamp(first, tz=dt.UTC), dt.datetime.fromtimestamp(end, tz=dt.UTC))
        for first, end in _bounds(windows, as_of)
    ]
    oldest, stop = min(start for start, _ in bounds), max(end for _, end in bounds)
    sums = []
    params: dict = {"all": ALL, "oldest": oldest, "stop": stop}
    for i, (start, end) in enumerate(bounds):
        params[f"f{i}"], params[f"t{i}"] = start, end
        tests = ([f"s.counted_at >= %(f{i})s"] if start > oldest else []) + (
            [f"s.counted_at < %(t{i})s"] if end < stop else []
        )
        inside = f" FILTER (WHERE {' AND '.join(tests)})" if tests else ""
        sums.append(f"(sum(s.qty){inside})::float8")
        sums.append(f"sum({_REVENUE}){inside}")
    return sums, params


def _aggregate_statement(sums: list[str], expand: str) -> str:
    """_AGGREGATE adding up `sums` (see _window_sums) by product and list, then by category and product,
    each as a bigint (0 where none), the categories of a list given by `expand`."""
    return _AGGREGATE.format(
        sums=", ".join(f"{each} AS w{i}" for i, each in enumerate(sums)),
        totals=", ".join(f"coalesce(sum(s.w{i}), 0)::bigint" for i in range(len(sums))),
        expand=expand,
    )


def _pending_sales(
    connection, sums: list[str], params: dict, live: Layout
) -> dict[tuple[str, str], list[int]]:
    """(category, product id) -> the window sums of its sales that the shard of its board has not
    claimed yet: none of its boards holds them."""
    owed = {}
    with connection.cursor() as cursor:
        totals = ", ".join(f"coalesce({each}, 0)::bigint" for each in sums)
        cursor.execute(_PENDING.format(sums=totals), params)
        for shard, category, product_id, *values in cursor.fetchall():
            if live.shard_of(live.board_of(category, product_id)) == shard:
                owed[(category, product_id)] = values
    return owed


def version_switch(*, number: int) -> RankingVersion:
    """Make a built (or recently retired) version the active one, atomically for readers."""
    with locks.version_change_lock():
        # Read under the lock: expiry may have deleted the version a moment ago.
        target = RankingVersion.objects.filter(number=number).first()
        if target is None:
            raise VersionError(f"there is no version {number}")
        if target.state not in (RankingVersion.State.READY, RankingVersion.State.RETIRED):
            raise VersionError(
                f"version {number} is {target.state}; only a ready or retired version can be switched to"
            )
        previous, _, live = active()
        layout = version_layout(number)
        old, tree = version_tree(previous), version_tree(number)
        # The categories that count other sales under the target's tree than under the active one's.
        affected = tree_affected(old, tree)
        with locks.all_shards_lock(max(live.shards, layout.shards)):
            if layout == live:
                catch_up_version(number)
                with transaction.atomic():
                    _retree(number, layout, (old, tree), affected)
                    # A tree change, like a re-layout, starts a new era: the batches logged from now
                    # on count the affected categories otherwise than those before.
                    epoch = _activate(number, relayout=bool(affected))
            else:
                epoch = _switch_relayout(number, previous, layout, (old, tree), affected)
            # Only once committed: a pointer naming a switch that rolled back could not be undone.
            # Still under every shard's lock; should this fail, the next tick sets it. The layout goes
            # with the pointer, in one transaction: a reader that finds one finds the other.
            with store.pipeline() as pipe:
                store.shard_layout_set(number, layout.shards, layout.pinned, pipe=pipe)
                store.active_set(number, epoch, pipe=pipe)
    log.info("switched rankings from version %s to %s", previous, number)
    target.refresh_from_db()
    return target


def _retree(number: int, layout: Layout, trees: tuple[Tree, Tree], affected: set[str]) -> None:
    """In the switch's transaction: count the affected categories again under the target's tree
    (buckets and queue, rankings.engine.retree) and rewrite the target's shards that hold them from
    the buckets. The batches the target caught up with counted those categories with the other
    tree; every other board of it is already exact."""
    if not affected:
        return
    gen = version_gen(number)
    old, tree = trees
    for shard in sorted(tree_recount(layout=layout, old=old, tree=tree, affected=affected)):
        ShardState.objects.get_or_create(shard=shard)  # a shard that never ticked: empty boards
        shard_rebuild(shard=shard, version=number, gen=gen)


def _activate(number: int, *, relayout: bool) -> int:
    """In the caller's transaction: retire the active version and make `number` active with the next
    switch number (returned), its history carried on with the hours ticked since it was built;
    after a re-layout, both follow the batch log of the era it starts."""
    now = timezone.now()
    history_carry(source=active().number, target=number)
    epoch = 1 + max(RankingVersion.objects.values_list("switch_epoch", flat=True), default=0)
    retired = RankingVersion.objects.filter(state=RankingVersion.State.ACTIVE)
    activated = RankingVersion.objects.filter(number=number)
    if relayout:
        retired.update(log_era=epoch)
        activated.update(log_era=epoch)
    retired.update(state=RankingVersion.State.RETIRED, retired_at=now)
    activated.update(state=RankingVersion.State.ACTIVE, activated_at=now, retired_at=None, switch_epoch=epoch)
    return epoch


def _switch_relayout(
    number: int, previous: int, layout: Layout, trees: tuple[Tree, Tree], affected: set[str]
) -> int:
    """Switch to a version laid out otherwise; the caller holds every shard's lock of both layouts.

    Every shard is settled at one instant (its recorded batches applied, its queue claimed), so that
    each new shard's categories stand at the same instant; the target replays what it has not seen;
    then what PostgreSQL keeps by shard number is re-keyed to its layout in the switch's transaction.
    The retired version is told that the new layout's batches start at the target's positions."""
    as_of = (
        ShardState.objects.filter(as_of__isnull=False)
        .order_by("-as_of")
        .values_list("as_of", flat=True)
        .first()
    )
    try:
        shards_settle(now=as_of)
    except Exception as error:
        raise VersionError(
            f"the shards could not all be brought to one instant; nothing switched: {error}"
        ) from error
    catch_up_version(number)
    gen = version_gen(number)
    positions = {}
    for shard in range(layout.shards):
        positions[shard] = int(store.shard_state(number, shard).get("seq", 0))
        if as_of is not None and not store.shard_touch(
            version=number, shard=shard, seq=positions[shard], as_of=as_of.timestamp(), gen=gen
        ):
            raise VersionError(f"version {number} lost shard {shard} in Redis")
    _, _, live = active()
    previous_gen = store.generation_get(previous)
    for shard in range(live.shards if previous_gen else 0):
        store.shard_sources_set(
            version=previous, shard=shard, gen=previous_gen, sources=positions, replace=True
        )
    try:
        with transaction.atomic():
            state_rekey(layout=layout, previous=live, positions=positions, as_of=as_of)
            _retree(number, layout, trees, affected)
            return _activate(number, relayout=True)
    except OperationalError as error:  # the layout lock was not granted in time
        raise VersionError(
            f"ingest held the shard layout too long; nothing switched, try again: {error}"
        ) from error


def versions_fail_abandoned() -> list[int]:
    """Mark failed the builds whose process died (nobody holds their build lock)."""
    failed = []
    for number in RankingVersion.objects.filter(state=RankingVersion.State.BUILDING).values_list(
        "number", flat=True
    ):
        with locks.build_try_lock(number) as abandoned:
            if not abandoned:
                continue
            RankingVersion.objects.filter(number=number, state=RankingVersion.State.BUILDING).update(
                state=RankingVersion.State.FAILED, message="failed: the rebuild's process stopped"
            )
            store.version_delete(number)
            history_delete(number)
            failed.append(number)
    return failed


def versions_expire(*, now: dt.datetime | None = None) -> list[int]:
    """Delete the versions nobody can switch to any more; return their numbers.

    Deleted: a retired version past the grace period (the latest retired one
    is what a switch-back needs, so it too is kept for the grace period, and
    no longer), and a ready version never switched to, past its keep. Never
    the active version: the choice is made and carried out under the lock a
    switch-over takes, so no switch can make a chosen version active
    meanwhile. Also deleted: whatever Redis still holds of failed or deleted
    versions, and temporary boards without a TTL.
    """
    now = now or timezone.now()
    versions_fail_abandoned()
    grace = dt.timedelta(seconds=rankings_settings.VERSION_GRACE_SECONDS)
    keep = dt.timedelta(seconds=rankings_settings.VERSION_READY_KEEP_SECONDS)
    State = RankingVersion.State
    with locks.version_change_lock():
        # Both pointers: PostgreSQL's decides, and Redis's is what readers follow until they agree.
        kept = {active().number, store.served_version(fresh=True)}
        expired = list(
            RankingVersion.objects.filter(
                Q(state=State.RETIRED, retired_at__lt=now - grace)
                | Q(state=State.READY, built_at__lt=now - keep)
            )
            .exclude(number__in=kept)
            .order_by("number")
            .values_list("number", flat=True)
        )
        for number in expired:
            # Marked first: should the deletion stop half-way, nobody switches to what is left.
            RankingVersion.objects.filter(number=number).update(state=State.DELETED)
            store.version_delete(number)
            history_delete(number)
        present, leaked = store.keyspace_survey()
        leftovers = RankingVersion.objects.filter(
            number__in=present - kept, state__in=(State.FAILED, State.DELETED)
        ).values_list("number", flat=True)
        for number in leftovers:
            log.warning("deleting what Redis still held of version %s", number)
            store.version_delete(number)
        # A temporary board is given its TTL by the command after the one that creates it, so one
        # without is a leak (or, rarely, one caught in between: its rebuild then fails and is retried).
        store.keys_delete(leaked)
    return expired

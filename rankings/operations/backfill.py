"""Versions: rebuild every board from raw sales into a new version, compare, switch, expire.

A rebuild never writes the active version. It takes one consistent snapshot
(REPEATABLE READ, begun while every shard's tick lock is held, so the
snapshot sits exactly between two batches of each shard), lets PostgreSQL
aggregate the raw sales in one GROUP BY, writes the new version's boards,
then catches up by replaying the batches the ticks committed since the
snapshot. Those batches are the very changes the active version received, so
the new version reaches the same sequence number with the same content.

A switch-over holds every shard's lock, brings the target version up to the
last batch, and then changes the one key readers consult: a reader sees the
old version or the new one, each whole.
"""

import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from psycopg import sql

from rankings.conf import METRICS, rankings_settings
from rankings.engine import locks, store
from rankings.engine.aggregate import batch_replay
from rankings.engine.shards import ALL, shard_count, shard_of, version_shards
from rankings.engine.windows import Window
from rankings.models import Batch, RankingVersion, ShardState

log = logging.getLogger(__name__)

# Memory for the rebuild's GROUP BY (one per distinct category and product):
# enough to hash millions of groups instead of sorting them on disk.
AGGREGATE_WORK_MEM = "512MB"

Progress = Callable[[float, str], None]


class VersionError(Exception):
    pass


@dataclass
class BoardComparison:
    window: str
    metric: str
    category: str
    live_total: int
    new_total: int
    live_top: list[tuple[str, int]]
    new_top: list[tuple[str, int]]

    @property
    def equal(self) -> bool:
        return self.live_total == self.new_total and self.live_top == self.new_top


def _nothing(progress: float, message: str) -> None:
    pass


# Where each phase of a build starts on its progress bar (0…1): aggregating the
# raw sales takes most of a rebuild's time, writing the boards most of the rest.
PROGRESS_SNAPSHOT = 0.02  # taking the snapshot and aggregating it
PROGRESS_WRITE = 0.6  # writing the boards, shard by shard …
PROGRESS_WRITE_SPAN = 0.3  # … over this much of the bar
PROGRESS_CATCH_UP = 0.92  # replaying the batches ticked since the snapshot
PROGRESS_DONE = 1.0


@dataclass
class _Snapshot:
    """What a build read in one consistent snapshot of the raw sales."""

    # shard -> (its batch sequence number, the instant its boards are exact at), as of the snapshot
    positions: dict[int, tuple[int, float]]
    # shard -> board (window, metric, category) -> product id -> score
    boards: dict[int, dict]
    sales: int


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


def version_build(*, activate: bool = False, progress: Progress | None = None) -> RankingVersion:
    """Rebuild every board from raw sales into a new version; optionally switch to it."""
    versions_fail_abandoned()
    number = (RankingVersion.objects.order_by("-number").values_list("number", flat=True).first() or 1) + 1
    # Built with the active version's count (changing it is a reshard, not a rebuild).
    shards = shard_count()
    version = RankingVersion.objects.create(number=number, state=RankingVersion.State.BUILDING, shards=shards)
    with locks.build_lock(number):
        try:
            _build(number, shards, _BuildProgress(number, progress or _nothing))
        except BaseException as error:
            _build_failed(number, error)
            raise
    if activate:
        version_switch(number=number)
    version.refresh_from_db()
    return version


def _build(number: int, shards: int, report: _BuildProgress) -> None:
    """Snapshot and aggregate the raw sales, write the boards, catch up; the version is then ready."""
    report(PROGRESS_SNAPSHOT, "taking a snapshot of the raw sales")
    snapshot = _snapshot_aggregate(shards)
    report.sales = snapshot.sales
    report(PROGRESS_WRITE, f"aggregated {snapshot.sales:,} raw sales; writing boards")
    _write_boards(number, shards, snapshot, report)
    report(PROGRESS_CATCH_UP, "catching up with the batches ticked since the snapshot")
    for shard in range(shards):
        _catch_up(number, shard)
    RankingVersion.objects.filter(number=number).update(
        state=RankingVersion.State.READY, built_at=timezone.now()
    )
    report(PROGRESS_DONE, "ready")


def _write_boards(number: int, shards: int, snapshot: _Snapshot, report: _BuildProgress) -> None:
    """Replace each shard's boards of the version with the snapshot's, one shard at a time."""
    gen = store.generation(number)
    store.shard_count_set(number, shards)
    for shard in range(shards):
        seq, as_of = snapshot.positions[shard]
        store.shard_replace(
            version=number, shard=shard, seq=seq, as_of=as_of, gen=gen, boards=snapshot.boards.pop(shard, {})
        )
        written = PROGRESS_WRITE + PROGRESS_WRITE_SPAN * (shard + 1) / shards
        report(written, f"wrote shard {shard + 1} of {shards}")


def _build_failed(number: int, error: BaseException) -> None:
    """Mark the version failed, with the reason, and delete what Redis holds of it."""
    RankingVersion.objects.filter(number=number).update(
        state=RankingVersion.State.FAILED, message=f"failed: {error!r}"[:2000]
    )
    store.version_delete(number)


# Every sale counts in its categories and in `all`: two plain GROUP BYs, with no
# join to the catalogue or the work queue, run several times faster than one
# over categories || 'all' that is joined to both; and on two connections that
# share the snapshot, they run side by side.
_AGGREGATE_CATEGORIES = """
SELECT u.category, s.product_id, {sums}
FROM rankings_sale s CROSS JOIN LATERAL unnest(s.categories) AS u(category)
WHERE s.counted_at >= %(oldest)s AND s.counted_at < %(stop)s
GROUP BY 1, 2
"""
_AGGREGATE_ALL = """
SELECT %(all)s, s.product_id, {sums}
FROM rankings_sale s
WHERE s.counted_at >= %(oldest)s AND s.counted_at < %(stop)s
GROUP BY 2
"""

# Sales a shard has not claimed yet are in none of its boards: their part is
# subtracted afterwards (the queue is short, so this is a small query).
_PENDING = """
SELECT p.shard, u.category, s.product_id, {sums}
FROM rankings_pendingsale p JOIN rankings_sale s ON s.id = p.sale_id AND s.counted_at = p.counted_at
CROSS JOIN LATERAL unnest(s.categories || ARRAY[%(all)s]::varchar[]) AS u(category)
WHERE p.counted_at >= %(oldest)s AND p.counted_at < %(stop)s
  AND s.counted_at >= %(oldest)s AND s.counted_at < %(stop)s
GROUP BY 1, 2, 3
"""


def _snapshot_aggregate(shards_count: int) -> _Snapshot:
    """Per shard (of `shards_count`): (seq, instant) of the snapshot, and every board as of that instant."""
    with locks.all_shards_lock(shards_count) as ticks, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        # The first read fixes the snapshot, while no tick is between claim and apply;
        # then the ticks may go on, and this transaction keeps seeing the snapshot.
        states = {s.shard: (s.seq, s.as_of) for s in ShardState.objects.all()}
        ticks.release()
        with connection.cursor() as cursor:
            # One big GROUP BY: let it hash in memory rather than sort on disk,
            # and skip JIT compilation, which costs more than it saves here.
            cursor.execute(f"SET LOCAL work_mem = '{AGGREGATE_WORK_MEM}'")
            cursor.execute("SET LOCAL jit = off")
        positions = {}
        for shard in range(shards_count):
            seq, as_of = states.get(shard, (0, None))
            positions[shard] = (seq, as_of.timestamp() if as_of else 0.0)
        boards: dict[int, dict] = defaultdict(lambda: defaultdict(dict))
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_export_snapshot()")
            (snapshot,) = cursor.fetchone()
            with _snapshot_connection(snapshot) as helper:
                sales = helper.execute("SELECT count(*) FROM rankings_sale").fetchone()[0]
                for as_of, shards in _shards_by_instant(states).items():
                    _aggregate_into(cursor, helper, boards, as_of, shards, shards_count)
    return _Snapshot(positions=positions, boards=boards, sales=sales)


def _shards_by_instant(states: dict[int, tuple[int, dt.datetime | None]]) -> dict[dt.datetime, list[int]]:
    """The shards that have ticked, grouped by the instant their boards are exact at (one aggregate each)."""
    by_instant: dict[dt.datetime, list[int]] = defaultdict(list)
    for shard, (_, as_of) in states.items():
        if as_of is not None:
            by_instant[as_of].append(shard)
    return by_instant


@contextmanager
def _snapshot_connection(snapshot: str):
    """A second connection that sees exactly the snapshot `snapshot` (exported by the caller)."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params) as helper:
        helper.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        helper.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
        helper.execute(f"SET LOCAL work_mem = '{AGGREGATE_WORK_MEM}'")
        helper.execute("SET LOCAL jit = off")
        yield helper
        helper.rollback()


def _aggregate_into(
    cursor, helper, boards: dict[int, dict], as_of: dt.datetime, shards: list[int], shards_count: int
) -> None:
    """Fill in `boards` of `shards` as of `as_of`: each window's sales in the snapshot, less those pending."""
    windows = list(rankings_settings.windows.values())
    sums, params = _window_sums(windows, as_of)
    totals = _sale_totals(cursor, helper, sums, params)
    _subtract_pending(cursor, totals, sums, params, shards_count)
    _fill_boards(boards, totals, windows, set(shards), shards_count)


def _window_sums(windows: list[Window], as_of: dt.datetime) -> tuple[str, dict]:
    """The select list of every window's units and revenue as of `as_of` (in the order of `windows`,
    units first), and its query parameters, with `oldest` and `stop` bounding all windows together."""
    t = int(as_of.timestamp())
    sums, starts, stops = [], [], []
    params: dict = {"all": ALL}
    for i, w in enumerate(windows):
        first, last = w.bounds(t)
        params[f"f{i}"] = dt.datetime.fromtimestamp(first, tz=dt.UTC)
        params[f"t{i}"] = dt.datetime.fromtimestamp(last + w.bucket_seconds, tz=dt.UTC)
        starts.append(params[f"f{i}"])
        stops.append(params[f"t{i}"])
        inside = f"s.counted_at >= %(f{i})s AND s.counted_at < %(t{i})s"
        sums.append(f"coalesce(sum(s.qty) FILTER (WHERE {inside}), 0)")
        sums.append(
            "coalesce(sum(CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END)"
            f" FILTER (WHERE {inside}), 0)::bigint"
        )
    params.update(oldest=min(starts), stop=max(stops))
    return ", ".join(sums), params


def _sale_totals(cursor, helper, sums: str, params: dict) -> dict[tuple[str, str], list[int]]:
    """(category, product id) -> its window sums: the categories' GROUP BY on `cursor`, while the
    board of every sale's runs on `helper`, a second connection on the same snapshot."""
    totals: dict[tuple[str, str], list[int]] = {}
    with ThreadPoolExecutor(max_workers=1) as pool:
        board_of_all = pool.submit(
            lambda: helper.execute(_AGGREGATE_ALL.format(sums=sums), params).fetchall()
        )
        cursor.execute(_AGGREGATE_CATEGORIES.format(sums=sums), params)
        while rows := cursor.fetchmany(20_000):
            for category, product_id, *values in rows:
                totals[(category, product_id)] = values
        every_sale = board_of_all.result()  # re-raises, here, what failed in the other thread
    for category, product_id, *values in every_sale:
        totals[(category, product_id)] = values
    return totals


def _subtract_pending(cursor, totals: dict, sums: str, params: dict, shards_count: int) -> None:
    """Take out of `totals` the sales a shard has not claimed yet: none of its boards holds them."""
    cursor.execute(_PENDING.format(sums=sums), params)
    for shard, category, product_id, *values in cursor.fetchall():
        counted = totals.get((category, product_id))
        if counted is not None and shard_of(category, shards_count) == shard:
            totals[(category, product_id)] = [a - b for a, b in zip(counted, values, strict=True)]


def _fill_boards(
    boards: dict[int, dict], totals: dict, windows: list[Window], wanted: set[int], shards_count: int
) -> None:
    """Put each positive total on its board, for the categories of the `wanted` shards only."""
    names = [(w.name, metric) for w in windows for metric in METRICS]
    # category -> its boards, in the order of `names`; a category of a shard not wanted has none
    boards_of: dict[str, list[dict]] = {}
    for category in dict.fromkeys(category for category, _ in totals):
        shard = shard_of(category, shards_count)
        if shard in wanted:
            boards_of[category] = [boards[shard][(window, metric, category)] for window, metric in names]
    for (category, product_id), values in totals.items():
        category_boards = boards_of.get(category)
        if category_boards is None:
            continue
        for board, value in zip(category_boards, values, strict=True):
            if value > 0:
                board[product_id] = value
    for shard_boards in boards.values():  # boards of categories without a positive score stay out
        for key in [key for key, scores in shard_boards.items() if not scores]:
            del shard_boards[key]


def _catch_up(number: int, shard: int, *, gen: str | None = None) -> int:
    """Replay the logged batches the version has not seen, in order; return how many."""
    gen = gen or store.generation_get(number)
    if gen is None:
        raise VersionError(f"version {number} is not in Redis any more (lost or deleted)")
    state = store.shard_state(number, shard)
    if state.get("gen") != gen:
        raise VersionError(f"version {number} lost shard {shard} in Redis")
    current = int(state.get("seq", 0))
    # The shard's row first: a batch commits together with it, so every batch up
    # to the seq read here is visible below (unless the log has dropped it).
    latest_seq, latest_as_of = ShardState.objects.filter(shard=shard).values_list("seq", "as_of").first() or (
        0,
        None,
    )
    replayed = 0
    batches = Batch.objects.filter(shard=shard, seq__gt=current, seq__lte=latest_seq).order_by("seq")
    for batch in batches.iterator():
        if batch.seq != current + 1:
            break
        if batch_replay(batch=batch, version=number, gen=gen) < 0:
            raise VersionError(f"shard {shard}: version {number} refused batch {batch.seq}")
        current += 1
        replayed += 1
    if current < latest_seq:
        raise VersionError(
            f"shard {shard}: batch {current + 1} is no longer logged; rebuild instead of catching up"
        )
    if latest_as_of is not None:
        store.shard_touch(version=number, shard=shard, seq=current, as_of=latest_as_of.timestamp(), gen=gen)
    return replayed


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
        with locks.all_shards_lock(shard_count()):
            for shard in range(target.shards):
                _catch_up(number, shard)
            previous = RankingVersion.active_number()
            with transaction.atomic():
                now = timezone.now()
                RankingVersion.objects.filter(state=RankingVersion.State.ACTIVE).update(
                    state=RankingVersion.State.RETIRED, retired_at=now
                )
                if not RankingVersion.objects.filter(number=previous).exists():
                    RankingVersion.objects.create(
                        number=previous,
                        state=RankingVersion.State.RETIRED,
                        retired_at=now,
                        shards=target.shards,
                    )
                epoch = 1 + max(RankingVersion.objects.values_list("switch_epoch", flat=True), default=0)
                RankingVersion.objects.filter(number=number).update(
                    state=RankingVersion.State.ACTIVE, activated_at=now, retired_at=None, switch_epoch=epoch
                )
            # Only once committed: a pointer naming a switch that rolled back could not be undone.
            # Still under every shard's lock; should this fail, the next tick sets it. The count goes
            # with the pointer, in one transaction: a reader that finds one finds the other.
            with store.pipeline() as pipe:
                store.shard_count_set(number, target.shards, pipe=pipe)
                store.active_set(number, epoch, pipe=pipe)
    log.info("switched rankings from version %s to %s", previous, number)
    target.refresh_from_db()
    return target


def versions_compare(*, number: int, top_n: int = 100) -> list[BoardComparison]:
    """Each board's top-N and size in the active version against version `number`, at the same batch."""
    live = RankingVersion.active_number()
    comparisons = []
    for shard in range(version_shards(number)):
        with locks.shard_lock(shard):
            _catch_up(number, shard)
            live_heads = store.boards_heads(live, shard, top_n)
            new_heads = store.boards_heads(number, shard, top_n)
        for board in sorted(live_heads.keys() | new_heads.keys()):
            live_total, live_top = live_heads.get(board, (0, []))
            new_total, new_top = new_heads.get(board, (0, []))
            comparisons.append(BoardComparison(*board, live_total, new_total, live_top, new_top))
    return comparisons


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
        active = {RankingVersion.active_number(), store.active_version(fresh=True)}
        expired = list(
            RankingVersion.objects.filter(
                Q(state=State.RETIRED, retired_at__lt=now - grace)
                | Q(state=State.READY, built_at__lt=now - keep)
            )
            .exclude(number__in=active)
            .order_by("number")
            .values_list("number", flat=True)
        )
        for number in expired:
            # Marked first: should the deletion stop half-way, nobody switches to what is left.
            RankingVersion.objects.filter(number=number).update(state=State.DELETED)
            store.version_delete(number)
        present, leaked = store.keyspace_survey()
        leftovers = RankingVersion.objects.filter(
            number__in=present - active, state__in=(State.FAILED, State.DELETED)
        ).values_list("number", flat=True)
        for number in leftovers:
            log.warning("deleting what Redis still held of version %s", number)
            store.version_delete(number)
        # A temporary board is given its TTL by the command after the one that creates it, so one
        # without is a leak (or, rarely, one caught in between: its rebuild then fails and is retried).
        store.keys_delete(leaked)
    return expired

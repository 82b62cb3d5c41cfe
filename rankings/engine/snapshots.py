"""Hourly snapshots: the first SNAPSHOT_DEPTH ranks of every board of the snapshot windows (1d, 7d)
as of each UTC hour boundary, for movers, rank arrows and rank history (DESIGN §2c).

A snapshot of hour H is the board as the engine stood at H: the sales that ticks up to H
counted, and of the sales a later tick claims, those counted at or before H. So a tick that
crosses H, seconds or hours late, steps: it first claims only the pending sales counted at or
before H and brings the shard to H, then records H's snapshots, then goes on to its own instant
(aggregate._tick_shard). A sale after H never gets into H's snapshot however late the tick runs;
a late sale of before H that arrives after the snapshot was taken does not change it (it was not
on the board at H), exactly as it would not have been on a board read at H.

The snapshot is computed from the shard's buckets with the tick's own bucket sums
(aggregate._BUCKET_SUMS, one column per metric of METRICS, so a metric added there is
snapshotted too), not read from Redis: when nothing of the hour is pending, the shard's
buckets already hold exactly the board as of H, and the tick need not step at all. Hours with
nothing pending therefore cost one query per window, which keeps a tick that crosses days of
boundaries (a catch-up) cheap.

A mark per shard and hour, written in the snapshot's transaction, says the hour is done; a tick
resumes after its shard's last mark, so a tick killed between two boundaries leaves the next one
to take the rest, and an hour is never recorded twice from two different states. Hours more than
SNAPSHOT_KEEP_SECONDS behind the tick's instant are not taken (they would be pruned at once).
"""

import bisect
import datetime as dt
import math

from django.db import connection, transaction
from django.db.models import Max

from rankings.conf import METRICS, rankings_settings
from rankings.engine.shards import Layout
from rankings.models import Snapshot, SnapshotMark

HOUR = 3600  # seconds: snapshots are taken at every UTC hour boundary


def snapshot_windows() -> list[str]:
    return [name for name in rankings_settings.SNAPSHOT_WINDOWS if name in rankings_settings.windows]


def instant(t: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.UTC)


def boundaries(*, shard: int, as_of: dt.datetime | None, now: dt.datetime) -> list[int]:
    """The hours (epoch seconds) a tick of `shard` from `as_of` to `now` snapshots, oldest first:
    every boundary H with as_of <= H <= now not yet marked (the shard's instant may stand at H
    itself when a tick was killed before H's snapshot), and none before the first tick."""
    now_t = now.timestamp()
    start = math.ceil((as_of or now).timestamp() / HOUR) * HOUR
    start = max(start, math.ceil((now_t - rankings_settings.SNAPSHOT_KEEP_SECONDS) / HOUR) * HOUR)
    stop = math.floor(now_t / HOUR) * HOUR
    if start > stop:
        return []  # most ticks: no hour crossed, no query
    last = SnapshotMark.objects.filter(shard=shard).aggregate(last=Max("at"))["last"]
    if last is not None:
        start = max(start, int(last.timestamp()) + HOUR)
    return list(range(start, stop + 1, HOUR))


def take_crossed(*, shard: int, layout: Layout, as_of: dt.datetime | None, now: dt.datetime, step) -> None:
    """Snapshot every hour a tick of `shard` from `as_of` to `now` crosses. Before an hour with
    sales pending that count by then, `step(at)` brings the shard to it with those sales (and no
    other); an hour with none is taken from the buckets as they stand."""
    hours = boundaries(shard=shard, as_of=as_of, now=now)
    if not hours:
        return
    pending = _pending_first(shard)
    starts = _bucket_starts(shard, hours[0], hours[-1])
    for at in hours:
        if pending is not None and pending <= at:
            step(instant(at))
            pending = _pending_first(shard)
            starts = _bucket_starts(shard, at, hours[-1])
        take(shard=shard, layout=layout, at=at, starts=starts)


def _pending_first(shard: int) -> float | None:
    """When the earliest sale or engagement event waiting in the shard's queues counts (epoch
    seconds); None: none waits."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT least((SELECT min(counted_at) FROM rankings_pendingsale WHERE shard = %s),"
            " (SELECT min(ts) FROM rankings_pendingengagement WHERE shard = %s))",
            [shard, shard],
        )
        first = cursor.fetchone()[0]
    return first.timestamp() if first is not None else None


def _bucket_starts(shard: int, first_hour: int, last_hour: int) -> list[int]:
    """The starts of the shard's buckets of the snapshot windows that the hours first…last read,
    ascending: an hour whose windows hold none is recorded without a query."""
    sizes, span = set(), 0
    for name in snapshot_windows():
        window = rankings_settings.windows[name]
        sizes.add(window.bucket_seconds)
        span = max(span, (window.buckets - 1) * window.bucket_seconds)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT start FROM rankings_bucket WHERE shard = %s AND size = ANY(%s)"
            " AND start BETWEEN %s AND %s ORDER BY start",
            [shard, sorted(sizes), first_hour - span, last_hour],
        )
        return [start for (start,) in cursor.fetchall()]


# Each board's first ranks, ranked in PostgreSQL: a shard of a thousand categories sends a row per
# board rather than one per (board, product). Ranking order: score descending, then the product id
# in byte order (COLLATE "C"), as on the boards.
_TOP = """
WITH sums (category, product_id, {aliases}) AS ({sums}),
scored AS (
    SELECT category, product_id, unnest(%s::text[]) AS metric, unnest(ARRAY[{columns}]) AS score FROM sums
),
ranked AS (
    SELECT metric, category, product_id,
           row_number() OVER (PARTITION BY metric, category ORDER BY score DESC, product_id COLLATE "C") AS n
    FROM scored WHERE score > 0
)
SELECT metric, category, array_agg(product_id ORDER BY n) FROM ranked WHERE n <= %s GROUP BY metric, category
"""

_summed: dict[str, tuple[str, ...]] = {}


def _summed_metrics(cursor, sums: str) -> tuple[str, ...]:
    """The metrics the bucket sums give, in their column order (after category and product): those
    of METRICS their columns cover. A metric whose counts live in buckets of its own adds its sums
    beside these, and until then is not snapshotted."""
    if sums not in _summed:
        cursor.execute(f"SELECT * FROM ({sums}) AS q LIMIT 0", [0, 0, 0, 0])
        _summed[sums] = tuple(METRICS[: len(cursor.description) - 2])
    return _summed[sums]


def take(*, shard: int, layout: Layout, at: int, starts: list[int] | None = None) -> int:
    """Record the snapshots of every board of the shard as of hour `at` from its buckets and mark
    the hour, in one transaction; returns how many boards were recorded. `starts`, when given, are
    the starts of the shard's buckets around the hour (_bucket_starts): a window holding none of
    them is empty. A board recorded again (a reshard's new shard retaking the switch's hour) is
    replaced."""
    from rankings.engine.aggregate import _BUCKET_SUMS  # the tick's own sums, metric for metric

    depth = rankings_settings.SNAPSHOT_DEPTH
    when = instant(at)
    rows = []
    with connection.cursor() as cursor:
        metrics = _summed_metrics(cursor, _BUCKET_SUMS)
        top = _TOP.format(
            sums=_BUCKET_SUMS,
            aliases=", ".join(f"m{k}" for k in range(len(metrics))),
            columns=", ".join(f"m{k}" for k in range(len(metrics))),
        )
        for name in snapshot_windows():
            window = rankings_settings.windows[name]
            first, last = window.bounds(at)
            if starts is not None and bisect.bisect_left(starts, first) == bisect.bisect_right(starts, last):
                continue
            cursor.execute(top, [shard, window.bucket_seconds, first, last, list(metrics), depth])
            rows.extend(
                Snapshot(at=when, window=name, metric=metric, category=category, products=products)
                for metric, category, products in cursor.fetchall()
            )
    with transaction.atomic():
        if rows:
            Snapshot.objects.bulk_create(
                rows,
                update_conflicts=True,
                unique_fields=["category", "window", "metric", "at"],
                update_fields=["products"],
            )
        SnapshotMark.objects.bulk_create([SnapshotMark(shard=shard, at=when)], ignore_conflicts=True)
    return len(rows)


def snapshots_forget_after(instant_: dt.datetime) -> None:
    """Delete the snapshots and marks of the hours at or after `instant_` (a clock reset back to it:
    the next ticks take them again from the boards as they then stand)."""
    Snapshot.objects.filter(at__gte=instant_).delete()
    SnapshotMark.objects.filter(at__gte=instant_).delete()


def snapshots_prune(now: dt.datetime) -> int:
    """Delete the snapshots and marks more than SNAPSHOT_KEEP_SECONDS behind the engine's clock."""
    from rankings.engine.prune import _older_than

    keep = rankings_settings.SNAPSHOT_KEEP_SECONDS
    deleted = _older_than(Snapshot._meta.db_table, "at", keep, now)
    _older_than(SnapshotMark._meta.db_table, "at", keep, now)
    return deleted


def snapshots_summary() -> dict:
    """For the status page: the latest hour snapshotted, the rows kept (PostgreSQL's estimate, free
    to read) and the bytes they take on disk, indexes and compressed storage included."""
    last = SnapshotMark.objects.aggregate(last=Max("at"))["last"]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid) FROM pg_class c"
            " WHERE c.oid = %s::regclass",
            [Snapshot._meta.db_table],
        )
        rows, size = cursor.fetchone()
    return {"lastAt": last, "rows": rows, "bytes": size}

"""Hourly snapshots: the first SNAPSHOT_DEPTH ranks of every board of the snapshot windows (1d, 7d)
as of each UTC hour boundary, for movers, rank arrows and rank history (docs/api.md, "What moves").

A snapshot of hour H is the board as the engine stood at H: the sales that ticks up to H
counted, and of the sales a later tick claims, those counted at or before H. So a tick that
crosses H, seconds or hours late, steps: it first claims only the pending sales counted at or
before H and brings the shard to H, then records H's snapshots, then goes on to its own instant
(batches.tick_shard). A sale after H never gets into H's snapshot however late the tick runs;
a late sale of before H that arrives after the snapshot was taken does not change it (it was not
on the board at H), exactly as it would not have been on a board read at H.

The snapshot is computed from the shard's buckets with the tick's own bucket sums
(buckets.bucket_sums, one column per metric of METRICS, so a metric added there is
snapshotted too), not read from Redis: when nothing of the hour is pending, the shard's
buckets already hold exactly the board as of H, and the tick need not step at all. Consecutive
hours with nothing pending between them are taken together, up to HOURS_PER_TAKE at a time: one
statement ranks and writes them all, of every window, in PostgreSQL, which keeps a tick that crosses
days of boundaries (a catch-up) cheap.

The same transaction judges the rank alerts of the shard's boards at each hour it records
(rankings/engine/alerts.py), so a firing exists exactly when its hour's snapshots do.

A mark per shard and hour, written in the snapshots' transaction, says the hour is done; a tick
resumes after its shard's last mark, so a tick killed between two boundaries leaves the next one
to take the rest, and an hour is never recorded twice from two different states. Hours more than
SNAPSHOT_KEEP_SECONDS behind the tick's instant are not taken (they would be pruned at once).
"""

import datetime as dt
import math

from django.db import connection, transaction
from django.db.models import Max, Min

from rankings.conf import METRICS, rankings_settings
from rankings.engine.alerts import alerts_judge
from rankings.engine.buckets import bucket_sums
from rankings.engine.shards import Layout
from rankings.engine.windows import configured_windows
from rankings.models import Snapshot, SnapshotHour, SnapshotMark

HOUR = 3600  # seconds: snapshots are taken at every UTC hour boundary
# Hours taken in one transaction at most: a catch-up killed midway loses no more than these.
HOURS_PER_TAKE = 24


def snapshot_windows() -> list[str]:
    return [name for name in rankings_settings.SNAPSHOT_WINDOWS if name in configured_windows()]


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


def take_crossed(
    *, shard: int, layout: Layout, version: int, as_of: dt.datetime | None, now: dt.datetime, step
) -> None:
    """Snapshot, for `version`, every hour a tick of `shard` from `as_of` to `now` crosses. Before an hour with
    sales pending that count by then, `step(at)` brings the shard to it with those sales (and no
    other); the hours before it are taken first, from the buckets as they stand."""
    hours = boundaries(shard=shard, as_of=as_of, now=now)
    if not hours:
        return
    pending = _pending_first(shard)
    run: list[int] = []  # hours the buckets as they stand answer
    for at in hours:
        if pending is not None and pending <= at:
            _take_run(shard=shard, layout=layout, version=version, hours=run)
            run = []
            step(instant(at))
            pending = _pending_first(shard)
        run.append(at)
    _take_run(shard=shard, layout=layout, version=version, hours=run)


def _take_run(*, shard: int, layout: Layout, version: int, hours: list[int]) -> None:
    for i in range(0, len(hours), HOURS_PER_TAKE):
        take(shard=shard, layout=layout, version=version, hours=hours[i : i + HOURS_PER_TAKE])


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


# Each board's first ranks as of each hour, ranked and written by PostgreSQL: a shard of a thousand
# categories sends no row at all. The sums are the tick's (bucket_sums), each hour's over the
# buckets of its own window: one row of `hours` per window and hour. Ranking order: score
# descending, then the product id in byte order (COLLATE "C"), as on the boards. A board recorded
# again (a reshard's new shard retaking the switch's hour) is replaced.
_TAKE = """
WITH hours (name, size, at, first, last) AS (
    SELECT * FROM unnest(%s::text[], %s::integer[], %s::bigint[], %s::bigint[], %s::bigint[])
),
sums (name, at, category, product_id, {aliases}) AS (
    SELECT hours.name, hours.at, q.* FROM hours CROSS JOIN LATERAL ({sums}) AS q
),
scored AS (
    SELECT name, at, category, product_id, unnest(%s::text[]) AS metric, unnest(ARRAY[{aliases}]) AS score
    FROM sums
),
ranked AS (
    SELECT name, at, metric, category, product_id,
           row_number() OVER (PARTITION BY name, at, metric, category ORDER BY score DESC, product_id COLLATE "C") AS n
    FROM scored WHERE score > 0
)
INSERT INTO {table} (version, at, "window", metric, category, products)
SELECT %s, to_timestamp(at), name, metric, category, string_agg(product_id, ' ' ORDER BY n) FROM ranked WHERE n <= %s
GROUP BY name, at, metric, category
ON CONFLICT (version, category, "window", metric, at) DO UPDATE SET products = excluded.products
"""


def take(*, shard: int, layout: Layout, version: int, hours: list[int]) -> int:
    """Record, as `version`'s, the snapshots of every board of the shard as of each hour of `hours`
    from its buckets, mark the hours and judge the alerts of the shard's boards at each
    (rankings/engine/alerts.py), in one transaction; returns how many boards were recorded."""
    # One row of `hours` per window and hour.
    rows = [(name, configured_windows()[name], at) for name in snapshot_windows() for at in hours]
    bounds = [window.bounds(at) for _, window, at in rows]
    with transaction.atomic(), connection.cursor() as cursor:
        statement = _TAKE.format(
            sums=bucket_sums(size="hours.size", first="hours.first", last="hours.last"),
            aliases=", ".join(f"m{k}" for k in range(len(METRICS))),
            table=Snapshot._meta.db_table,
        )
        cursor.execute(
            statement,
            [
                [name for name, _, _ in rows],
                [window.bucket_seconds for _, window, _ in rows],
                [at for _, _, at in rows],
                [first for first, _ in bounds],
                [last for _, last in bounds],
                shard,
                list(METRICS),
                version,
                rankings_settings.SNAPSHOT_DEPTH,
            ],
        )
        recorded = cursor.rowcount
        SnapshotMark.objects.bulk_create(
            [SnapshotMark(shard=shard, at=instant(at)) for at in hours], ignore_conflicts=True
        )
        SnapshotHour.objects.bulk_create(
            [SnapshotHour(version=version, at=instant(at)) for at in hours], ignore_conflicts=True
        )
        # In the same transaction: each firing exists exactly when its hour's snapshots do.
        alerts_judge(shard=shard, version=version, hours=hours)
    return recorded


def snapshots_forget_after(instant_: dt.datetime) -> None:
    """Delete the snapshots and marks of the hours at or after `instant_` (a clock reset back to it:
    the next ticks take them again from the boards as they then stand)."""
    Snapshot.objects.filter(at__gte=instant_).delete()
    SnapshotHour.objects.filter(at__gte=instant_).delete()
    SnapshotMark.objects.filter(at__gte=instant_).delete()


def snapshots_summary(version: int) -> dict:
    """For the status page: the first and latest hour of `version`'s history, the rows kept (of every
    version: PostgreSQL's estimate, free to read) and the bytes they take on disk, indexes and
    compressed storage included."""
    reach = SnapshotHour.objects.filter(version=version).aggregate(first=Min("at"), last=Max("at"))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid) FROM pg_class c"
            " WHERE c.oid = %s::regclass",
            [Snapshot._meta.db_table],
        )
        rows, size = cursor.fetchone()
    return {"firstAt": reach["first"], "lastAt": reach["last"], "rows": rows, "bytes": size}

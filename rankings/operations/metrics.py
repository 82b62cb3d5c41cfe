"""The figures /metrics serves, read from the shared state (PostgreSQL and Redis) so that every web
process answers alike: totals every process added to, gauges of what the engine holds now.

Every read is bounded whatever the size of the shop: the totals are a few rows each
(rankings.engine.counts), the queues are counted up to PENDING_COUNTED rows, and the shards are
read one row or one Redis hash each (at most 256).
"""

import time
from dataclasses import dataclass, field

from django.db import DatabaseError, connection
from django.db.models import Sum

from rankings.engine import store
from rankings.engine.counts import Histogram, counts_read, histogram_read
from rankings.engine.shards import ALL, Layout, active
from rankings.engine.tick import TICK_SECONDS, TICK_SECONDS_BOUNDS
from rankings.ingest.batch import INGESTED
from rankings.models import PendingEngagement, PendingSale, ShardState, SnapshotMark

# Queue rows a scrape counts at most, of the sales and of the engagement waiting for a tick: a
# healthy queue holds a tick's worth (a few seconds of events) and is counted exactly; a backlog
# shows as at least this many, which is all an alert needs, for about 10 ms of counting a scrape
# (the status page counts ten times as many, once a second while an operator watches it).
PENDING_COUNTED = 10_000  # queue rows


@dataclass
class Figures:
    """What /metrics shows; a source that did not answer leaves its figures out."""

    postgres: bool = False  # PostgreSQL answered
    redis: bool = False  # Redis answered
    ingested: dict[str, int] = field(default_factory=dict)  # "kind:outcome" -> events
    tick_seconds: Histogram | None = None
    # kind (sale, view, wish) -> events waiting for a tick, in at most PENDING_COUNTED queue rows
    pending: dict[str, int] = field(default_factory=dict)
    failing: dict[int, bool] = field(default_factory=dict)  # shard -> its last tick failed
    snapshot_age: float | None = None  # seconds since the hour of the oldest shard's last snapshot
    # seconds since the oldest shard's boards were brought up to date (inf: a shard Redis holds no
    # state for); None before the first tick
    boards_age: float | None = None
    memory: list[store.NodeMemory] = field(default_factory=list)


def metrics_read() -> Figures:
    figures = Figures()
    try:
        _database_read(figures)
        figures.postgres = True
    except DatabaseError:
        pass
    try:
        figures.boards_age = boards_age()
        figures.memory = store.memory_used()
        figures.redis = True
    except store.StoreError:
        pass
    return figures


def _database_read(figures: Figures) -> None:
    layout = active().layout
    figures.ingested = counts_read(INGESTED)
    figures.tick_seconds = histogram_read(TICK_SECONDS, TICK_SECONDS_BOUNDS)
    figures.pending = _pending(layout)
    failures = dict(ShardState.objects.filter(shard__lt=layout.shards).values_list("shard", "failures"))
    figures.failing = {shard: failures.get(shard, 0) > 0 for shard in range(layout.shards)}
    last = _oldest_last_snapshot(layout.shards)
    figures.snapshot_age = time.time() - last if last is not None else None


def _pending(layout: Layout) -> dict[str, int]:
    """Events waiting for a tick, from the queues of `all`'s shards (every event is queued there
    once), counted in at most PENDING_COUNTED rows of each queue: exact below that, at least that
    many above. An engagement row holds the views and wishes of one product and second."""
    shards = layout.shards_of(ALL)
    sales = PendingSale.objects.filter(shard__in=shards)[:PENDING_COUNTED].count()
    engaged = PendingEngagement.objects.filter(shard__in=shards)[:PENDING_COUNTED].aggregate(
        views=Sum("views"), wishes=Sum("wishes")
    )
    return {"sale": sales, "view": engaged["views"] or 0, "wish": engaged["wishes"] or 0}


# Each shard's latest snapshot mark, through the marks' primary key (shard, at): one statement of
# one index probe a shard.
_LAST_MARKS = f"""
SELECT extract(epoch FROM min(last.at)) FROM generate_series(0, %s - 1) AS s (shard)
CROSS JOIN LATERAL (
    SELECT at FROM {SnapshotMark._meta.db_table} m WHERE m.shard = s.shard ORDER BY m.at DESC LIMIT 1
) AS last
"""


def _oldest_last_snapshot(shards: int) -> float | None:
    """The hour (epoch seconds) up to which every shard that has taken snapshots has taken them."""
    with connection.cursor() as cursor:
        cursor.execute(_LAST_MARKS, [shards])
        (last,) = cursor.fetchone()
    return float(last) if last is not None else None


def boards_age() -> float | None:
    """Seconds since the oldest shard's boards were brought up to date, as Redis holds them for the
    readers (inf when a shard has no state there: its boards are not served); None before the first
    tick has laid the version out."""
    version = store.served_version()
    laid_out = store.shard_layout_get(version)
    if laid_out is None:
        return None
    known = store.shards_as_of(version=version, shards=list(range(Layout(*laid_out).shards)))
    if not all(known):
        return float("inf")
    return time.time() - min(as_of for as_of in known if as_of)

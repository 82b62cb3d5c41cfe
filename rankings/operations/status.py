"""The system's health: a liveness answer anyone may see, and the figures an operator sees."""

import datetime as dt
import time

from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.engine.instants import instant
from rankings.engine.shards import ALL, Layout, active
from rankings.engine.snapshots import snapshots_summary
from rankings.engine.tick import shards_failing
from rankings.models import IngestLog, PendingSale, Sale, ShardState, TickLog
from rankings.operations.engagement_status import SOURCE_PREFIX as ENGAGEMENT_SOURCE
from rankings.operations.engagement_status import engagement_status

# Sales per second is averaged over this span.
RATE_SPAN = dt.timedelta(minutes=1)
# Accepted / duplicate / rejected events are added up over this span of the
# ingest log, which keeps only a few days: a sum over every row ever logged
# would grow with the age of the installation.
TOTALS_SPAN = dt.timedelta(days=1)
# The boards are "stale" when the shard holding `all` was last brought up to
# date longer ago than this: ticks run every few seconds, so a minute without
# one means the write path has stopped.
STALE_AFTER = 60  # seconds
# Queue rows a status read counts at most, of the sales and of the engagement waiting for a tick:
# a backlog of millions (a large import) shows as at least this many, and the lag says how far
# behind it is, for the cost of counting this many (a few milliseconds) once a second per process.
PENDING_COUNTED = 100_000  # queue rows


def liveness_read() -> dict:
    """{"status": "ok" | "stale" | "down", "as_of": datetime | None}: how current the boards are,
    from one Redis read.

    No database query, so it answers as long as Redis does.
    """
    try:
        version = store.served_version()
        # The tick writes the count beside the boards; without it there is nothing to serve.
        layout = store.shard_layout_get(version)
        shards = Layout(layout[0], layout[1]).shards_of(ALL) if layout else []
        # A split `all`: as of its oldest part.
        known = [store.shard_as_of(version=version, shard=shard) for shard in shards]
        as_of = min(known) if known and all(known) else None
    except store.StoreError:
        return {"status": "down", "as_of": None}
    if not as_of:
        return {"status": "down", "as_of": None}
    state = "stale" if time.time() - as_of > STALE_AFTER else "ok"
    return {"status": state, "as_of": instant(as_of)}


# Each shard's lowest queued sale, through the queue's primary key (shard, sale): one statement
# however many shards there are.
_FIRST_PENDING = f"""
SELECT min(first.sale_id) FROM generate_series(0, %s - 1) AS s (shard)
CROSS JOIN LATERAL (
    SELECT sale_id FROM {PendingSale._meta.db_table} p WHERE p.shard = s.shard ORDER BY p.sale_id LIMIT 1
) AS first
"""


def _oldest_pending(shards: int) -> dt.datetime | None:
    """When the oldest sale that some shard has yet to count was received.

    Every shard, not only `all`'s: a shard whose ticks stopped (a queue no worker consumes) holds
    sales that `all` has counted. Each shard's lowest sale id is its oldest sale to within a
    commit's reordering, found through the queue's primary key, not a scan of it.
    """
    with connection.cursor() as cursor:
        cursor.execute(_FIRST_PENDING, [shards])
        (first,) = cursor.fetchone()
    if first is None:
        return None
    return Sale.objects.filter(id=first).values_list("received_at", flat=True).first()


def _tick_summary(last: TickLog | None) -> dict | None:
    """The last tick's figures (None before the first tick)."""
    if last is None:
        return None
    return {
        "at": last.started_at,
        "asOf": last.as_of,
        "durationMs": round(last.duration_ms, 1),
        "sales": last.sales,
        "batches": last.batches,
        "redisWrites": last.redis_writes,
    }


def _no_boards(surveyed: dict) -> dict:
    """A window the survey of the boards found no key of: none, or none seen of an estimated few."""
    estimated = any(entry["estimated"] for entry in surveyed.values())
    return {"boards": 0, "members": 0, "estimated": estimated}


def status_read() -> dict:
    """Backlog, lag, the last tick, ingest rate and totals, drops, boards per window."""
    now = timezone.now()
    layout = active().layout
    # Every sale is queued once on `all`'s shard (on one of its parts' when it is split): its queue
    # counts the sales not yet counted.
    pending = PendingSale.objects.filter(shard__in=layout.shards_of(ALL))[:PENDING_COUNTED]
    oldest = _oldest_pending(layout.shards)
    # Sales only: engagement has figures of its own (engagement_status).
    sales_log = IngestLog.objects.exclude(source__startswith=ENGAGEMENT_SOURCE)
    recent = sales_log.filter(at__gte=now - RATE_SPAN).aggregate(n=Sum("accepted"))["n"] or 0
    totals = sales_log.filter(at__gte=now - TOTALS_SPAN).aggregate(
        accepted=Sum("accepted"), duplicates=Sum("duplicates"), rejected=Sum("rejected")
    )
    version = active().number
    try:
        boards = store.boards_summary(version)
        redis_ok = True
    except store.StoreError:
        boards, redis_ok = {}, False
    return {
        "now": now,
        "pendingSales": pending.count(),
        "lagSeconds": (now - oldest).total_seconds() if oldest else 0.0,
        "lastTick": _tick_summary(TickLog.objects.first()),
        "salesPerSecond": round(recent / RATE_SPAN.total_seconds(), 2),
        "totalsSeconds": TOTALS_SPAN.total_seconds(),
        "accepted": totals["accepted"] or 0,
        "duplicates": totals["duplicates"] or 0,
        "rejected": totals["rejected"] or 0,
        "droppedTooOld": ShardState.objects.aggregate(n=Sum("too_old"))["n"] or 0,
        "failingShards": shards_failing(),
        "activeVersion": version,
        "redis": "ok" if redis_ok else "unreachable",
        "windows": {name: boards.get(name, _no_boards(boards)) for name in rankings_settings.WINDOWS},
        "engagement": engagement_status(
            now=now, layout=layout, rate_span=RATE_SPAN, totals_span=TOTALS_SPAN, counted=PENDING_COUNTED
        ),
        "snapshots": snapshots_summary(version),
    }

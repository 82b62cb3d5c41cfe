"""The status page's engagement figures: ingest rate, backlog and lag, totals, and the retention."""

import datetime as dt

from django.db import connection
from django.db.models import F, Sum

from rankings.conf import engagement_retention_seconds
from rankings.engine.partitions import engagement_partitions
from rankings.engine.shards import ALL, Layout
from rankings.models import IngestLog, PendingEngagement

# What the ingest log records for engagement: its sources all start so (engage-api, engage-import, …).
SOURCE_PREFIX = "engage"


# Each shard's first queued entry, through the queue's primary key (shard, entry): one statement
# however many shards there are.
_FIRST_QUEUED = f"""
SELECT min(first.queued_at) FROM generate_series(0, %s - 1) AS s (shard)
CROSS JOIN LATERAL (
    SELECT queued_at FROM {PendingEngagement._meta.db_table} p WHERE p.shard = s.shard ORDER BY p.entry LIMIT 1
) AS first
"""


def _oldest_pending(shards: int) -> dt.datetime | None:
    """When the oldest engagement event that some shard has yet to count was queued: each shard's
    lowest entry, through the queue's primary key (to within a commit's reordering)."""
    with connection.cursor() as cursor:
        cursor.execute(_FIRST_QUEUED, [shards])
        return cursor.fetchone()[0]


def engagement_status(
    *, now: dt.datetime, layout: Layout, rate_span: dt.timedelta, totals_span: dt.timedelta, counted: int
) -> dict:
    """Engagement's part of status_read: events per second over `rate_span`, what waits for a tick
    (in at most `counted` queue rows) and since when, the totals over `totals_span`, and how far
    back raw events are kept."""
    logged = IngestLog.objects.filter(source__startswith=SOURCE_PREFIX)
    recent = logged.filter(at__gte=now - rate_span).aggregate(n=Sum("accepted"))["n"] or 0
    totals = logged.filter(at__gte=now - totals_span).aggregate(
        accepted=Sum("accepted"),
        duplicates=Sum("duplicates"),
        rejected=Sum("rejected"),
        too_old=Sum("too_old"),
    )
    oldest = _oldest_pending(layout.shards)
    days = [day for _, day in engagement_partitions() if day is not None]
    return {
        "eventsPerSecond": round(recent / rate_span.total_seconds(), 2),
        "pending": PendingEngagement.objects.filter(shard=layout.shard_of(ALL))[:counted].aggregate(
            n=Sum(F("views") + F("wishes"))
        )["n"]
        or 0,
        "lagSeconds": (now - oldest).total_seconds() if oldest else 0.0,
        "accepted": totals["accepted"] or 0,
        "duplicates": totals["duplicates"] or 0,
        "rejected": totals["rejected"] or 0,
        "droppedTooOld": totals["too_old"] or 0,
        "retentionDays": engagement_retention_seconds() / 86400,
        "oldestDayKept": days[0].date().isoformat() if days else None,
    }

"""The system's health in numbers: backlog, lag, ticks, rates, drops, boards."""

import datetime as dt

from django.db.models import Min, Sum
from django.utils import timezone

from . import store
from .conf import rankings_settings
from .models import IngestLog, PendingSale, RankingVersion, ShardState, TickLog
from .shards import ALL, shard_count, shard_of

# Sales per second is averaged over this span.
RATE_SPAN = dt.timedelta(minutes=1)


def status_read() -> dict:
    now = timezone.now()
    all_shard = shard_of(ALL, shard_count())
    pending = PendingSale.objects.filter(shard=all_shard)
    oldest = pending.aggregate(oldest=Min("sale__received_at"))["oldest"]
    last = TickLog.objects.first()
    recent = IngestLog.objects.filter(at__gte=now - RATE_SPAN).aggregate(n=Sum("accepted"))["n"] or 0
    totals = IngestLog.objects.aggregate(
        accepted=Sum("accepted"), duplicates=Sum("duplicates"), rejected=Sum("rejected")
    )
    version = RankingVersion.active_number()
    try:
        boards = store.boards_summary(version)
        redis_ok = True
    except (store.Unreachable, store.redis.RedisError):
        boards, redis_ok = {}, False
    return {
        "now": now,
        "pendingSales": pending.count(),
        "lagSeconds": (now - oldest).total_seconds() if oldest else 0.0,
        "lastTick": (
            {
                "at": last.started_at,
                "asOf": last.now,
                "durationMs": round(last.duration_ms, 1),
                "sales": last.sales,
                "batches": last.batches,
                "redisWrites": last.redis_writes,
            }
            if last
            else None
        ),
        "salesPerSecond": round(recent / RATE_SPAN.total_seconds(), 2),
        "accepted": totals["accepted"] or 0,
        "duplicates": totals["duplicates"] or 0,
        "rejected": totals["rejected"] or 0,
        "droppedTooOld": ShardState.objects.aggregate(n=Sum("too_old"))["n"] or 0,
        "activeVersion": version,
        "redis": "ok" if redis_ok else "unreachable",
        "windows": {
            name: boards.get(name, {"boards": 0, "members": 0}) for name in rankings_settings.WINDOWS
        },
    }

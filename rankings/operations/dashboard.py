"""The operator's view: what the status page of the admin shows, beyond GET /v1/status."""

import datetime as dt

from django.db.models import Sum
from django.utils import timezone

from rankings.engine import store
from rankings.engine.shards import ALL
from rankings.models import Bucket, RankingVersion, TickLog
from rankings.operations.status import status_read
from rankings.operations.verify import redis_safety

HOURLY = 3600  # seconds: the bucket size the chart reads
CHART_HOURS = 48


def operations_read() -> dict:
    """Status, the last ticks, versions, Redis memory per window, units sold per hour."""
    status = status_read()
    version = status["activeVersion"]
    try:
        memory = store.memory_by_window(version)
    except (store.Unreachable, store.redis.RedisError):
        memory = {}
    windows = [
        {"name": name, **counts, **memory.get(name, {"keys": 0, "bytes": 0})}
        for name, counts in status["windows"].items()
    ]
    return {
        "status": status,
        "windows": windows,
        "ticks": list(TickLog.objects.all()[:20]),
        "versions": list(RankingVersion.objects.exclude(state=RankingVersion.State.DELETED)[:20]),
        "hourly": units_per_hour(),
        "redis_safety": redis_safety(),
    }


def units_per_hour(
    *, hours: int = CHART_HOURS, now: dt.datetime | None = None
) -> list[tuple[dt.datetime, int]]:
    """Units sold in each of the last `hours` hours (by sale time), from the hourly buckets of `all`."""
    now = now or timezone.now()
    last = int(now.timestamp()) // HOURLY * HOURLY
    first = last - (hours - 1) * HOURLY
    rows = dict(
        Bucket.objects.filter(size=HOURLY, category=ALL, start__gte=first, start__lte=last)
        .values_list("start")
        .annotate(units=Sum("units"))
        .order_by()
    )
    return [
        (dt.datetime.fromtimestamp(start, tz=dt.UTC), int(rows.get(start, 0)))
        for start in range(first, last + 1, HOURLY)
    ]


def hourly_chart(points: list[tuple[dt.datetime, int]], *, width: int = 720, height: int = 160) -> dict:
    """Bar geometry for an inline SVG chart (the template draws it)."""
    peak = max((units for _, units in points), default=0) or 1
    bar = width / max(len(points), 1)
    bars = []
    for i, (hour, units) in enumerate(points):
        h = round(units / peak * (height - 20), 1)
        bars.append(
            {
                "x": round(i * bar, 1),
                "y": round(height - h, 1),
                "w": round(bar * 0.8, 1),
                "h": h,
                "hour": hour,
                "units": units,
            }
        )
    return {"width": width, "height": height, "bars": bars, "peak": peak}

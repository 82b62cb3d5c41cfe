"""The operator's view: the status figures as GET /v1/status serves them (computed at most once a
second per process), and what the status page of the admin shows beyond them."""

import datetime as dt
import threading

from cachetools import cached
from django.utils import timezone

from rankings.engine import store
from rankings.models import RankingVersion, TickLog
from rankings.operations.status import status_read
from rankings.operations.verify import redis_safety
from rankings.serving import selectors
from rankings.serving.charts import Chart, bar_chart
from rankings.serving.memory import WeighedTTL

HOUR = 3600  # seconds: one bar of the chart
CHART_HOURS = 48
# The figures cost a handful of queries and a SCAN of Redis: one computation a
# second per process serves any number of callers.
FIGURES_CACHE_SECONDS = 1.0  # seconds
# One set of figures: a few kilobytes (a few windows, shards failing, engagement).
FIGURES_BYTES = 2**20  # bytes


# One computation at a time: callers that arrive meanwhile wait for it rather than repeat it.
_figures_lock = threading.Lock()


@cached(
    WeighedTTL(
        name=f"{__name__}.status_cached", kind="status", maxsize=FIGURES_BYTES, ttl=FIGURES_CACHE_SECONDS
    ),
    key=lambda: "figures",
    lock=_figures_lock,
    condition=threading.Condition(_figures_lock),
)
def status_cached() -> dict:
    """status_read(), computed at most once per FIGURES_CACHE_SECONDS in this process."""
    return status_read()


def operations_read() -> dict:
    """Status, the last ticks, versions, Redis memory per window, units sold per hour."""
    status = status_read()
    version = status["activeVersion"]
    try:
        memory = store.memory_by_window(version)
    except store.StoreError:
        memory = {}
    windows = [
        {"name": name, **counts, **memory.get(name, {"keys": 0, "bytes": 0})}
        for name, counts in status["windows"].items()
    ]
    return {
        "status": status,
        "windows": windows,
        "ticks": list(TickLog.objects.all()[:20]),
        # Not their trees: tens of megabytes each at a million categories, and not shown.
        "versions": list(
            RankingVersion.objects.exclude(state=RankingVersion.State.DELETED).defer("tree")[:20]
        ),
        "hourly": units_per_hour(),
        "redis_safety": redis_safety(),
    }


def units_per_hour(
    *, hours: int = CHART_HOURS, now: dt.datetime | None = None
) -> list[tuple[dt.datetime, int]]:
    """Units sold in each of the last `hours` hours (by sale time), the current one last."""
    now = now or timezone.now()
    first = now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=hours - 1)
    return selectors.units_per_period(period=HOUR, first=first, count=hours).periods


def hourly_chart(points: list[tuple[dt.datetime, int]], *, width: int = 720, height: int = 160) -> Chart:
    """Bar geometry for the inline SVG chart of units per hour (the template draws it)."""
    return bar_chart(points, width=width, height=height)

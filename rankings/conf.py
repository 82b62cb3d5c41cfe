"""Ranking settings, read lazily from settings.RANKINGS (like DRF's api_settings)."""

from django.conf import settings

from rankings.engine.windows import Window


class _RankingsSettings:
    def __getattr__(self, name):
        return settings.RANKINGS[name]

    @property
    def windows(self) -> dict[str, Window]:
        return {
            name: Window(name=name, bucket_seconds=size, buckets=count)
            for name, (size, count) in settings.RANKINGS["WINDOWS"].items()
        }


rankings_settings = _RankingsSettings()

# Sales make the first two, engagement events (rankings.ingest.engagement) the last two.
SALES_METRICS = ("units", "revenue")
ENGAGEMENT_METRICS = ("views", "wishes")
METRICS = SALES_METRICS + ENGAGEMENT_METRICS

# The deepest rank any list of a board reads (DESIGN §4a, §7): the API refuses offset + limit past
# it, a page past it is not found, and what a list keeps of a board stops there.
MAX_DEPTH = 10_000  # ranks

_COMPANION = {"units": "revenue", "revenue": "units", "views": "wishes", "wishes": "views"}


def other_metric(metric: str) -> str:
    """A board's companion: the blobs and lists show units beside revenue, views beside wishes,
    and the other way round."""
    return _COMPANION[metric]


def metric_pair(metric: str) -> tuple[str, str]:
    """The two metrics of one kind of event that `metric` is one of, in METRICS order."""
    return SALES_METRICS if metric in SALES_METRICS else ENGAGEMENT_METRICS


def engagement_retention_seconds() -> int:
    """How long raw engagement events are kept behind the engine's clock: the setting, but never
    less than the longest window plus a day (a rebuild reads every window from them)."""
    longest = max(w.bucket_seconds * w.buckets for w in rankings_settings.windows.values())
    return max(rankings_settings.ENGAGEMENT_RETENTION_DAYS * 86400, longest + 86400)

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

METRICS = ("units", "revenue")


def other_metric(metric: str) -> str:
    """A sales board's companion: the blobs and lists show units beside revenue and the other way round."""
    return "revenue" if metric == "units" else "units"

"""GET /metrics: the operators' figures in the Prometheus text format, for a token with
rankings.view_status or a caller from METRICS_ALLOW.

prometheus-client writes the format; the figures are read from the shared state
(rankings.operations.metrics) by a collector of our own rather than kept in this process's
memory, so a scrape that reaches any web process, on any machine, reads the same totals.
"""

import ipaddress
import threading
from collections.abc import Iterator

from cachetools import cached
from django.http import HttpResponse
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector
from rest_framework import exceptions
from rest_framework.permissions import BasePermission
from rest_framework.views import APIView

from rankings.conf import rankings_settings
from rankings.ingest.batch import OUTCOMES
from rankings.operations.metrics import PENDING_COUNTED, Figures, metrics_read
from rankings.serving.authentication import ApiTokenAuthentication, holds
from rankings.serving.memory import WeighedTTL
from rankings.serving.throttling import login_address

# A scrape costs a handful of bounded statements and two Redis round trips: one a second per
# process serves any number of scrapers (Prometheus scrapes every 15 s or so).
SCRAPE_CACHE_SECONDS = 1.0  # seconds
# One scrape's text: about 60 bytes a series, and at most 256 shards' and a few nodes' series.
SCRAPE_BYTES = 2**20  # bytes

_INGESTED_HELP = "events ingested, by what became of them, as the ingest replies and import summaries said"


def _families(figures: Figures) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "salesrank_postgres_up", "1 when PostgreSQL answered this scrape", figures.postgres_up
    )
    yield GaugeMetricFamily("salesrank_redis_up", "1 when Redis answered this scrape", figures.redis_up)
    if figures.postgres_up:
        yield from _counted(figures)
    if figures.redis_up:
        yield from _held(figures)


def _counted(figures: Figures) -> Iterator[Metric]:
    """What PostgreSQL holds: the totals, the queues, the shards' failures, the snapshots."""
    sales = CounterMetricFamily("salesrank_sales_ingested", f"Sale {_INGESTED_HELP}", labels=["outcome"])
    engagements = CounterMetricFamily(
        "salesrank_engagements_ingested",
        f"Engagement {_INGESTED_HELP}; kind unknown: rejected for a kind neither view nor wish",
        labels=["kind", "outcome"],
    )
    for outcome in OUTCOMES:
        sales.add_metric([outcome], figures.ingested.get(f"sale:{outcome}", 0))
        for kind in ("view", "wish"):
            engagements.add_metric([kind, outcome], figures.ingested.get(f"{kind}:{outcome}", 0))
    engagements.add_metric(["unknown", "rejected"], figures.ingested.get("unknown:rejected", 0))
    yield sales
    yield engagements
    pending = GaugeMetricFamily(
        "salesrank_pending_events",
        f"events stored and not yet counted by a tick, in the first {PENDING_COUNTED:,} rows of each"
        " queue (a lower bound past them)",
        labels=["kind"],
    )
    for kind, events in figures.pending.items():
        pending.add_metric([kind], events)
    yield pending
    ticks = figures.tick_seconds
    if ticks is not None:
        yield HistogramMetricFamily(
            "salesrank_tick_duration_seconds",
            "how long each tick took, every worker's",
            buckets=[(_bound(bound), count) for bound, count in ticks.buckets],
            sum_value=ticks.sum,
        )
    failing = GaugeMetricFamily(
        "salesrank_shard_failing",
        "1 while the shard's last tick failed (it is retried with a growing wait)",
        labels=["shard"],
    )
    for shard, failed in figures.failing.items():
        failing.add_metric([str(shard)], int(failed))
    yield failing
    if figures.snapshot_age is not None:
        yield GaugeMetricFamily(
            "salesrank_snapshot_age_seconds",
            "seconds since the hour of the latest hourly snapshot every shard has taken",
            figures.snapshot_age,
        )


def _held(figures: Figures) -> Iterator[Metric]:
    """What Redis holds: the boards' age, its memory."""
    if figures.boards_age is not None:
        yield GaugeMetricFamily(
            "salesrank_boards_age_seconds",
            "wall clock minus the oldest shard's asOf (+Inf: a shard's boards are missing until a tick rebuilds them)",
            figures.boards_age,
        )
    used = GaugeMetricFamily(
        "salesrank_redis_used_memory_bytes", "Redis's used_memory, per server", labels=["node"]
    )
    limit = GaugeMetricFamily(
        "salesrank_redis_max_memory_bytes", "Redis's maxmemory, per server (0: no limit)", labels=["node"]
    )
    for node in figures.memory:
        used.add_metric([node.node], node.used)
        limit.add_metric([node.node], node.limit)
    yield used
    yield limit


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class _SharedState(Collector):
    """The figures of the shared state, read anew at each collection."""

    def collect(self) -> Iterator[Metric]:
        return _families(metrics_read())


_registry = CollectorRegistry(auto_describe=False)
_registry.register(_SharedState())

_scrape_lock = threading.Lock()


@cached(
    WeighedTTL(name=f"{__name__}.scrape", kind="status", maxsize=SCRAPE_BYTES, ttl=SCRAPE_CACHE_SECONDS),
    key=lambda: "text",
    lock=_scrape_lock,
    condition=threading.Condition(_scrape_lock),
)
def scrape() -> bytes:
    """The text of every metric, made at most once per SCRAPE_CACHE_SECONDS in this process."""
    return generate_latest(_registry)


def allowed_address(request) -> bool:
    """Whether the client's address (as the throttles see it) is in one of METRICS_ALLOW's networks."""
    address = login_address(request)
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(
        ip in ipaddress.ip_network(network, strict=False) for network in rankings_settings.METRICS_ALLOW
    )


class MetricsReader(BasePermission):
    message = (
        "/metrics needs a token with rankings.view_status, or a call from an address METRICS_ALLOW names"
    )

    def has_permission(self, request, view):
        return allowed_address(request) or holds(request, "rankings.view_status")


class MetricsApi(APIView):
    """The figures, for Prometheus."""

    authentication_classes = [ApiTokenAuthentication]
    permission_classes = [MetricsReader]
    throttle_scope = "reads"

    def permission_denied(self, request, message=None, code=None):
        # 403 for everyone refused, a caller without credentials too (DRF would answer 401).
        raise exceptions.PermissionDenied(message)

    def get(self, request):
        return HttpResponse(scrape(), content_type=CONTENT_TYPE_PLAIN_0_0_4)

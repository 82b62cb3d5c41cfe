"""The operators' endpoints, answered before the rest of the site: GET /healthz (liveness),
GET /readyz (readiness) and GET /metrics.

Probes and scrapers call a process by its address, not by the site's name, and over plain HTTP
inside the network: answered by the first middleware, these never meet ALLOWED_HOSTS (a Host of
10.0.3.7:8000 would be a 400) or the HTTPS redirect (a 301, which a Kubernetes probe counts as a
success), and they are left out of the request log, which a probe every few seconds would fill.
"""

import threading

from cachetools import cached
from django.http import HttpResponseNotAllowed, JsonResponse

from rankings.operations.readiness import OK, readiness_read
from rankings.serving.memory import WeighedTTL
from rankings.serving.metrics_api import MetricsApi

# A load balancer probes every few seconds from each of its nodes: one check a second per process
# (a query, a PING and the shards' states) answers them all, and a flood costs no more.
READY_CACHE_SECONDS = 1.0  # seconds
_ready_lock = threading.Lock()


@cached(
    WeighedTTL(name=f"{__name__}.readiness", kind="status", maxsize=64 * 1024, ttl=READY_CACHE_SECONDS),
    key=lambda: "checks",
    lock=_ready_lock,
    condition=threading.Condition(_ready_lock),
)
def readiness_cached() -> dict[str, str]:
    return readiness_read()


def healthz(request):
    """200 while the process serves: no query, no Redis."""
    return JsonResponse({"status": "ok"})


def readyz(request):
    """200 when PostgreSQL and Redis answer and the boards are fresh; else 503 saying which is not."""
    checks = readiness_cached()
    ready = all(state == OK for state in checks.values())
    return JsonResponse({"checks": checks}, status=200 if ready else 503)


_ENDPOINTS = {"/healthz": healthz, "/readyz": readyz, "/metrics": MetricsApi.as_view()}


class OperatorEndpointsMiddleware:
    """Answers the operators' endpoints (GET and HEAD) itself; passes every other request on."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        view = _ENDPOINTS.get(request.path_info)
        if view is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD"])
        response = view(request)
        # A DRF response is rendered by the URL handler, which this request does not reach.
        return response.render() if hasattr(response, "render") else response

"""One log line per request answered: method, path, status and duration, with the request's id."""

import logging
import time

log = logging.getLogger("salesrank.requests")

# A path is logged up to this many characters: no route is longer, and a client's 10 KB path
# must not make a 10 KB line.
PATH_LOGGED = 200  # characters


class RequestLogMiddleware:
    """Logs each request once its response is made (after django-guid has given it its id)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        if log.isEnabledFor(logging.INFO):
            duration_ms = round((time.perf_counter() - started) * 1000, 2)
            path = request.path[:PATH_LOGGED]
            log.info(
                "%s %s %s %.1f ms",
                request.method,
                path,
                response.status_code,
                duration_ms,
                extra={
                    "method": request.method,
                    "path": path,
                    "status": response.status_code,
                    "duration_ms": duration_ms,
                },
            )
        return response

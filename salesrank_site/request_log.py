"""Each request's id, and one log line per request answered: method, path, status and duration,
with the id.

The id is the request's X-Request-ID when that is a UUID, else a new one; it is set in
django-guid's context variable, which the log filter (salesrank_site/logs.py) writes into every
line and django-guid's Celery integration passes on to the tasks the request queues, and it is
sent back in the response's X-Request-ID. On every read it costs a dictionary lookup, a new UUID
and two headers (django-guid's own middleware makes log calls, settings lookups and two renderings
of the full path per request).
"""

import logging
import time
import uuid

from django.core.signals import request_finished
from django_guid.context import guid
from django_guid.signals import clear_guid

log = logging.getLogger("salesrank.requests")

REQUEST_ID_HEADER = "X-Request-ID"
_REQUEST_ID_META = "HTTP_X_REQUEST_ID"
# A path is logged up to this many characters: no route is longer, and a client's 10 KB path
# must not make a 10 KB line.
PATH_LOGGED = 200  # characters
# A request id given longer than any spelling of a UUID is not parsed.
_UUID_CHARACTERS = 45  # characters: urn:uuid: and 36


def request_id(given: str | None) -> str:
    """`given` when it is a UUID (as the client spelled it), else a new one."""
    if given and len(given) <= _UUID_CHARACTERS:
        try:
            uuid.UUID(given)
        except ValueError:
            pass
        else:
            return given
    return uuid.uuid4().hex


class RequestLogMiddleware:
    """Gives each request its id, and logs the request once its response is made."""

    def __init__(self, get_response):
        self.get_response = get_response
        # django-guid's receiver clears the id when a request ends: this middleware resets it itself,
        # and a receiver fewer is a signal sent faster after every request.
        request_finished.disconnect(clear_guid)

    def __call__(self, request):
        started = time.perf_counter()
        token = guid.set(request_id(request.META.get(_REQUEST_ID_META)))
        try:
            response = self.get_response(request)
            response[REQUEST_ID_HEADER] = guid.get()
            # Browsers let a page's script read the header only when exposed (CORS).
            response["Access-Control-Expose-Headers"] = REQUEST_ID_HEADER
            if log.isEnabledFor(logging.INFO):
                self._log(request, response, started)
        finally:
            guid.reset(token)
        return response

    @staticmethod
    def _log(request, response, started: float) -> None:
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

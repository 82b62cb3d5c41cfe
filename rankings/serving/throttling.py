"""Request rates: the API's scopes, a bucket of its own for authenticated readers, and the pages' limit.

Every client address comes from SimpleRateThrottle.get_ident, which trusts
X-Forwarded-For only as far as settings.REST_FRAMEWORK["NUM_PROXIES"] says.
"""

import ipaddress

from django.conf import settings
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle, ScopedRateThrottle, SimpleRateThrottle


def client_address(request) -> str:
    """The address a request is counted under by the rate limits."""
    return BaseThrottle().get_ident(request)


def _ip(text: str | None) -> str | None:
    """`text` as an IP address, without a port (a.b.c.d:port, [v6]:port); None if it is not one."""
    text = (text or "").strip()
    if text.startswith("[") and "]" in text:
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:
        text = text.split(":")[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def login_address(request) -> str:
    """The address the admin's login lockout records (an IP column): the rate limits' address
    when it is an IP, else REMOTE_ADDR, since a proxy may forward "unknown" or an address with
    its port."""
    return _ip(client_address(request)) or request.META.get("REMOTE_ADDR")


class _OptionalRate:
    """A scope without a rate is not throttled (rather than a configuration error)."""

    def get_rate(self):
        return self.THROTTLE_RATES.get(self.scope)


def has_credentials(request) -> bool:
    """Whether the request carries a token or a session: without either it is anonymous, and
    finding that out through authentication would cost more than the read itself."""
    return "HTTP_AUTHORIZATION" in request.META or settings.SESSION_COOKIE_NAME in request.COOKIES


class ScopedThrottle(_OptionalRate, ScopedRateThrottle):
    """The view's throttle_scope, per user when authenticated, else per address.

    An authenticated reader (a shop's servers reading through a token, an
    operator's session) is counted under "reads-authenticated", at its own
    rate: it neither shares nor uses up the anonymous limit of its address.
    """

    def allow_request(self, request, view):
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        if (
            self.scope == "reads"
            and has_credentials(request)
            and request.user
            and request.user.is_authenticated
        ):
            self.scope = "reads-authenticated"
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return SimpleRateThrottle.allow_request(self, request, view)


class FailedAuthenticationThrottle(_OptionalRate, SimpleRateThrottle):
    """A request whose credentials fail is an anonymous read of its address: it counts in that
    address's "reads" bucket (ScopedThrottle's key for it), and is refused once the bucket is full."""

    scope = "reads"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


def authentication_failure_throttle(request: Request) -> None:
    """Raise Throttled when a request whose authentication failed is over its address's read limit."""
    throttle = FailedAuthenticationThrottle()
    if not throttle.allow_request(request, request.parser_context["view"]):  # DRF's view of the request
        raise exceptions.Throttled(throttle.wait())


class PageThrottle(_OptionalRate, SimpleRateThrottle):
    """The server-rendered pages, per client address."""

    scope = "pages"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

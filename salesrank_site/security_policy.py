"""The Content-Security-Policy header, built once a process rather than once a response.

django-csp's middleware builds the policy from the settings for every response: about 0.1 ms of
CPU, a tenth of all a product's rank costs this process. The site's policy is one string for
every response (no nonce, no view that changes it), so it is built once and built again only
when its setting changes (a test's override). A response that asks for more than the settings'
policy (a nonce, django-csp's per-view decorators or exemptions, excluded paths, Django's debug
pages) is answered by django-csp's own middleware, unchanged.
"""

import functools

from csp import middleware
from csp.constants import HEADER, HEADER_REPORT_ONLY
from csp.utils import build_policy
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

_SETTINGS = ("CONTENT_SECURITY_POLICY", "CONTENT_SECURITY_POLICY_REPORT_ONLY")


@functools.cache
def _policy(report_only: bool) -> str:
    """The settings' policy ("" when none is set): the enforced one, or the report-only one."""
    return build_policy(report_only=report_only)


@receiver(setting_changed)
def _policy_forget(*, setting: str, **kwargs) -> None:
    if setting in _SETTINGS or setting == "DEBUG":
        _policy.cache_clear()
        _plain_paths.cache_clear()


@functools.cache
def _plain_paths() -> bool:
    """Whether every path gets the settings' policy: no path prefix is excluded, and Django's debug
    pages (django-csp leaves their 404 and 500 without a policy) are off."""
    excluded = any((getattr(settings, name, None) or {}).get("EXCLUDE_URL_PREFIXES") for name in _SETTINGS)
    return not excluded and not settings.DEBUG


# What django-csp's decorators (or a response class) set on a response to ask for another policy.
_RESPONSE_ASKS = tuple(
    f"_csp_{name}{suffix}" for name in ("exempt", "config", "update", "replace") for suffix in ("", "_ro")
)


def _plain(request, response) -> bool:
    """Whether the response gets the settings' policies as they stand: nothing of the request or
    the response (or its class) asks for another."""
    return (
        _plain_paths()
        and getattr(request, "_csp_nonce", None) is None
        and not any(getattr(response, name, None) is not None for name in _RESPONSE_ASKS)
    )


class CSPMiddleware(middleware.CSPMiddleware):
    """django-csp's middleware, with the settings' policies built once. Its `get_policy_parts` is
    consulted only for the responses that ask for another policy: a subclass changing the policy
    of every response overrides `process_response` instead."""

    def process_response(self, request, response):
        if not _plain(request, response):
            return super().process_response(request, response)
        for header, report_only in ((HEADER, False), (HEADER_REPORT_ONLY, True)):
            policy = _policy(report_only)
            if policy and header not in response:
                response[header] = policy
        # As django-csp does: a nonce asked for after the header is written is an error, not a
        # nonce the policy does not name.
        request.csp_nonce = middleware.CheckableLazyObject(self._csp_nonce_post_response)
        return response

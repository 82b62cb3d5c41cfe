"""Authenticates API callers by `Authorization: Token <key>` against the stored hashes of the keys."""

from django.conf import settings
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from rankings.models import ApiToken
from rankings.serving.throttling import authentication_failure_throttle


class ApiTokenAuthentication(TokenAuthentication):
    """DRF's header parsing (`Token <key>`, one key, no spaces, decodable), ApiToken's lookup.

    A header that fails is throttled before it is answered 401 (authentication_failure_throttle):
    otherwise any `Authorization: Token …` would skip the read limit, each costing a lookup.
    """

    def authenticate(self, request):
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            authentication_failure_throttle(request)
            raise

    def authenticate_credentials(self, key):
        token = ApiToken.objects.of_key(key)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        token.used()
        return token.user, token


# The backends whose grants a token's lookup reads itself (ApiToken.grants): Axes grants nothing, and
# ModelBackend what the lookup reads. With any other backend configured, every caller is asked
# through Django's backends.
_READ_WITH_TOKEN = frozenset(
    {"axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"}
)


def holds(request, permission: str) -> bool:
    """Whether the caller holds `permission` ("app_label.codename"): a token's holder by what the
    token's lookup read (ApiToken.grants), anyone else (a session) through Django's backends."""
    token = request.auth
    if isinstance(token, ApiToken) and _READ_WITH_TOKEN.issuperset(settings.AUTHENTICATION_BACKENDS):
        return token.grants(permission)
    user = request.user
    return bool(user and user.has_perm(permission))

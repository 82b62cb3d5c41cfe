"""Authenticates API callers by `Authorization: Token <key>` against the stored hashes of the keys."""

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


def holds(request, permission: str) -> bool:
    """Whether the caller holds `permission` ("app_label.codename"): a token's holder as the token
    answers (ApiToken.grants), anyone else (a session) through Django's backends."""
    token = request.auth
    if isinstance(token, ApiToken):
        return token.grants(permission)
    user = request.user
    return bool(user and user.has_perm(permission))

"""Authenticates API callers by `Authorization: Token <key>` against the stored hashes of the keys."""

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from rankings.models import ApiToken


class ApiTokenAuthentication(TokenAuthentication):
    """DRF's header parsing (`Token <key>`, one key, no spaces, decodable), ApiToken's lookup."""

    model = ApiToken

    def authenticate_credentials(self, key):
        token = ApiToken.objects.of_key(key)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        token.used()
        return token.user, token

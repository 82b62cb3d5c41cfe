"""API tokens: made for a user with the permissions it needs; the key is shown once, never stored."""

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction

from rankings.models import ApiToken


class UnknownPermission(ValueError):
    pass


def permissions_named(names: list[str]) -> list[Permission]:
    """The permissions `add_sale` or `app_label.codename` name (a bare codename is the rankings app's)."""
    found = []
    for name in names:
        app_label, _, codename = name.rpartition(".")
        permission = Permission.objects.filter(
            content_type__app_label=app_label or "rankings", codename=codename
        ).first()
        if permission is None:
            raise UnknownPermission(f"no permission {name!r}")
        found.append(permission)
    return found


def token_create(*, user) -> str:
    """A new token of `user`; returns its key, of which only the hash is stored."""
    key = secrets.token_urlsafe(32)  # 256 random bits, 43 characters
    ApiToken.objects.create(prefix=key[: ApiToken.PREFIX_LENGTH], digest=ApiToken.digest_of(key), user=user)
    return key


@transaction.atomic
def ingest_token_create(*, username: str, permissions: list[str]) -> str:
    """A token of the user `username` (made, without a password, if new), who is granted
    `permissions`; returns its key."""
    granted = permissions_named(permissions)
    user, created = get_user_model().objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save()
    user.user_permissions.add(*granted)
    return token_create(user=user)

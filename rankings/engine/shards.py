"""Which shard holds a board: a stable hash of its category, modulo the active version's shard count.

The count is a property of a version (its boards were laid out with it), kept
in PostgreSQL with the version and mirrored in Redis for readers. The setting
RANKINGS_SHARDS only gives the count of a fresh install; a setting that
disagrees with the active version is refused rather than followed, because
queueing sales under one count and claiming them under another loses them.
"""

import zlib

from django.core import checks
from django.db import DatabaseError
from django.utils import timezone

from catalogue.models import RESERVED_SLUG
from rankings.conf import rankings_settings

# The board that counts every sale once; the catalogue keeps its slug from every category.
ALL = RESERVED_SLUG


class ShardCountMismatch(RuntimeError):
    """RANKINGS_SHARDS disagrees with the shard count of the active version."""


def shard_of(slug: str, shards: int) -> int:
    """Stable across processes and versions (unlike hash()): crc32 of the slug."""
    return zlib.crc32(slug.encode()) % shards


def _active() -> tuple[int, int] | None:
    """(number, shards) of the active version as recorded, or None before it is."""
    from rankings.models import RankingVersion

    versions = RankingVersion.objects.values_list("number", "shards")
    # Until a rebuild is switched to, version 1 is active whatever its row says.
    return versions.filter(state=RankingVersion.State.ACTIVE).first() or versions.filter(number=1).first()


def active_shards() -> tuple[int, int]:
    """(number, shards) of the active version; a fresh install records version 1 with the setting."""
    from rankings.models import RankingVersion

    found = _active()
    if found is not None:
        return found
    version, _ = RankingVersion.objects.get_or_create(
        number=1,
        defaults={
            "state": RankingVersion.State.ACTIVE,
            "shards": rankings_settings.SHARDS,
            "activated_at": timezone.now(),
        },
    )
    return version.number, version.shards


def shard_count() -> int:
    """The active version's shard count: what every ingest, tick, rebuild, verify and read uses."""
    return active_shards()[1]


def version_shards(number: int) -> int:
    """The shard count version `number` was built with (the active version's if it has no row)."""
    from rankings.models import RankingVersion

    found = RankingVersion.objects.filter(number=number).values_list("shards", flat=True).first()
    return found if found is not None else shard_count()


def _mismatch(number: int, shards: int) -> str | None:
    setting = rankings_settings.SHARDS
    if setting == shards:
        return None
    return (
        f"RANKINGS_SHARDS={setting} but the active version {number} has {shards} shards; "
        "change the count with a rebuild"
    )


def shard_count_checked() -> int:
    """The active version's shard count; ShardCountMismatch when the setting says otherwise."""
    number, shards = active_shards()
    message = _mismatch(number, shards)
    if message:
        raise ShardCountMismatch(message)
    return shards


@checks.register()
def shard_setting_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """`manage.py check` (and every command that runs the checks) reports a disagreeing setting.

    Only when the database answers and holds a recorded count: a check must not
    stop a build step without a database, nor the migration that adds the count.
    """
    try:
        found = _active()
    except DatabaseError:
        return []
    message = found and _mismatch(*found)
    if not message:
        return []
    return [
        checks.Error(
            message,
            hint="Set RANKINGS_SHARDS back to the active version's count.",
            id="rankings.E001",
        )
    ]

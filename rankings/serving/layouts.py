"""Where a version keeps each board: its layout (shards, pinned and split categories), as readers
find it: in Redis, else in PostgreSQL, and made once per version."""

import functools

from django.db import DatabaseError

from rankings.engine import store
from rankings.engine.shards import Layout
from rankings.models import RankingVersion
from rankings.serving import memory


def layout_of(version: int) -> Layout:
    """The version's own layout (which shards hold which boards, which boards are split): from
    Redis, else from PostgreSQL."""
    layout = store.shard_layout_get(version)
    if layout is None:
        try:
            layout = RankingVersion.objects.filter(number=version).values_list("shards", "pinned").first()
        except DatabaseError as error:
            raise store.Unreachable(f"the shard layout of version {version} is unknown") from error
        if layout is None:
            raise store.Unreachable(f"the shard layout of version {version} is unknown")
    shards, pinned = layout
    return _layout_made(shards, tuple(pinned))


# A version's layout never changes: each is made once (with what it derives, such as its split).
_layout_made = functools.lru_cache(maxsize=store.REMEMBERED_PREFIXES)(Layout)
# Their size is their versions' pinned and split categories: a few per version, as the operator set them.
memory.keep(
    f"{__name__}._layout_made", _layout_made.cache_clear, kind="process", bytes=None, cache=_layout_made
)


def placed(category: str) -> tuple[int, int]:
    """(active version, shard) of a category's boards: where every read of one board goes."""
    version = store.served_version()
    return version, layout_of(version).shard_of(category)


def split_board(category: str) -> bool:
    """Whether the active version splits the category: its parts are snapshotted apart, so its
    movers, new releases and rank 24 hours before are not kept. False while Redis is away (the
    read goes on, and answers as it can)."""
    try:
        return category in layout_of(store.served_version()).split
    except store.StoreError:
        return False

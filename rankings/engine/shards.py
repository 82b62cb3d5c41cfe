"""Which shard holds a board: the active version's layout, a stable hash of the category over its
hashed shards, and a shard of its own for each pinned category.

The layout is a property of a version (its boards were laid out with it), kept
in PostgreSQL with the version and mirrored in Redis for readers. A layout
changes only through a rebuild and a switch-over (rankings_rebuild --shards,
--pin, --unpin), which re-keys every row kept by shard number. The setting
RANKINGS_SHARDS only gives the count of a fresh install; a setting that
disagrees with both the count the installation started with and the active
version's is refused rather than followed, so that nobody believes an edited
setting re-laid out the shards.
"""

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from django.core import checks
from django.db import DatabaseError
from django.utils import timezone

from catalogue.models import RESERVED_SLUG
from rankings.conf import rankings_settings
from rankings.engine.split import (
    SplitError,
    is_part,
    part_index,
    part_name,
    part_names,
    split_describe,
    split_of,
    split_parse,
)

# The board that counts every sale once; the catalogue keeps its slug from every category.
ALL = RESERVED_SLUG

# A switch-over holds every shard's lock at once (PostgreSQL's lock table must hold them), and
# a Celery queue or a Redis Cluster slot per shard is plenty at this many.
MAX_SHARDS = 256


class ShardCountMismatch(RuntimeError):
    """RANKINGS_SHARDS disagrees with the shard count the installation started with."""


class LayoutError(ValueError):
    """A requested layout cannot be built: the message says why, for the operator."""


@dataclass(frozen=True)
class Layout:
    """How a version's boards are spread: `shards` shards in all, of which the last len(pinned)
    each hold one pinned category; every other category is hashed over the first ones.

    A split category's boards are its parts' (rankings.engine.split), each part pinned to a shard of
    its own: the split is read from the pinned names, so a version's layout, wherever it is kept,
    carries its split."""

    shards: int
    pinned: tuple[str, ...] = ()

    @property
    def hashed(self) -> int:
        return self.shards - len(self.pinned)

    @cached_property
    def split(self) -> dict[str, int]:
        """slug -> parts of each split category."""
        return split_of(self.pinned)

    def board_of(self, slug: str, product_id: str) -> str:
        """The category whose boards count `product_id`'s sales in `slug`: `slug`, or its part."""
        parts = self.split.get(slug)
        return slug if parts is None else part_name(slug, part_index(product_id, parts))

    def boards_of(self, slug: str) -> tuple[str, ...]:
        """The categories holding `slug`'s boards: `slug`, or each of its parts."""
        parts = self.split.get(slug)
        return (slug,) if parts is None else part_names(slug, parts)

    def queued(self, counted: Iterable[str], product_id: str) -> dict[int, list[str]]:
        """Each shard an event of `product_id` counting in `counted` (its categories and their
        ancestors) is queued on, with the boards it counts in there: `all`'s first, then the
        categories' (of a split category, the part that holds the product)."""
        boards: dict[int, list[str]] = {}
        for slug in (ALL, *counted):
            board = self.board_of(slug, product_id)
            boards.setdefault(self.shard_of(board), []).append(board)
        return boards

    def shards_of(self, slug: str) -> list[int]:
        """The shards of `slug`'s boards (its parts' for a split category)."""
        return [self.shard_of(board) for board in self.boards_of(slug)]

    def shard_of(self, slug: str) -> int:
        if slug in self.pinned:
            return self.hashed + self.pinned.index(slug)
        # Stable across processes and versions (unlike hash()): crc32 of the slug.
        return zlib.crc32(slug.encode()) % self.hashed

    def describe(self) -> str:
        pins = [slug for slug in self.pinned if not is_part(slug)]
        text = f"{self.shards} shards" if not self.pinned else f"{self.hashed} hashed shards"
        if pins:
            text += f" + {len(pins)} pinned ({', '.join(pins)})"
        if self.split:
            parts = len(self.pinned) - len(pins)
            text += f" + {parts} for split boards ({split_describe(self.split)})"
        return text


def shard_of(slug: str, layout: Layout) -> int:
    """The shard of `slug`'s boards under `layout` (a version's, never a setting's)."""
    return layout.shard_of(slug)


class ActiveVersion(NamedTuple):
    """The version the engine ticks and the pages serve: its number, the switch that made it
    active (0 for version 1, which no switch made so), and the layout of its shards."""

    number: int
    epoch: int
    layout: Layout

    @classmethod
    def of_row(cls, row: Sequence) -> "ActiveVersion":
        """The version of a row that starts with the columns of RankingVersion.ACTIVE_ROW_SQL."""
        number, epoch, shards, pinned = row[:4]
        return cls(number, epoch, Layout(shards, tuple(pinned)))


def _recorded() -> ActiveVersion | None:
    """The active version as recorded, in one read; None before it is recorded."""
    from rankings.models import RankingVersion

    row = RankingVersion.active_row()
    return ActiveVersion.of_row(row) if row else None


def active() -> ActiveVersion:
    """The active version, in one read; a fresh install records version 1 with the setting."""
    from rankings.models import RankingVersion

    found = _recorded()
    if found is not None:
        return found
    # A fresh install's split boards (RANKINGS_SPLIT) are pinned after its hashed shards.
    parts = [name for slug, count in split_setting().items() for name in part_names(slug, count)]
    version, _ = RankingVersion.objects.get_or_create(
        number=1,
        defaults={
            "state": RankingVersion.State.ACTIVE,
            "shards": rankings_settings.SHARDS + len(parts),
            "pinned": parts,
            "activated_at": timezone.now(),
        },
    )
    return ActiveVersion(version.number, version.switch_epoch, Layout(version.shards, tuple(version.pinned)))


def shard_count() -> int:
    """How many shards the active version has (pinned ones included): the range every tick, rebuild,
    verify and switch works over."""
    return active().layout.shards


def version_layout(number: int) -> Layout:
    """The layout version `number` was built with (the active version's if it has no row)."""
    from rankings.models import RankingVersion

    found = RankingVersion.objects.filter(number=number).values_list("shards", "pinned").first()
    return Layout(found[0], tuple(found[1])) if found is not None else active().layout


def split_setting() -> dict[str, int]:
    """RANKINGS_SPLIT as slug -> parts: the split a rebuild gives the next version."""
    return split_parse(getattr(rankings_settings, "SPLIT", ""))


def layout_plan(
    current: Layout,
    *,
    shards: int | None = None,
    pin: Iterable[str] = (),
    unpin: Iterable[str] = (),
    split: dict[str, int] | None = None,
) -> Layout:
    """The layout a rebuild asks for: `shards` hashed shards (default: as now), the current pins
    with `pin` added and `unpin` taken away, and the boards of `split` (slug -> parts; default: as
    now) split, each part pinned to a shard after the others. LayoutError says what is wrong."""
    from catalogue.models import Category

    hashed = current.hashed if shards is None else shards
    if hashed < 1:
        raise LayoutError(f"--shards must be at least 1 (got {hashed})")
    split = dict(current.split if split is None else split)
    current_pins = tuple(slug for slug in current.pinned if not is_part(slug))
    pin, unpin = list(dict.fromkeys(pin)), list(dict.fromkeys(unpin))
    for slug in pin:
        if slug in current_pins:
            raise LayoutError(f"category {slug!r} is already pinned to its own shard")
        if slug in split:
            raise LayoutError(f"category {slug!r} is split: each of its parts has a shard of its own")
    for slug in unpin:
        if slug not in current_pins:
            raise LayoutError(f"category {slug!r} is not pinned; pinned: {', '.join(current_pins) or 'none'}")
    kept = tuple(slug for slug in current_pins if slug not in unpin)
    both = [slug for slug in kept if slug in split]
    if both:
        raise LayoutError(f"category {', '.join(map(repr, both))} is pinned: unpin it to split it")
    known = set(Category.objects.filter(slug__in={*pin, *split}).values_list("slug", flat=True)) | {ALL}
    for asked, verb in ((pin, "pin"), (list(split), "split")):
        unknown = [slug for slug in asked if slug not in known]
        if unknown:
            raise LayoutError(f"no category {', '.join(map(repr, unknown))} in the catalogue to {verb}")
    parts = tuple(name for slug, count in split.items() for name in part_names(slug, count))
    pinned = kept + tuple(pin) + parts
    if hashed + len(pinned) > MAX_SHARDS:
        raise LayoutError(
            f"{hashed} hashed shards + {len(pinned)} pinned is more than {MAX_SHARDS} shards in all"
        )
    return Layout(hashed + len(pinned), pinned)


def _mismatch(number: int, layout: Layout, first: int | None) -> str | None:
    """What is wrong with RANKINGS_SHARDS: it must say the count the installation started with
    (or, once a rebuild changed the layout, the active version's count)."""
    setting = rankings_settings.SHARDS
    # Version 1's split boards (from RANKINGS_SPLIT) take shards beyond the setting's count.
    started = layout.hashed if number == 1 or first is None else first
    if setting in (started, layout.shards, layout.hashed):
        return None
    if number == 1:
        return (
            f"RANKINGS_SHARDS={setting} but the active version 1 has {started} shards; "
            "change the count with a rebuild"
        )
    return (
        f"RANKINGS_SHARDS={setting} but the installation started with {started} shards and the active "
        f"version {number} has {layout.describe()}; the setting only gives a fresh install's count: "
        f"set it back to {started} and change the layout with a rebuild (rankings_rebuild --shards)"
    )


def _first_count() -> int | None:
    from rankings.models import RankingVersion

    found = RankingVersion.objects.filter(number=1).values_list("shards", "pinned").first()
    return Layout(found[0], tuple(found[1])).hashed if found else None


def layout_checked() -> tuple[int, Layout]:
    """(number, layout) of the active version; ShardCountMismatch when the setting says otherwise."""
    number, _, layout = active()
    message = _mismatch(number, layout, _first_count() if number != 1 else None)
    if message:
        raise ShardCountMismatch(message)
    return number, layout


def shard_count_checked() -> int:
    """The active version's shard count; ShardCountMismatch when the setting says otherwise."""
    return layout_checked()[1].shards


@checks.register()
def shard_setting_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """`manage.py check` (and every command that runs the checks) reports a disagreeing setting.

    Only when the database answers and holds a recorded count: a check must not
    stop a build step without a database, nor the migration that adds the count.
    """
    try:
        split = split_setting()
    except SplitError as error:
        return [
            checks.Error(
                f"RANKINGS_SPLIT: {error}", hint="Write it as SLUG:PARTS,… (all:3)", id="rankings.E002"
            )
        ]
    try:
        found = _recorded()
        message = found and _mismatch(found.number, found.layout, _first_count())
    except DatabaseError:
        return []
    found_messages: list[checks.CheckMessage] = []
    if message:
        found_messages.append(
            checks.Error(
                message,
                hint="Set RANKINGS_SHARDS back to the count the installation started with.",
                id="rankings.E001",
            )
        )
    if found and split != found.layout.split:
        # Not an error: the setting is what the next rebuild does, and may be set ahead of it.
        found_messages.append(
            checks.Warning(
                f"RANKINGS_SPLIT says {split_describe(split) or 'no split'}, the active version {found.number} "
                f"splits {split_describe(found.layout.split) or 'no board'}",
                hint="It takes effect through rankings_rebuild and a switch-over.",
                id="rankings.W001",
            )
        )
    return found_messages

"""Split boards: a category's boards kept as K sub-boards (parts) by a stable hash of the product.

A board too large or too hot for one Redis node is split: the boards of category
`c` split K ways are the boards of the *part categories* `c#0` … `c#K-1`, and a
product counts in part `c#k`, k = crc32(product id) mod K, of each of them. Each
part is pinned to a shard of its own (shards.Layout), so the parts lie on
different shards, and on a Redis Cluster in different slots. A part category is
a category like any other to the write path: ingest queues a sale for its part,
the tick claims, folds, changes and applies it with its shard's batch numbers,
and Redis-loss recovery and rebuilds work on it unchanged. Reads merge the parts
exactly (rankings.serving.merge).

The split is a property of a version, frozen into its layout (the parts among its
pinned categories); RANKINGS_SPLIT says the split a rebuild gives the next version.
A part's name holds `#`, which no slug does, so it can never be a real category's.
"""

import zlib

# Between a category's slug and its part's number; no Django slug holds it.
PART_MARK = "#"
# The most parts a board is split into: each takes a shard of its own.
MAX_PARTS = 64
# Category names are at most this long in PostgreSQL (buckets, queue rows); a part's name must fit.
NAME_LENGTH = 50


class SplitError(ValueError):
    """A split cannot be made: the message says why, for the operator."""


def part_index(product_id: str, parts: int) -> int:
    """The part of a split board that holds `product_id`: stable across processes and versions
    (crc32, as shards hash categories), and independent of everything but the id and the count."""
    return zlib.crc32(product_id.encode()) % parts


def part_name(slug: str, index: int) -> str:
    return f"{slug}{PART_MARK}{index}"


def part_names(slug: str, parts: int) -> tuple[str, ...]:
    return tuple(part_name(slug, index) for index in range(parts))


def is_part(category: str) -> bool:
    return PART_MARK in category


def base_of(category: str) -> str:
    """The category a board's name belongs to: the slug itself, or a part's category."""
    return category.split(PART_MARK, 1)[0]


def split_of(pinned: tuple[str, ...]) -> dict[str, int]:
    """slug -> parts, from a layout's pinned categories (where a split board's parts are pinned)."""
    split: dict[str, int] = {}
    for category in pinned:
        if is_part(category):
            split[base_of(category)] = split.get(base_of(category), 0) + 1
    return split


def split_parse(value: str | dict | None) -> dict[str, int]:
    """RANKINGS_SPLIT ("all:3,toys:2", or a dict) as slug -> parts; SplitError for a bad one.
    A category split 1 way is not split."""
    if not value:
        return {}
    items = (
        value.items()
        if isinstance(value, dict)
        else (_pair(entry) for entry in value.split(",") if entry.strip())
    )
    split: dict[str, int] = {}
    for slug, parts in items:
        if slug in split:
            raise SplitError(f"category {slug!r} is named twice in the split")
        if is_part(slug) or not slug:
            raise SplitError(f"{slug!r} is not a category's slug")
        if not 1 <= parts <= MAX_PARTS:
            raise SplitError(f"category {slug!r}: a board is split into 1 to {MAX_PARTS} parts (got {parts})")
        if len(part_name(slug, parts - 1)) > NAME_LENGTH:
            raise SplitError(f"category {slug!r}: its parts' names would pass {NAME_LENGTH} characters")
        if parts > 1:
            split[slug] = parts
    return split


def _pair(entry: str) -> tuple[str, int]:
    slug, sep, parts = entry.strip().partition(":")
    if not sep or not parts.strip().isdigit():
        raise SplitError(f"{entry.strip()!r} is not SLUG:PARTS (e.g. all:3)")
    return slug.strip(), int(parts)


def split_describe(split: dict[str, int]) -> str:
    return ", ".join(f"{slug}:{parts}" for slug, parts in split.items())

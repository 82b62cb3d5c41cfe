"""A version compared with the live one, board by board: sizes and first ranks at the same batch."""

import heapq
from dataclasses import dataclass

from rankings.conf import METRICS
from rankings.engine import locks, store
from rankings.engine.shards import ALL, Layout, active, version_layout
from rankings.engine.split import base_of
from rankings.engine.windows import configured_windows
from rankings.operations.catch_up import catch_up, catch_up_version, era_check


@dataclass
class BoardComparison:
    window: str
    metric: str
    category: str
    live_total: int
    new_total: int
    live_top: list[tuple[str, int]]
    new_top: list[tuple[str, int]]

    @property
    def equal(self) -> bool:
        return self.live_total == self.new_total and self.live_top == self.new_top


# (window, metric, board) -> (the board's size, its first ranks as (product, score))
Heads = dict[tuple[str, str, str], tuple[int, list[tuple[str, int]]]]


# Categories the admin's compare draws at random (besides `all`) from a catalogue larger than this:
# one request compares their boards, not the sixteen million of a million categories; a catalogue
# of at most this many is compared whole.
COMPARE_CATEGORIES = 1_000  # categories


def compare_sample() -> tuple[list[str] | None, int]:
    """(the categories a compare reads: `all` and COMPARE_CATEGORIES drawn at random, or None for
    every one when the catalogue has no more than that; how many categories the catalogue has)."""
    from catalogue.models import Category
    from rankings.operations.verify import sample_categories

    total = Category.objects.count()
    if total <= COMPARE_CATEGORIES:
        return None, total
    drawn = [c for c in sample_categories(COMPARE_CATEGORIES + 1) if c != ALL]
    return [ALL, *drawn[:COMPARE_CATEGORIES]], total


def versions_compare(
    *, number: int, top_n: int = 100, categories: list[str] | None = None
) -> list[BoardComparison]:
    """Each board's top-N and size in the active version against version `number`, at the same
    batch: every board, or those of `categories`."""
    live_number, _, live = active()
    layout = version_layout(number)
    era_check(number)
    if layout == live:
        live_heads: Heads = {}
        new_heads: Heads = {}
        for shard in _shards_of(layout, categories):
            with locks.shard_lock(shard):
                catch_up(number, shard)
                live_heads.update(_shard_heads(live_number, live, shard, top_n, categories))
                new_heads.update(_shard_heads(number, layout, shard, top_n, categories))
    else:
        # Laid out otherwise: the boards of one shard are spread over several of the other's.
        with locks.version_change_lock(), locks.all_shards_lock(live.shards):
            catch_up_version(number)
            live_heads = _heads(live_number, live, top_n, categories)
            new_heads = _heads(number, layout, top_n, categories)
    # Boards are compared whole: a split board's parts merged, whichever version splits it.
    live_heads, new_heads = _merged_heads(live_heads, top_n), _merged_heads(new_heads, top_n)
    comparisons = []
    for board in sorted(live_heads.keys() | new_heads.keys()):
        live_total, live_top = live_heads.get(board, (0, []))
        new_total, new_top = new_heads.get(board, (0, []))
        comparisons.append(BoardComparison(*board, live_total, new_total, live_top, new_top))
    return comparisons


def _shards_of(layout: Layout, categories: list[str] | None) -> list[int]:
    """The shards holding the boards of `categories` (their parts, when split); None: every shard."""
    if categories is None:
        return list(range(layout.shards))
    return sorted({layout.shard_of(part) for c in categories for part in layout.boards_of(c)})


def _shard_heads(version: int, layout: Layout, shard: int, top_n: int, categories: list[str] | None) -> Heads:
    """The heads of the shard's boards: every one, or those of `categories`."""
    if categories is None:
        return store.boards_heads(version, shard, top_n)
    boards = [
        (window, metric, part)
        for c in categories
        for part in layout.boards_of(c)
        if layout.shard_of(part) == shard
        for window in configured_windows()
        for metric in METRICS
    ]
    return store.boards_heads(version, shard, top_n, boards)


def _merged_heads(heads: Heads, top_n: int) -> Heads:
    """Board heads with each split board's parts merged into one: sizes summed, first ranks merged."""
    merged: Heads = {}
    for (window, metric, category), (total, top) in heads.items():
        key = (window, metric, base_of(category))
        known_total, known_top = merged.get(key, (0, []))
        rows = heapq.merge(known_top, top, key=lambda row: (-row[1], row[0].encode()))
        merged[key] = (known_total + total, list(rows)[:top_n])
    return merged


def _heads(version: int, layout: Layout, top_n: int, categories: list[str] | None) -> Heads:
    heads: Heads = {}
    for shard in _shards_of(layout, categories):
        heads.update(_shard_heads(version, layout, shard, top_n, categories))
    return heads

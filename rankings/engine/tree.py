"""The category tree a version counts with: a sale counts once in its categories and in every ancestor.

The catalogue's tree (catalogue.models.Category.parent) is what editors change;
the tree that counts is the one frozen into the active ranking version when it
was built (RankingVersion.tree). Ingest expands each sale's categories with it
when it queues the sale (so the tick, which reads only the queue, never sees a
half-edited tree), and the recompute and the rebuilds expand with the tree of
the version they compute. A catalogue tree unlike the active one is *pending*
until a rebuild freezes it and a switch makes it count (rankings.operations.backfill).

`categories_expand` is the one function every counting path calls (sales,
engagement events): the categories in the order given, then their ancestors,
each once.
"""

import datetime as dt
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.db import connection

from catalogue.models import TREE_LOCK_SQL, Category, path_of


@dataclass(frozen=True)
class Tree:
    """child slug -> parent slug, for the categories that have a parent."""

    parents: Mapping[str, str] = field(default_factory=dict)

    def ancestors(self, slug: str) -> list[str]:
        """The parent of `slug`, its parent, … up to the root (a cycle, refused upstream, stops it)."""
        found: list[str] = []
        current = self.parents.get(slug)
        while current is not None and current != slug and current not in found:
            found.append(current)
            current = self.parents.get(current)
        return found

    def expand(self, categories: Iterable[str]) -> tuple[str, ...]:
        """The categories, then every ancestor of them, each once (a sale counts once in each)."""
        given = list(dict.fromkeys(categories))
        if not self.parents:
            return tuple(given)
        expanded = dict.fromkeys(given)
        for slug in given:
            expanded.update(dict.fromkeys(self.ancestors(slug)))
        return tuple(expanded)

    def path(self, slug: str) -> list[str]:
        """The slugs from `slug`'s root down to `slug`."""
        return [*reversed(self.ancestors(slug)), slug]

    def covered(self, slug: str, slugs: Iterable[str]) -> set[str]:
        """Of `slugs`, those whose sales count in `slug` (itself and its descendants)."""
        return {s for s in slugs if s == slug or slug in self.ancestors(s)}

    def categories_sql(self) -> str:
        """The SELECT of the categories a sale `s` counts in under this tree: EXPAND_SQL, or without
        a parent anywhere the categories it names, a plain unnest several times faster."""
        return EXPAND_SQL if self.parents else NAMED_SQL

    def sql_params(self) -> dict[str, list[str]]:
        """The tree as two parallel arrays for EXPAND_SQL: each slug with a parent, and its
        expansion (itself and its ancestors) joined by commas (slugs hold none)."""
        slugs = sorted(self.parents)
        return {
            "tree_slugs": slugs,
            "tree_lines": [",".join(self.expand([slug])) for slug in slugs],
        }


EMPTY = Tree({})

# The categories a sale `s` counts in, once each, under the tree given as the parameters of
# Tree.sql_params: every one of s.categories, expanded to itself and its ancestors, deduplicated.
# Used as `CROSS JOIN LATERAL (EXPAND_SQL) AS u(category)`.
EXPAND_SQL = """
SELECT DISTINCT x.category
FROM unnest(s.categories) AS c(slug)
LEFT JOIN unnest(%(tree_slugs)s::text[], %(tree_lines)s::text[]) AS t(slug, line) ON t.slug = c.slug
CROSS JOIN LATERAL unnest(coalesce(string_to_array(t.line, ','), ARRAY[c.slug::text])) AS x(category)
"""
# The same without a tree: the categories a sale names (ingest keeps them distinct).
NAMED_SQL = "SELECT unnest(s.categories)"


# A version's tree is frozen when its row is made, so a process reads each version's tree once:
# every ingest batch expands its categories with the active version's, and read whole each time, a
# tree of 100,000 categories with a parent cost a batch 34 ms, one of a million 547 ms. Kept by
# number and the instant the row was made: a restore to an earlier point forgets the versions made
# after it, and the next rebuild takes one of their numbers again, with a tree of its own. The last
# few versions' are kept (the active, one being built, one compared with it). The read side keeps
# the served version's for its pages by number alone (categories_tree), off its hot path.
TREES_KEPT = 3
_trees: OrderedDict[int, tuple[dt.datetime, Tree]] = OrderedDict()  # number -> (made, tree)
_trees_lock = threading.Lock()


def version_tree(number: int) -> Tree:
    """The tree version `number` counts with (empty for a version without a row), in one read of the
    row: its tree only when this process has not met the row before."""
    from rankings.models import RankingVersion

    with _trees_lock:
        made, tree = _trees.get(number, (None, EMPTY))
    # Every batch asks: one plain statement (through the ORM, building its CASE took 0.7 ms a batch).
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT created_at, CASE WHEN created_at = %s THEN NULL ELSE tree END"
            f" FROM {RankingVersion._meta.db_table} WHERE number = %s",
            [made, number],
        )
        found = cursor.fetchone()
    if found is None:
        return EMPTY
    if found[0] != made:
        made, tree = found[0], Tree(json.loads(found[1]))  # jsonb reaches Django's cursors as text
    with _trees_lock:
        _trees[number] = (made, tree)
        _trees.move_to_end(number)
        while len(_trees) > TREES_KEPT:
            _trees.popitem(last=False)
    return tree


def version_trees_forget() -> None:
    """Forget the trees read (between tests, which make versions of the same numbers again)."""
    with _trees_lock:
        _trees.clear()


def active_tree() -> Tree:
    """The tree of the active version: the one every sale counts with now."""
    from rankings.engine.shards import active

    return version_tree(active().number)


def categories_expand(categories: Iterable[str], *, tree: Tree | None = None) -> tuple[str, ...]:
    """The categories an event counts in: its own and every ancestor of them in `tree` (default: the
    active version's), each once, in the order given, then the ancestors."""
    return (tree if tree is not None else active_tree()).expand(categories)


def catalogue_tree() -> Tree:
    """The catalogue's tree as editors left it (what the next rebuild freezes)."""
    rows = Category.objects.filter(parent__isnull=False).values_list("slug", "parent__slug")
    return Tree(dict(rows))


def tree_affected(old: Tree, new: Tree) -> set[str]:
    """The categories whose boards count other sales under `new` than under `old`: those whose set
    of descendants differs (the ones whose own ancestors changed keep their own sales).

    A category's descendants change exactly when it is an ancestor, in one tree and not the other,
    of a category whose parent changed (below that category both trees agree), so the walk is over
    the moved categories only, not the whole tree.
    """
    affected: set[str] = set()
    for slug in _moved(old, new):
        affected |= set(old.ancestors(slug)) ^ set(new.ancestors(slug))
    return affected


@dataclass
class TreeChange:
    """What switching from one tree to another changes: the categories moved, the boards recounted."""

    moved: list[tuple[str, str | None, str | None]]  # (slug, parent before, parent after)
    affected: list[str]  # categories whose boards count other sales

    @property
    def pending(self) -> bool:
        return bool(self.moved)

    # What a page lists of either, at most: an import may move every category of a large catalogue.
    SHOWN = 100

    @property
    def moved_shown(self) -> list[tuple[str, str | None, str | None]]:
        return self.moved[: self.SHOWN]

    @property
    def affected_shown(self) -> list[str]:
        return self.affected[: self.SHOWN]

    @property
    def moved_more(self) -> int:
        return max(0, len(self.moved) - self.SHOWN)

    @property
    def affected_more(self) -> int:
        return max(0, len(self.affected) - self.SHOWN)


def _moved(old: Tree, new: Tree) -> set[str]:
    """The slugs whose parent differs between the trees (set operations on the pairs, in C: a
    million categories take a fraction of a second)."""
    return {slug for slug, _ in old.parents.items() ^ new.parents.items()}


def tree_change(old: Tree, new: Tree) -> TreeChange:
    moved = [(s, old.parents.get(s), new.parents.get(s)) for s in sorted(_moved(old, new))]
    return TreeChange(moved=moved, affected=sorted(tree_affected(old, new)))


def tree_pending() -> TreeChange:
    """How the catalogue's tree differs from the active version's: empty when nothing is pending."""
    return tree_change(active_tree(), catalogue_tree())


def catalogue_paths() -> dict[str, list[str]]:
    """slug -> its path (root first) in the catalogue's tree, for every category."""
    parents: dict[str, str | None] = dict(Category.objects.values_list("slug", "parent__slug"))
    return {slug: path_of(slug, parents) for slug in parents}


IN_A_VERSION_TREE = (
    "is in the category tree of a ranking version that counts or may count again (building, ready,"
    " active, or kept for a switch back): its boards and any category given its slug would count by"
    " that tree. Move it out of the tree, rebuild and switch; it can go once those versions expire"
)

# The slugs among %(slugs)s that the tree of a version not failed or deleted names, as a child or
# as a parent: one pass over each such version's tree.
_NAMED_BY_VERSIONS_SQL = """
SELECT DISTINCT named.slug
FROM rankings_rankingversion v
CROSS JOIN LATERAL jsonb_each_text(v.tree) AS t(child, parent)
CROSS JOIN LATERAL (VALUES (t.child), (t.parent)) AS named(slug)
WHERE v.state NOT IN ('failed', 'deleted') AND named.slug = ANY(%(slugs)s)
"""


def categories_in_version_trees(slugs: list[str]) -> dict[str, str]:
    """slug -> why not, for those of `slugs` a kept version's tree names (catalogue.DELETION_GUARDS).

    Under the tree lock, which a rebuild takes to freeze the catalogue's tree: a delete and a
    rebuild's freeze see each other whole, so no version freezes a category deleted meanwhile.
    """
    if not slugs:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(TREE_LOCK_SQL)
        cursor.execute(_NAMED_BY_VERSIONS_SQL, {"slugs": list(slugs)})
        return {slug: IN_A_VERSION_TREE for (slug,) in cursor.fetchall()}

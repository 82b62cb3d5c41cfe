"""Categories created, renamed and moved together: a CSV file (import_categories) or a request's list
(the catalogue API), by one code path.

Each row's fields are checked first (`slug_problem`, `name_problem`: a valid slug that is not
reserved, a name free of control and bidirectional characters); then, together, no slug given
twice, every parent known (among the rows or in the catalogue) and the tree as it would be free
of cycles and at most MAX_TREE_DEPTH levels deep, the levels below a moved category counted. A
file is refused whole, as "line N: reason", when any row is; a request's rows are refused one by
one (each row the tree as it would be cannot hold, until the rest can), and the others written.

The rows are written in one transaction and a bounded number of statements: the new categories
in one, the names in one, the moved categories detached in one, then every new link attached root
first, a level per statement, so that no intermediate state is refused by the database's own
guard, which still checks every step. A write reads only the categories its rows name, their
ancestors and the levels below the moved ones, and locks only the tree (the advisory lock every
parent edit takes) and the rows it writes: a sale naming a category meanwhile is never held up by
it. Counting follows the new tree only once a rebuild freezes it and a switch makes it active (the
rankings' versions).
"""

import csv
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import groupby
from typing import cast

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from .models import (
    MAX_TREE_DEPTH,
    NAME_REFUSED,
    NAME_REFUSED_MESSAGE,
    RESERVED_SLUG,
    TREE_LOCK_SQL,
    Category,
    tree_problem,
)

# Both fields declare a max_length (the stubs' get_field() gives any field, whose may be None).
SLUG_MAX = cast(int, Category._meta.get_field("slug").max_length)
NAME_MAX = cast(int, Category._meta.get_field("name").max_length)


class TreeImportError(ValueError):
    """The rows cannot be written; the message names the line (or index) and the reason."""


@dataclass(frozen=True, slots=True)
class CategoryRow:
    slug: str
    name: str
    parent: str | None


@dataclass
class TreeImportReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    unchanged: int = 0
    # Position of each row not written (its line, or its index in a request) -> why.
    refused: dict[int, str] = field(default_factory=dict)

    def summary(self) -> str:
        text = (
            f"{len(self.created)} categories created, {len(self.updated)} updated, "
            f"{self.unchanged} unchanged; {len(self.moved)} moved in the tree"
        )
        if self.moved:
            text += " (pending: the boards follow the new tree once a rebuild with it is switched to)"
        return text


def slug_problem(value: str, what: str = "slug") -> str | None:
    """Why `value` cannot be the slug of a category in the tree (`what` names the field); None if it can."""
    if len(value) > SLUG_MAX:
        return f"{what} is longer than {SLUG_MAX} characters"
    try:
        validate_slug(value)
    except ValidationError:
        return f"{what} '{value}' is not a valid slug"
    if value == RESERVED_SLUG:
        return f"'{RESERVED_SLUG}' is reserved and not in the tree"
    return None


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a category's or a product's name; None if it can."""
    if not name or len(name) > NAME_MAX:
        return f"a name of 1 to {NAME_MAX} characters is required"
    try:
        name.encode()
    except UnicodeEncodeError:  # a lone surrogate, which no database can store
        return "a name must be valid Unicode text"
    if NAME_REFUSED.search(name):
        return NAME_REFUSED_MESSAGE
    return None


# --- a CSV file ---------------------------------------------------------------------------------


def _records(lines) -> Iterator[tuple[int, list[str]]]:
    """(first line number, cells) of each CSV record; a record the csv module cannot read is refused
    (a cell past its field_size_limit, 128 KiB, among them: a slug is 50 characters, a name 200)."""
    reader = csv.reader(lines)
    while True:
        number = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise TreeImportError(f"line {number}: not valid CSV: {error}") from None
        yield number, row


def _rows(lines) -> list[tuple[int, CategoryRow]]:
    """(line number, row) of each row; a header row is skipped."""
    rows, first = [], True
    for number, row in _records(lines):
        if not row or all(not cell.strip() for cell in row):
            continue
        # What surrogateescape makes of bytes that are not UTF-8.
        if any(any("\udc80" <= char <= "\udcff" for char in cell) for cell in row):
            raise TreeImportError(f"line {number}: not valid UTF-8")
        if any("\x00" in cell for cell in row):
            raise TreeImportError(f"line {number}: holds a NUL character")
        cells = [cell.strip() for cell in row]
        if first and cells[0].lower() == "slug":
            first = False
            continue
        first = False
        if len(cells) not in (2, 3):
            raise TreeImportError(f"line {number}: expected slug,name,parent, found {len(cells)} fields")
        slug, name, parent = cells[0], cells[1], (cells[2] if len(cells) == 3 else "") or None
        problem = (
            slug_problem(slug)
            or (parent is not None and slug_problem(parent, "parent"))
            or name_problem(name)
        )
        if problem:
            raise TreeImportError(f"line {number}: {problem}")
        rows.append((number, CategoryRow(slug, name, parent)))
    return rows


def categories_import(*, lines) -> TreeImportReport:
    """Create or update the categories of the CSV `lines` (an iterable of text lines, as
    `open(path, encoding="utf-8-sig", errors="surrogateescape", newline="")` gives), all or none."""
    return categories_write(rows=_rows(lines), source="the file", label=lambda number: f"line {number}")


# --- the rows, checked together and written -----------------------------------------------------


def categories_write(
    *,
    rows: list[tuple[int, CategoryRow]],
    source: str,
    label: Callable[[int], str],
    whole: bool = True,
) -> TreeImportReport:
    """Create or update the categories of `rows`, (position, row) pairs whose fields are valid.

    `source` names where the rows come from in a reason ("the file"), `label` a position ("line
    3"). `whole`: any row refused refuses them all (TreeImportError, the first by position);
    otherwise the rows that cannot be written are refused (`report.refused`) and the others written.
    """
    report = TreeImportReport()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(TREE_LOCK_SQL)
        plan = _Plan(rows, label)
        while not (whole and plan.refused) and (problems := plan.problems(source)):
            plan.refuse(problems)
        if whole and plan.refused:
            first = min(plan.refused)
            raise TreeImportError(f"{label(first)}: {plan.refused[first]}")
        report.refused = plan.refused
        _write(plan, report, label)
    return report


@dataclass(frozen=True)
class _Stored:
    id: int
    name: str
    is_placeholder: bool
    parent: str | None  # the parent's slug


class _Plan:
    """The rows, what the catalogue holds of them, and which of them the tree as it would be can hold."""

    def __init__(self, rows: list[tuple[int, CategoryRow]], label: Callable[[int], str]):
        self.refused: dict[int, str] = {}
        self.accepted: dict[str, tuple[int, CategoryRow]] = {}  # slug -> (position, row), in order
        for position, row in rows:
            first = self.accepted.get(row.slug)
            if first is None:
                self.accepted[row.slug] = (position, row)
            else:
                self.refused[position] = f"'{row.slug}' is already given at {label(first[0])}"
        self.stored = _named(
            set(self.accepted) | {row.parent for _, row in self.accepted.values() if row.parent}
        )
        # The levels under each category a row moves, as stored, but those of the categories it
        # moves (counted where they go): what moves with it.
        self.below = _levels_below(self.stored, [slug for slug in self.accepted if self.moves(slug)])

    def moves(self, slug: str) -> bool:
        """Whether the row of `slug` gives a stored category another parent."""
        stored = self.stored.get(slug)
        return stored is not None and stored.parent != self.accepted[slug][1].parent

    def parents(self) -> dict[str, str | None]:
        """slug -> parent of the rows accepted and of the stored categories they name (with their ancestors)."""
        stored = {slug: category.parent for slug, category in self.stored.items()}
        return stored | {slug: row.parent for slug, (_, row) in self.accepted.items()}

    def problems(self, source: str) -> dict[str, str]:
        """slug -> why, for each accepted row that the tree, as the accepted rows make it, cannot hold."""
        parents = self.parents()
        children: dict[str, list[str]] = defaultdict(list)
        for child, parent in parents.items():
            if parent is not None:
                children[parent].append(child)
        problems = {}
        for slug, (_, row) in self.accepted.items():
            if row.parent is None or (slug in self.stored and not self.moves(slug)):
                continue  # a top-level category, or one that stays where it is
            if row.parent not in self.stored and row.parent not in self.accepted:
                problems[slug] = f"parent '{row.parent}' is neither in {source} nor in the catalogue"
                continue
            if _below_a_cycle(slug, parents):
                continue  # the rows that make it are refused; this one is checked again without it
            problem = tree_problem(slug, parents, height=_height(slug, children, self.below))
            if problem:
                problems[slug] = problem
        return problems

    def refuse(self, problems: dict[str, str]) -> None:
        for slug, reason in problems.items():
            position, _ = self.accepted.pop(slug)
            self.refused[position] = reason


def _below_a_cycle(slug: str, parents: dict[str, str | None]) -> bool:
    """Whether the ancestors of `slug` loop without passing through it."""
    seen, current = {slug}, parents.get(slug)
    while current is not None:
        if current == slug:
            return False
        if current in seen:
            return True
        seen.add(current)
        current = parents.get(current)
    return False


def _height(slug: str, children: dict[str, list[str]], below: dict[str, int]) -> int:
    """Levels of the subtree under `slug` as the rows make it, itself included: each category named
    in it, and under each moved one its stored levels. Counted no further than past the limit."""
    height, level = 0, [slug]
    for distance in range(MAX_TREE_DEPTH + 1):
        if not level:
            return height
        height = max(height, distance + max(below.get(s, 1) for s in level))
        level = [child for s in level for child in children.get(s, ())]
    return max(height, MAX_TREE_DEPTH + 2) if level else height


def _named(slugs: set[str]) -> dict[str, _Stored]:
    """The categories of `slugs` and every ancestor of them, a level per statement (the database
    keeps the tree acyclic and MAX_TREE_DEPTH levels deep, so the walk ends): each an index lookup,
    whatever the catalogue's size."""
    found: dict[str, tuple[int, str, bool, int | None]] = {}
    ids: dict[int, str] = {}
    wanted = Q(slug__in=sorted(slugs))
    while True:
        rows = Category.objects.filter(wanted).values_list(
            "id", "slug", "name", "is_placeholder", "parent_id"
        )
        up: set[int] = set()
        for pk, slug, name, is_placeholder, parent_id in rows:
            found[slug], ids[pk] = (pk, name, is_placeholder, parent_id), slug
            if parent_id is not None:
                up.add(parent_id)
        up -= ids.keys()
        if not up:
            break
        wanted = Q(pk__in=sorted(up))
    return {
        slug: _Stored(pk, name, is_placeholder, None if parent_id is None else ids.get(parent_id))
        for slug, (pk, name, is_placeholder, parent_id) in found.items()
    }


_TABLE = Category._meta.db_table
# The categories right under a level of them, but for those of %s[2] (which move elsewhere): index
# lookups of parent_id, a level per statement, as the database's own guard walks them.
_UNDER = (
    f"SELECT id, parent_id FROM {_TABLE}"
    " WHERE parent_id IN (SELECT unnest(%s::bigint[])) AND NOT id = ANY(%s::bigint[])"
)


def _levels_below(stored: dict[str, _Stored], moving: list[str]) -> dict[str, int]:
    """slug -> levels of its stored subtree (itself included) of each of `moving`, leaving out the
    subtrees of the others; a stored tree is at most MAX_TREE_DEPTH levels, so the walk ends."""
    roots = {stored[slug].id: slug for slug in moving}
    root_of = {pk: pk for pk in roots}
    height = dict.fromkeys(roots, 1)
    level = list(roots)
    with connection.cursor() as cursor:
        for depth in range(2, MAX_TREE_DEPTH + 1):
            if not level:
                break
            cursor.execute(_UNDER, [level, list(roots)])
            rows = cursor.fetchall()
            for pk, parent_id in rows:
                root_of[pk] = root_of[parent_id]
                height[root_of[pk]] = depth
            level = [pk for pk, _ in rows]
    return {roots[pk]: levels for pk, levels in height.items()}


# New categories, by slug (concurrent writers insert in one order); one a sale created meanwhile is
# completed instead. Each returns its id and whether it was inserted.
_CREATE = f"""
INSERT INTO {_TABLE} (slug, name, is_placeholder, has_sales)
SELECT slug, name, false, false FROM unnest(%s::text[], %s::text[]) AS r(slug, name) ORDER BY slug
ON CONFLICT (slug) DO UPDATE SET name = excluded.name, is_placeholder = false
RETURNING id, slug, xmax = 0
"""
_RENAME = f"""
UPDATE {_TABLE} c SET name = r.name, is_placeholder = false
FROM unnest(%s::bigint[], %s::text[]) AS r(id, name) WHERE c.id = r.id
"""
_DETACH = f"UPDATE {_TABLE} SET parent_id = NULL WHERE id IN (SELECT unnest(%s::bigint[]))"
_ATTACH = f"""
UPDATE {_TABLE} c SET parent_id = r.parent_id
FROM unnest(%s::bigint[], %s::bigint[]) AS r(id, parent_id) WHERE c.id = r.id
"""


def _write(plan: _Plan, report: TreeImportReport, label: Callable[[int], str]) -> None:
    """New categories first, then names; then the moved categories detached; then every new link,
    root first, a level per statement. A write the database refuses (its tree guard, or a category
    deleted meanwhile) names the row when it can."""
    rows = [row for _, row in plan.accepted.values()]
    stored = plan.stored
    ids = {slug: category.id for slug, category in stored.items()}
    new = [row for row in rows if row.slug not in stored]
    renamed = [
        row.slug
        for row in rows
        if row.slug in stored and (stored[row.slug].name != row.name or stored[row.slug].is_placeholder)
    ]
    report.moved = [row.slug for row in rows if plan.moves(row.slug)]
    report.unchanged = sum(1 for row in rows if row.slug in stored) - len(set(renamed) | set(report.moved))
    parents = plan.parents()
    attach = sorted(
        (row for row in rows if row.parent is not None and (row.slug not in stored or plan.moves(row.slug))),
        key=lambda row: _depth(row.slug, parents),
    )
    names = {row.slug: row.name for row in rows}
    with _refused_as(plan, label), connection.cursor() as cursor:
        if new:
            cursor.execute(_CREATE, [[row.slug for row in new], [row.name for row in new]])
            for pk, slug, inserted in cursor.fetchall():
                ids[slug] = pk
                (report.created if inserted else report.updated).append(slug)
        if renamed:
            cursor.execute(_RENAME, [[ids[slug] for slug in renamed], [names[slug] for slug in renamed]])
            report.updated += renamed
        if report.moved:
            cursor.execute(_DETACH, [[ids[slug] for slug in report.moved]])
        for _, level in groupby(attach, key=lambda row: _depth(row.slug, parents)):
            links = list(level)
            cursor.execute(
                _ATTACH, [[ids[row.slug] for row in links], [ids[cast(str, row.parent)] for row in links]]
            )


def _depth(slug: str, parents: dict[str, str | None]) -> int:
    level, current = 0, parents.get(slug)
    while current is not None:
        level, current = level + 1, parents.get(current)
    return level


_QUOTED = re.compile(r"'([^']*)'")


@contextmanager
def _refused_as(plan: _Plan, label: Callable[[int], str]) -> Iterator[None]:
    """A write the database refuses, as TreeImportError naming the row whose slug its reason quotes."""
    try:
        yield
    except IntegrityError as error:
        reason = str(error).splitlines()[0].removeprefix("category tree: ")
        quoted = _QUOTED.search(reason)
        row = plan.accepted.get(quoted[1]) if quoted else None
        raise TreeImportError(f"{label(row[0])}: {reason}" if row else reason) from None

"""A whole category tree from a CSV file (slug,name,parent): categories created or updated at once.

The file is checked whole before anything is written: UTF-8 (a byte-order mark
is allowed), every slug valid and not reserved, every name free of control and
bidirectional characters, every parent known (in the file or the catalogue),
and no row making a cycle or a tree past MAX_TREE_DEPTH levels. Bad input is
refused as "line N: reason" and nothing is written. Then the file is written in
one transaction, the moved categories first detached and then attached root
first, so that no intermediate state is refused by the database's own guard,
which still checks every step (the levels below a moved category among them).

An import reads only the categories its rows name and their ancestors, and
locks only the tree (the advisory lock every parent edit takes) and the rows it
writes: a sale naming a category meanwhile is never held up by it.
Counting follows the new tree only once a rebuild freezes it and a switch makes
it active (the rankings' versions).
"""

import csv
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from .models import NAME_REFUSED, NAME_REFUSED_MESSAGE, RESERVED_SLUG, TREE_LOCK_SQL, Category, tree_problem

# Both fields declare a max_length (the stubs' get_field() gives any field, whose may be None).
SLUG_MAX = cast(int, Category._meta.get_field("slug").max_length)
NAME_MAX = cast(int, Category._meta.get_field("name").max_length)


class TreeImportError(ValueError):
    """The file cannot be imported; the message names the line and the reason."""


@dataclass
class TreeImportReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    unchanged: int = 0

    def summary(self) -> str:
        text = (
            f"{len(self.created)} categories created, {len(self.updated)} updated, "
            f"{self.unchanged} unchanged; {len(self.moved)} moved in the tree"
        )
        if self.moved:
            text += " (pending: the boards follow the new tree once a rebuild with it is switched to)"
        return text


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


def _rows(lines) -> list[tuple[int, str, str, str | None]]:
    """(line number, slug, name, parent or None) of each row; a header row is skipped."""
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
        for what, value in (("slug", slug), ("parent", parent)):
            if value is not None:
                _check_slug(number, what, value)
        if not name or len(name) > NAME_MAX:
            raise TreeImportError(f"line {number}: a name of 1 to {NAME_MAX} characters is required")
        if NAME_REFUSED.search(name):
            raise TreeImportError(f"line {number}: {NAME_REFUSED_MESSAGE}")
        rows.append((number, slug, name, parent))
    return rows


def _check_slug(number: int, what: str, value: str) -> None:
    if len(value) > SLUG_MAX:
        raise TreeImportError(f"line {number}: {what} is longer than {SLUG_MAX} characters")
    try:
        validate_slug(value)
    except ValidationError:
        raise TreeImportError(f"line {number}: {what} '{value}' is not a valid slug") from None
    if value == RESERVED_SLUG:
        raise TreeImportError(f"line {number}: '{RESERVED_SLUG}' is reserved and not in the tree")


def categories_import(*, lines) -> TreeImportReport:
    """Create or update the categories of the CSV `lines` (an iterable of text lines, as
    `open(path, encoding="utf-8-sig", errors="surrogateescape", newline="")` gives)."""
    rows = _rows(lines)
    seen: dict[str, int] = {}
    for number, slug, _, _ in rows:
        if slug in seen:
            raise TreeImportError(f"line {number}: '{slug}' already given on line {seen[slug]}")
        seen[slug] = number
    report = TreeImportReport()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(TREE_LOCK_SQL)
        existing = _named({slug for _, slug, _, _ in rows} | {parent for *_, parent in rows if parent})
        parents = {slug: category.parent for slug, category in existing.items()}
        for number, _, _, parent in rows:
            if parent is not None and parent not in parents and parent not in seen:
                raise TreeImportError(
                    f"line {number}: parent '{parent}' is neither in the file nor in the catalogue"
                )
        wanted = {**parents, **{slug: parent for _, slug, _, parent in rows}}
        for number, slug, _, parent in rows:
            # The levels below a moved category are counted by the database's guard as it is attached.
            problem = parent is not None and tree_problem(slug, wanted)
            if problem:
                raise TreeImportError(f"line {number}: {problem}")
        moved = [slug for _, slug, _, parent in rows if slug in existing and parents[slug] != parent]
        _write(rows, existing, wanted, moved, report)
    return report


@dataclass(frozen=True)
class _Stored:
    id: int
    name: str
    is_placeholder: bool
    parent: str | None  # the parent's slug


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


def _write(rows, existing: dict, wanted: dict, moved: list[str], report: TreeImportReport) -> None:
    """Names first; then the moved categories detached; then every new link, root first. A write the
    database refuses (its tree guard, or a category created or deleted meanwhile) names its line."""
    ids = {slug: stored.id for slug, stored in existing.items()}
    lines = {slug: number for number, slug, _, _ in rows}
    for number, slug, name, _ in rows:
        stored = existing.get(slug)
        with _refused_as(number):
            if stored is None:
                ids[slug] = Category.objects.create(slug=slug, name=name).pk
                report.created.append(slug)
            elif stored.name != name or stored.is_placeholder:
                Category.objects.filter(pk=stored.id).update(name=name, is_placeholder=False)
                report.updated.append(slug)
            elif slug not in moved:
                report.unchanged += 1
    Category.objects.filter(pk__in=[ids[slug] for slug in moved]).update(parent=None)
    report.moved = moved
    attach = [
        slug
        for _, slug, _, parent in rows
        if parent is not None and (slug in moved or slug in report.created)
    ]

    def depth(slug: str) -> int:
        level, current = 0, wanted.get(slug)
        while current is not None:
            level, current = level + 1, wanted.get(current)
        return level

    for slug in sorted(attach, key=depth):
        with _refused_as(lines[slug], f"'{slug}' cannot be placed under '{wanted[slug]}': "):
            Category.objects.filter(pk=ids[slug]).update(parent_id=ids[wanted[slug]])


@contextmanager
def _refused_as(number: int, prefix: str = ""):
    try:
        yield
    except IntegrityError as error:
        reason = str(error).splitlines()[0].removeprefix("category tree: ")
        raise TreeImportError(f"line {number}: {prefix}{reason}") from None

"""A whole category tree from a CSV file (slug,name,parent): categories created or updated at once.

The file is checked whole before anything is written: every slug valid and not
reserved, every parent known (in the file or the catalogue), and the resulting
tree free of cycles and at most MAX_TREE_DEPTH levels deep. Then it is written
in one transaction, the moved categories first detached and then attached root
first, so that no intermediate state is refused by the database's own guard.
Counting follows the new tree only once a rebuild freezes it and a switch makes
it active (the rankings' versions).
"""

import csv
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import transaction

from .models import RESERVED_SLUG, Category, subtree_height, tree_problem

SLUG_MAX = Category._meta.get_field("slug").max_length
NAME_MAX = Category._meta.get_field("name").max_length


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


def _rows(lines) -> list[tuple[int, str, str, str | None]]:
    """(line number, slug, name, parent or None) of each row; a header row is skipped."""
    rows = []
    for number, row in enumerate(csv.reader(lines), start=1):
        if not row or all(not cell.strip() for cell in row):
            continue
        cells = [cell.strip() for cell in row]
        if number == 1 and cells[0].lower() == "slug":
            continue
        if len(cells) not in (2, 3):
            raise TreeImportError(f"line {number}: expected slug,name,parent, found {len(cells)} fields")
        slug, name, parent = cells[0], cells[1], (cells[2] if len(cells) == 3 else "") or None
        for what, value in (("slug", slug), ("parent", parent)):
            if value is None:
                continue
            try:
                validate_slug(value)
            except ValidationError:
                raise TreeImportError(f"line {number}: {what} '{value}' is not a valid slug") from None
            if len(value) > SLUG_MAX:
                raise TreeImportError(f"line {number}: {what} '{value}' is longer than {SLUG_MAX} characters")
            if value == RESERVED_SLUG:
                raise TreeImportError(f"line {number}: '{RESERVED_SLUG}' is reserved and not in the tree")
        if not name or len(name) > NAME_MAX:
            raise TreeImportError(f"line {number}: a name of 1 to {NAME_MAX} characters is required")
        rows.append((number, slug, name, parent))
    return rows


def categories_import(*, lines) -> TreeImportReport:
    """Create or update the categories of the CSV `lines` (an iterable of text lines)."""
    rows = _rows(lines)
    seen: dict[str, int] = {}
    for number, slug, _, _ in rows:
        if slug in seen:
            raise TreeImportError(f"line {number}: '{slug}' already given on line {seen[slug]}")
        seen[slug] = number
    report = TreeImportReport()
    with transaction.atomic():
        existing = {
            c.slug: c for c in Category.objects.select_for_update(of=("self",)).select_related("parent")
        }
        parents = {slug: (c.parent.slug if c.parent else None) for slug, c in existing.items()}
        for number, _, _, parent in rows:
            if parent is not None and parent not in parents and parent not in seen:
                raise TreeImportError(
                    f"line {number}: parent '{parent}' is neither in the file nor in the catalogue"
                )
        wanted = {**parents, **{slug: parent for _, slug, _, parent in rows}}
        for number, slug, _, parent in rows:
            problem = parent is not None and tree_problem(slug, wanted, height=subtree_height(slug, wanted))
            if problem:
                raise TreeImportError(f"line {number}: {problem}")
        moved = [slug for _, slug, _, parent in rows if slug in existing and parents[slug] != parent]
        _write(rows, existing, wanted, moved, report)
    return report


def _write(rows, existing: dict, wanted: dict, moved: list[str], report: TreeImportReport) -> None:
    """Names first; then the moved categories detached; then every new link, root first."""
    for _, slug, name, _ in rows:
        category = existing.get(slug)
        if category is None:
            existing[slug] = Category.objects.create(slug=slug, name=name)
            report.created.append(slug)
        elif category.name != name or category.is_placeholder:
            category.name, category.is_placeholder = name, False
            category.save(update_fields=["name", "is_placeholder"])
            report.updated.append(slug)
        elif slug not in moved:
            report.unchanged += 1
    Category.objects.filter(slug__in=moved).update(parent=None)
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
        Category.objects.filter(slug=slug).update(parent=existing[wanted[slug]])

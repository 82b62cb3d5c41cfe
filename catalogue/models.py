"""Categories and products: the names and prices the rankings are shown with."""

import re
from collections.abc import Callable

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import connection, models, transaction
from django.db.models.signals import pre_delete
from django.dispatch import receiver

PRODUCT_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,64}$"

# The rankings count every sale on a board of this name; no real category may take the slug.
RESERVED_SLUG = "all"

CATEGORY_IN_USE = "a category that has sales cannot be deleted (its sales name it forever); rename it instead"

# A shop's tree is a few levels deep (Toys › Board games › Strategy); a sale counts once at
# every level, so the depth bounds the boards one sale writes. The database trigger of
# migration 0004 holds the same number.
MAX_TREE_DEPTH = 6

# Every edit that gives a category a parent takes this transaction-level advisory lock (the
# database trigger of migration 0004 does, whatever writes the row), so that two edits cannot each
# see no cycle and make one. A tree import takes it first, so that what it checks stays true until
# it commits; ingest never takes it.
TREE_LOCK_SQL = "SELECT pg_advisory_xact_lock(369130, 0)"

# What a name shown on every page may not hold: control characters (line breaks, tabs, NUL…) and
# the invisible marks that reverse the direction of the text around them.
NAME_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
NAME_REFUSED_MESSAGE = "a name may not hold control or bidirectional formatting characters"
name_validator = RegexValidator(
    NAME_REFUSED, inverse_match=True, message=NAME_REFUSED_MESSAGE.capitalize() + "."
)


def tree_problem(slug: str, parents: dict[str, str | None], height: int = 1) -> str | None:
    """Why `slug`, placed under parents[slug] with a subtree `height` levels tall (itself included),
    would break the tree: a cycle or a depth past MAX_TREE_DEPTH; None when it fits.

    `parents` maps slug -> parent slug (None for a root) for the tree as it would be.
    """
    depth, seen, current = height, [slug], parents.get(slug)
    while current is not None:
        if current in seen:
            chain = " › ".join([*seen[seen.index(current) :], current])
            return f"'{slug}' cannot be placed under '{parents[slug]}': that makes a cycle ({chain})"
        seen.append(current)
        depth += 1
        current = parents.get(current)
    if depth > MAX_TREE_DEPTH:
        return (
            f"'{slug}' cannot be placed under '{parents[slug]}': the tree would be {depth} levels deep,"
            f" at most {MAX_TREE_DEPTH} are allowed"
        )
    return None


# Who else may refuse to let categories go: each takes their slugs and returns {slug: reason} for
# those it refuses. The rankings add the trees their versions count with (rankings.engine.tree),
# which name categories by slug and which the catalogue does not see.
DELETION_GUARDS: list[Callable[[list[str]], dict[str, str]]] = []


def categories_deletion_refused(slugs: list[str]) -> dict[str, str]:
    """slug -> why it may not be deleted, for those of `slugs` that a guard keeps."""
    refused: dict[str, str] = {}
    for guard in DELETION_GUARDS:
        refused = {**guard(slugs), **refused}
    return refused


def _refuse_deletion(categories: list["Category"]) -> None:
    refused = categories_deletion_refused([category.slug for category in categories])
    if refused:
        raise models.ProtectedError(
            "; ".join(f"category '{slug}' {reason}" for slug, reason in sorted(refused.items())),
            {category for category in categories if category.slug in refused},
        )


class CategoryQuerySet(models.QuerySet):
    def delete(self):
        with transaction.atomic():
            _refuse_deletion(list(self))
            return super().delete()


class Category(models.Model):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)
    # Created from a sale event rather than by an editor: its name needs completing.
    is_placeholder = models.BooleanField(default=False, db_index=True)
    # Set when a stored sale first names the category; never cleared, since raw sales are kept forever.
    has_sales = models.BooleanField(default=False, editable=False)
    # A sale counts once in its categories and once in every ancestor; the tree that counts is the
    # one frozen into the active ranking version, so an edit here waits for a rebuild (docs/architecture.md, "A tree per version").
    parent = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="children",
        help_text=f"The category above this one (at most {MAX_TREE_DEPTH} levels); "
        "counts change through a rebuild and switch.",
    )

    objects = CategoryQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "categories"
        # The lists page through the categories by name (a million of them), all of them or those
        # under one parent (None: the top of the tree): each page is a walk of one of these
        # indexes, never a sort of the table.
        indexes = [
            models.Index(fields=["name", "slug"], name="category_by_name"),
            models.Index(fields=["parent", "name", "slug"], name="category_by_parent_name"),
        ]

    def __str__(self):
        return self.name

    def delete(self, *args, **kwargs):
        with transaction.atomic():
            _refuse_deletion([self])
            return super().delete(*args, **kwargs)

    def clean(self):
        super().clean()
        if self.parent_id is None:
            return
        if self.parent.slug == RESERVED_SLUG:
            raise ValidationError({"parent": f"'{RESERVED_SLUG}' is not in the tree"})
        stored, stored_parent = Category.objects.filter(pk=self.pk).values_list(
            "slug", "parent_id"
        ).first() or (None, None)
        if stored == self.slug and stored_parent == self.parent_id:
            return  # the tree does not change
        # The slug may be edited in the same form: the tree is keyed by the stored one.
        parents = {
            child: (self.slug if stored is not None and parent == stored else parent)
            for child, parent in _ancestry(self.parent_id).items()
            if child != stored
        }
        parents[self.slug] = self.parent.slug
        height = _height_below(self.pk) if stored is not None else 1
        problem = tree_problem(self.slug, parents, height=height)
        if problem:
            raise ValidationError({"parent": problem})


def _ancestry(pk: int) -> dict[str, str | None]:
    """slug -> parent slug for category `pk` and each of its ancestors: a lookup per level (at most
    MAX_TREE_DEPTH and one, as the database keeps the tree), never the whole catalogue."""
    parents: dict[str, str | None] = {}
    slug_of: dict[int, str] = {}
    chain: list[tuple[str, int | None]] = []
    at: int | None = pk
    while at is not None and at not in slug_of and len(chain) <= MAX_TREE_DEPTH:
        slug, parent_id = Category.objects.filter(pk=at).values_list("slug", "parent_id").get()
        slug_of[at] = slug
        chain.append((slug, parent_id))
        at = parent_id
    for child, parent_pk in chain:
        parents[child] = None if parent_pk is None else slug_of.get(parent_pk)
    return parents


# How many levels the subtree under a category spans (itself included), counted no deeper than one
# past the limit: enough to refuse a move, and the walk the database's own guard makes.
_HEIGHT_SQL = f"""
WITH RECURSIVE below(id, level) AS (
    SELECT %s::bigint, 1
    UNION ALL
    SELECT c.id, below.level + 1 FROM catalogue_category c JOIN below ON c.parent_id = below.id
    WHERE below.level <= {MAX_TREE_DEPTH}
)
SELECT max(level) FROM below
"""


def _height_below(pk: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_HEIGHT_SQL, [pk])
        return cursor.fetchone()[0]


def subtree_height(slug: str, parents: dict[str, str | None]) -> int:
    """How many levels the subtree under `slug` spans, itself included."""
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        if parent is not None:
            children.setdefault(parent, []).append(child)
    height, level, seen = 0, [slug], {slug}
    while level:
        height += 1
        level = [c for s in level for c in children.get(s, []) if c not in seen]
        seen.update(level)
    return height


def path_of(slug: str, parents: dict[str, str | None]) -> list[str]:
    """The slugs from `slug`'s root down to `slug` (a cycle, which the database refuses, stops it)."""
    path = [slug]
    current = parents.get(slug)
    while current is not None and current not in path:
        path.append(current)
        current = parents.get(current)
    return path[::-1]


@receiver(pre_delete, sender=Category)
def _keep_categories_with_sales(sender, instance: Category, **kwargs):
    """Refuse to delete a category that sales name, for the ORM and the admin alike.

    The flag is read again under a row lock (the delete runs in a transaction),
    so an ingest that marks the category meanwhile either waits for the delete
    and then re-creates the category, or is seen here.
    """
    in_use = Category.objects.select_for_update().filter(pk=instance.pk, has_sales=True).exists()
    if in_use:
        raise models.ProtectedError(
            f"category '{instance.slug}' has sales and cannot be deleted; rename it instead", {instance}
        )


class Product(models.Model):
    product_id = models.CharField(
        "product id",
        max_length=64,
        unique=True,
        validators=[
            RegexValidator(PRODUCT_ID_PATTERN),
            # Path segments a URL cannot carry: a product so named could never be looked up.
            RegexValidator(r"^\.{1,2}$", inverse_match=True, message="'.' and '..' cannot be product ids."),
        ],
        help_text="The shop's id, as used in sale events.",
    )
    name = models.CharField(max_length=200)
    price_cents = models.BigIntegerField(
        default=0, validators=[MinValueValidator(0)], help_text="Unit price in cents."
    )
    categories = models.ManyToManyField(Category, related_name="products", blank=True)
    # When an editor sets it, the product's release; else its earliest sale's time (the new releases).
    released_at = models.DateTimeField(
        "released at", null=True, blank=True, db_index=True, help_text="Leave empty: the first sale's time."
    )
    # Created from a sale event rather than by an editor: name and price need completing.
    is_placeholder = models.BooleanField(default=False, db_index=True)

    class Meta:
        ordering = ["product_id"]
        constraints = [
            # A sale without an amount costs price × qty: a negative price would be negative revenue.
            models.CheckConstraint(
                condition=models.Q(price_cents__gte=0),
                name="product_price_not_negative",
                violation_error_message="The price may not be negative.",
            ),
        ]

    def __str__(self):
        return self.name or self.product_id

"""The shop's catalogue, pushed in bulk: products (names, prices, categories, releases) and the
category tree, each item validated on its own and rejected by its index, the valid ones stored.

A push is a bounded number of statements whatever its size: products take one lookup of the
categories they name, then, in one transaction, one of the products, one insert of the new
categories, one upsert of the products and one statement for their links; categories take the
tree import's statements (catalogue.tree_import, the code path of import_categories, whose tree
edits wait for a rebuild). Once committed, a push raises the readers' names stamp, so that every
process shows the new names within about a second (rankings.serving.names).

A product's catalogue categories are what the shop last pushed for it: a push that gives
`categories` files it under exactly those (at most MAX_EVENT_CATEGORIES; unknown ones become
placeholders, at most MAX_BATCH_NEW_CATEGORIES a push), a push that leaves them out keeps what it
had (a placeholder keeps the categories of its first event). They are what a sale without
categories counts in from then on and what its badges list; the sales stored already keep the
categories they counted in. A sale never adds to them.
"""

import datetime as dt
import logging
from dataclasses import dataclass, field

from django.db import DatabaseError, connection, transaction
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalogue.models import Category, Product
from catalogue.money import to_cents
from catalogue.tree_import import (
    NAME_MAX,
    SLUG_MAX,
    CategoryRow,
    categories_write,
    name_problem,
    slug_problem,
)
from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.engine.names_copy import names_mended
from rankings.engine.shards import ALL
from rankings.ingest.batch import keyed_lookup, retried, too_many_new
from rankings.ingest.events import (
    AmountField,
    CategoriesField,
    EventValidator,
    ItemField,
    ItemSerializer,
    ProductIdField,
    TimestampField,
)

log = logging.getLogger(__name__)

# Items of one push: a whole catalogue is sent in pushes of this many.
CATALOGUE_BATCH_MOST = 5_000


# --- the items' fields --------------------------------------------------------------------------


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": NAME_MAX, "example": "Wooden train"})
class NameField(ItemField):
    """A name shown on every page: 1 to 200 characters once trimmed, no control or bidirectional characters."""

    default_error_messages = {"invalid": "{name} must be a string"}

    def to_internal_value(self, data) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        name = data.strip()
        problem = name_problem(name)
        if problem:
            raise serializers.ValidationError(problem)
        return name

    def to_representation(self, value):
        return value


_SLUG_SCHEMA = {"type": "string", "pattern": f"^[-a-zA-Z0-9_]{{1,{SLUG_MAX}}}$", "not": {"enum": [ALL]}}


@extend_schema_field({**_SLUG_SCHEMA, "example": "board-games"})
class TreeSlugField(ItemField):
    """A category's slug, as the tree takes it (catalogue.tree_import.slug_problem)."""

    default_error_messages = {"invalid": "{name} must be a string"}

    def to_internal_value(self, data) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        problem = slug_problem(data, self.field_name or "slug")
        if problem:
            raise serializers.ValidationError(problem)
        return data

    def to_representation(self, value):
        return value


@extend_schema_field(
    {**_SLUG_SCHEMA, "nullable": True, "description": "the category above it; null at the top of the tree"}
)
class ParentField(TreeSlugField):
    default_error_messages = {"required": "parent is required (null for a category at the top of the tree)"}

    def validate_empty_values(self, data):
        if data is None:
            return True, None
        return super().validate_empty_values(data)


@extend_schema_field(
    {
        "oneOf": [{"type": "string"}, {"type": "number", "minimum": 0}],
        "nullable": True,
        "description": "unit price, a decimal ≥ 0 with at most 2 places and 12 digits before the point"
        " (what a sale without an amount costs per unit); left out or null: unchanged (0 for a new product)",
        "example": "12.50",
    }
)
class PriceField(AmountField):
    pass


@extend_schema_field(
    {
        "type": "array",
        "nullable": True,
        "maxItems": rankings_settings.MAX_EVENT_CATEGORIES,
        "items": {"type": "string", "pattern": _SLUG_SCHEMA["pattern"], "not": {"enum": [ALL]}},
        "description": "category slugs the product is filed under, replacing those it had ([]: none;"
        " unknown ones become placeholders); left out or null: unchanged",
        "example": ["toys"],
    }
)
class ProductCategoriesField(CategoriesField):
    """A product's categories: null, like leaving them out, keeps those it has."""

    def validate_empty_values(self, data):
        if data is None:
            return True, None
        return super().validate_empty_values(data)


@extend_schema_field(
    {
        "type": "string",
        "format": "date-time",
        "nullable": True,
        "description": "its release, ISO-8601 with a UTC offset; null: none (its first sale's time"
        " counts); left out: unchanged",
        "example": "2026-03-01T09:00:00Z",
    }
)
class ReleasedAtField(TimestampField):
    def validate_empty_values(self, data):
        if data is None:
            return True, None
        return super().validate_empty_values(data)


class ProductItemSerializer(ItemSerializer):
    """One product of POST /v1/catalogue/products (docs/api.md); unknown keys are ignored."""

    default_error_messages = {"invalid": "product must be a JSON object"}

    id = ProductIdField()
    name = NameField()
    price = PriceField(required=False)
    categories = ProductCategoriesField(required=False)
    releasedAt = ReleasedAtField(required=False)  # noqa: N815 - the wire's own name

    class Meta:
        ref_name = "CatalogueProduct"


class CategoryItemSerializer(ItemSerializer):
    """One category of POST /v1/catalogue/categories (docs/api.md); unknown keys are ignored."""

    default_error_messages = {"invalid": "category must be a JSON object"}

    slug = TreeSlugField()
    name = NameField()
    # DRF's serializer metaclass takes declared fields off the class: this never shadows Field.parent.
    parent = ParentField()  # type: ignore[assignment]

    class Meta:
        ref_name = "CatalogueCategory"


# --- pushes -------------------------------------------------------------------------------------


@dataclass
class PushResult:
    created: int = 0
    updated: int = 0  # the items that named a product or category the catalogue had, changed or not
    rejected: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"created": self.created, "updated": self.updated, "rejected": self.rejected}

    def reject(self, index: int, error: str) -> None:
        self.rejected.append({"index": index, "error": error})


def _validated(
    items: list, serializer_class: type[ItemSerializer], result: PushResult
) -> list[tuple[int, dict]]:
    """(index, data) of the items whose fields are valid; the others rejected into `result`."""
    validate = EventValidator(serializer_class)
    valid = []
    for index, item in enumerate(items):
        data, error = validate(item)
        if data is None:
            result.reject(index, error or "invalid")
        else:
            valid.append((index, data))
    return valid


def _names_changed(products: list[str] | None = None) -> None:
    """After a push commits: Redis's copy of its products' names mended, then the readers told to
    forget the names they remember (they read the pushed ones there). The push has committed: a
    failure here is logged, the copy of changed names mends it within seconds."""
    if products:
        try:
            names_mended(products)
        except (store.StoreError, DatabaseError):
            log.warning("could not copy %d pushed names to Redis now", len(products), exc_info=True)
    try:
        store.names_changed()
    except store.StoreError:
        log.warning(
            "could not tell the readers that names changed: they show them within a minute", exc_info=True
        )


def products_push(*, products: list) -> PushResult:
    """Create or update `products` (items of POST /v1/catalogue/products), in order; return what
    became of each."""
    result = PushResult()
    valid = []
    first: dict[str, int] = {}
    for index, data in _validated(products, ProductItemSerializer, result):
        if first.setdefault(data["id"], index) != index:
            result.reject(index, f"'{data['id']}' is already given at index {first[data['id']]}")
        else:
            valid.append((index, data))
    valid, new = _new_categories_bounded(valid, result)
    if valid:
        result.created = retried(lambda _: _products_write([data for _, data in valid], new))
        result.updated = len(valid) - result.created
        pushed = [data["id"] for _, data in valid]
        transaction.on_commit(lambda: _names_changed(pushed))
    result.rejected.sort(key=lambda r: r["index"])
    return result


def categories_push(*, categories: list) -> PushResult:
    """Create or update `categories` (items of POST /v1/catalogue/categories) as import_categories
    would, but rejecting the items the tree cannot hold one by one; return what became of each.
    TreeImportError when the database refused the write (nothing is stored)."""
    result = PushResult()
    rows = [
        (index, CategoryRow(data["slug"], data["name"], data["parent"]))
        for index, data in _validated(categories, CategoryItemSerializer, result)
    ]
    if rows:
        report = retried(
            lambda _: categories_write(
                rows=rows,
                source="this request's accepted categories",
                label=lambda index: f"index {index}",
                whole=False,
            )
        )
        for index, error in report.refused.items():
            result.reject(index, error)
        result.created = len(report.created)
        result.updated = len(rows) - len(report.refused) - result.created
        transaction.on_commit(_names_changed)
    result.rejected.sort(key=lambda r: r["index"])
    return result


_PRODUCTS = Product._meta.db_table
_CATEGORIES = Category._meta.db_table
_LINKS = Product.categories.through._meta.db_table

_KNOWN_CATEGORIES = f"SELECT slug FROM {_CATEGORIES} WHERE slug IN (SELECT unnest(%s::text[]))"


def _new_categories_bounded(
    valid: list[tuple[int, dict]], result: PushResult
) -> tuple[list[tuple[int, dict]], list[str]]:
    """The products, in order, up to those whose categories the catalogue does not have would take
    the push past MAX_BATCH_NEW_CATEGORIES (those rejected into `result`), and the new categories
    of the others."""
    named = {slug for _, data in valid for slug in data.get("categories") or ()}
    if not named:
        return valid, []
    with connection.cursor() as cursor:
        cursor.execute(_KNOWN_CATEGORIES, [sorted(named)])
        new = named - {slug for (slug,) in cursor.fetchall()}
    most = rankings_settings.MAX_BATCH_NEW_CATEGORIES
    taken: set[str] = set()
    kept = []
    for index, data in valid:
        wanted = new.intersection(data.get("categories") or ()) - taken
        if len(taken) + len(wanted) > most:
            result.reject(index, too_many_new(most, "product"))
        else:
            taken |= wanted
            kept.append((index, data))
    return kept, sorted(taken)


_STORED = keyed_lookup("product_id, price_cents, released_at", _PRODUCTS, "product_id")
# Placeholders for the categories the products name that the catalogue lacks, by slug (concurrent
# writers insert in one order); one created meanwhile is left as it is.
_NEW_CATEGORIES = f"""
INSERT INTO {_CATEGORIES} (slug, name, is_placeholder, has_sales)
SELECT slug, slug, true, false FROM unnest(%s::text[]) AS slug ORDER BY slug
ON CONFLICT (slug) DO NOTHING
"""
# Every product of the push, by product id as ingest inserts its placeholders (concurrent writers
# wait rather than deadlock); a row left as it was is not written. Returns whether each row written
# was inserted.
_UPSERT = f"""
INSERT INTO {_PRODUCTS} AS p (product_id, name, price_cents, released_at, is_placeholder)
SELECT product_id, name, price_cents, released_at, false
FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::timestamptz[]) AS r(product_id, name, price_cents, released_at)
ORDER BY product_id
ON CONFLICT (product_id) DO UPDATE
SET name = excluded.name, price_cents = excluded.price_cents, released_at = excluded.released_at, is_placeholder = false
WHERE (p.name, p.price_cents, p.released_at, p.is_placeholder)
    IS DISTINCT FROM (excluded.name, excluded.price_cents, excluded.released_at, false)
RETURNING xmax = 0
"""
# The links of the products in %(filed)s become exactly the (product, slug) pairs given: one
# statement, the links no longer wanted deleted and the new ones inserted.
_FILE = f"""
WITH wanted AS (
    SELECT p.id AS product_id, c.id AS category_id
    FROM unnest(%(products)s::text[], %(slugs)s::text[]) AS w(product_id, slug)
    JOIN {_PRODUCTS} p ON p.product_id = w.product_id
    JOIN {_CATEGORIES} c ON c.slug = w.slug
), dropped AS (
    DELETE FROM {_LINKS} l USING {_PRODUCTS} p
    WHERE l.product_id = p.id AND p.product_id IN (SELECT unnest(%(filed)s::text[]))
      AND NOT EXISTS (SELECT 1 FROM wanted w WHERE w.product_id = l.product_id AND w.category_id = l.category_id)
)
INSERT INTO {_LINKS} (product_id, category_id)
SELECT product_id, category_id FROM wanted ORDER BY product_id, category_id
ON CONFLICT DO NOTHING
"""


def _products_write(products: list[dict], new_categories: list[str]) -> int:
    """Store `products` (validated items, each id once), what an item leaves out kept as it was;
    return how many were created."""
    with connection.cursor() as cursor:
        cursor.execute(_STORED, ["\n".join(data["id"] for data in products)])
        stored = {pid: (price, released) for pid, price, released in cursor.fetchall()}
        if new_categories:
            cursor.execute(_NEW_CATEGORIES, [new_categories])
        rows = [_merged(data, stored.get(data["id"])) for data in products]
        cursor.execute(_UPSERT, [list(column) for column in zip(*rows, strict=True)])
        created = sum(1 for (inserted,) in cursor.fetchall() if inserted)
        filed = [data for data in products if data.get("categories") is not None]
        if filed:
            pairs = [(data["id"], slug) for data in filed for slug in data["categories"]]
            cursor.execute(
                _FILE,
                {
                    "products": [pid for pid, _ in pairs],
                    "slugs": [slug for _, slug in pairs],
                    "filed": [data["id"] for data in filed],
                },
            )
    return created


def _merged(data: dict, stored: tuple[int, dt.datetime | None] | None) -> tuple:
    """(id, name, price in cents, release) of a product as the item makes it: what the item leaves
    out (a price left out or null, a release left out) as stored, or a new product's default."""
    price, released = stored or (0, None)
    if data.get("price") is not None:
        price = to_cents(data["price"])
    return data["id"], data["name"], price, data.get("releasedAt", released)

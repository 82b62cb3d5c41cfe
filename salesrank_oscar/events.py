"""What salesrank is told, made from Oscar's objects: sale and return events, products, categories."""

import datetime as dt
import re
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Sum
from oscar.core.loading import get_class, get_model

from .conf import setting

# salesrank's category slugs: at most 50 of these, and not "all" (its board of every sale).
SALESRANK_SLUG = re.compile(r"[A-Za-z0-9_-]{1,50}")
CENT = Decimal("0.01")
# salesrank's longest product or category name; Oscar's may be longer (255).
NAME_MOST = 200


def instant(moment: dt.datetime) -> str:
    """An aware time as ISO-8601 in UTC, as salesrank reads a `ts`."""
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def ranked_product(product):
    """The product salesrank ranks for `product`: a variant (a child) counts for its parent, the
    product a shopper browses, whose page shows the badge."""
    return product.parent if product.is_child else product


def product_key(product) -> str:
    """The product's id in salesrank (SALESRANK_PRODUCT_ID: its primary key or its UPC)."""
    product = ranked_product(product)
    if setting("SALESRANK_PRODUCT_ID") == "upc":
        return product.upc or ""
    return str(product.pk)


def category_key(category) -> str:
    """The category's slug in salesrank (SALESRANK_CATEGORY_ID): Oscar's slug, or "c<pk>" for one
    that cannot be a salesrank slug (non-ASCII, longer than 50, "all") or when set to "id"."""
    slug = category.slug
    if setting("SALESRANK_CATEGORY_ID") == "slug" and SALESRANK_SLUG.fullmatch(slug) and slug != "all":
        return slug
    return f"c{category.pk}"


def line_amount(line) -> Decimal:
    """What the line cost the buyer: its price after discounts, tax included where it is known."""
    if line.line_price_incl_tax is not None:
        return line.line_price_incl_tax
    return line.line_price_excl_tax


def sale_id(line) -> str:
    """A line's event id: its order's number and its own id, the same however often it is sent."""
    return f"{line.order.number}-{line.pk}"


def sale_event(line) -> dict:
    """The sale event of an order line, as placed."""
    product = line.product
    return {
        "id": sale_id(line),
        "ts": instant(line.order.date_placed),
        "productId": product_key(product) if product is not None else (line.upc or ""),
        "categories": sorted({category_key(c) for c in product.get_categories()})
        if product is not None
        else [],
        "qty": line.quantity,
        "amount": str(line_amount(line)),
    }


def refund_amount(line, refunded_before: int, refunded: int) -> Decimal:
    """The refund of `refunded` more units of `line`, pro rata to the cent, counted so that the
    refunds of every unit add up to the line's amount exactly (never a cent past it)."""
    amount = line_amount(line)

    def up_to(units: int) -> Decimal:
        return (amount * units / line.quantity).quantize(CENT, rounding=ROUND_HALF_UP)

    return up_to(refunded_before + refunded) - up_to(refunded_before)


def return_event(line_quantity) -> dict:
    """The return event of a refund recorded on a line (a PaymentEventQuantity of a refund type)."""
    PaymentEventQuantity = get_model("order", "PaymentEventQuantity")
    line, event = line_quantity.line, line_quantity.event
    refunded_before = (
        PaymentEventQuantity.objects.filter(
            line=line,
            event__event_type__code__in=setting("SALESRANK_REFUND_EVENT_TYPES"),
            pk__lt=line_quantity.pk,
        ).aggregate(units=Sum("quantity"))["units"]
        or 0
    )
    product = line.product
    return {
        "id": f"{sale_id(line)}-r{line_quantity.pk}",
        "ts": instant(event.date_created),
        "productId": product_key(product) if product is not None else (line.upc or ""),
        "qty": -line_quantity.quantity,
        "amount": str(refund_amount(line, refunded_before, line_quantity.quantity)),
        "returnOf": sale_id(line),
    }


def is_refund(event) -> bool:
    return event.event_type.code in setting("SALESRANK_REFUND_EVENT_TYPES")


def _price(product, strategy) -> str | None:
    info = strategy.fetch_for_parent(product) if product.is_parent else strategy.fetch_for_product(product)
    price = info.price
    if not price.exists:
        return None
    value = price.incl_tax if price.is_tax_known else price.excl_tax
    return str(value.quantize(CENT))


def product_entries(products) -> list[dict]:
    """The catalogue entries of products (each a standalone or a parent product) as salesrank
    takes them: id, name (its first 200 characters), price (what the shop charges now; null,
    which leaves salesrank's as it was, without one), categories and the release instant (when the
    product was created)."""
    strategy = get_class("partner.strategy", "Selector")().strategy()
    return [
        {
            "id": product_key(product),
            "name": product.get_title()[:NAME_MOST],
            "price": _price(product, strategy),
            "categories": sorted({category_key(c) for c in product.get_categories()}),
            "releasedAt": instant(product.date_created),
        }
        for product in products
    ]


def category_entries(categories) -> list[dict]:
    """The entries of categories as salesrank takes them: slug, name and parent's slug. `categories`
    come in the order of Oscar's tree paths, so a parent comes before its children; the parents
    not among them are read in one query."""
    categories = list(categories)
    Category = get_model("catalogue", "Category")
    step = Category.steplen
    parents = {category.path: category for category in categories}
    wanted = {category.path[:-step] for category in categories if category.depth > 1} - parents.keys()
    parents.update((category.path, category) for category in Category.objects.filter(path__in=wanted))
    return [
        {
            "slug": category_key(category),
            "name": category.name[:NAME_MOST],
            "parent": category_key(parents[category.path[:-step]]) if category.depth > 1 else None,
        }
        for category in categories
    ]

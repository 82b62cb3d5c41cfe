"""The template tags' questions to salesrank: a product's ranks and a category's best sellers.

Answers are kept in Django's cache for SALESRANK_CACHE_SECONDS. A read that fails (salesrank down,
slower than SALESRANK_READ_TIMEOUT, throttling, failing) answers nothing and marks salesrank down
for SALESRANK_DOWN_SECONDS, during which no page asks it again: a page pays at most one timeout
per that period and process (per cache), and renders without the badges meanwhile.
"""

import hashlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from django.core.cache import cache
from oscar.core.loading import get_model

from . import client, events
from .conf import setting

DOWN_MARK = "salesrank_oscar:down"
# salesrank's bound on a board read's limit.
LIMIT_MOST = 100


@dataclass(frozen=True)
class Badge:
    rank: int
    category: Any  # Oscar's Category


@dataclass(frozen=True)
class BestSeller:
    rank: int
    product: Any  # Oscar's Product


def _ask(path: str, params: dict) -> dict | None:
    """salesrank's reply to GET `path`, from the cache when it was asked lately; None when it failed."""
    question = f"{path}?{urlencode(sorted(params.items()))}"
    key = "salesrank_oscar:read:" + hashlib.sha256(question.encode()).hexdigest()
    reply = cache.get(key)
    if reply is not None:
        return reply
    if cache.get(DOWN_MARK):
        return None
    reply = client.read(path, params)
    if reply is None:
        cache.set(DOWN_MARK, True, setting("SALESRANK_DOWN_SECONDS"))
        return None
    cache.set(key, reply, setting("SALESRANK_CACHE_SECONDS"))
    return reply


def _board() -> dict:
    return {"window": setting("SALESRANK_WINDOW"), "metric": setting("SALESRANK_METRIC")}


def product_badges(product) -> list[Badge]:
    """The product's ranks in its categories (those the shop shows), best first."""
    product = events.ranked_product(product)
    key = events.product_key(product)
    if not key:
        return []
    reply = _ask(f"/v1/products/{quote(key, safe='')}/ranks", _board()) or {}
    categories = {events.category_key(category): category for category in product.get_categories()}
    badges = []
    for item in reply.get("ranks") or []:
        if (
            isinstance(item, dict)
            and isinstance(item.get("rank"), int)
            and item.get("category") in categories
        ):
            badges.append(Badge(item["rank"], categories[item["category"]]))
    return sorted(badges, key=lambda badge: (badge.rank, badge.category.name))


def category_bestsellers(category, limit: int) -> list[BestSeller]:
    """The category's first `limit` best sellers (at most 100) that the shop shows."""
    limit = max(1, min(int(limit), LIMIT_MOST))
    path = f"/v1/categories/{quote(events.category_key(category), safe='')}/top"
    reply = _ask(path, {**_board(), "limit": limit}) or {}
    items = [
        item
        for item in reply.get("items") or []
        if isinstance(item, dict)
        and isinstance(item.get("rank"), int)
        and isinstance(item.get("productId"), str)
    ]
    products = _products_by_key([item["productId"] for item in items])
    return [
        BestSeller(item["rank"], products[item["productId"]])
        for item in items
        if item["productId"] in products
    ]


def _products_by_key(keys: list[str]) -> dict[str, Any]:
    """The shop's public products of these salesrank ids, in one query."""
    Product = get_model("catalogue", "Product")
    public = Product.objects.browsable()
    if setting("SALESRANK_PRODUCT_ID") == "upc":
        found = public.filter(upc__in=keys)
    else:
        found = public.filter(pk__in=[int(key) for key in keys if key.isdigit()])
    return {events.product_key(product): product for product in found}

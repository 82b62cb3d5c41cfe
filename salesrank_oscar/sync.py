"""The whole catalogue pushed to salesrank: the category tree, then every product."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from oscar.core.loading import get_model

from . import client, events
from .conf import setting

# The rejections a sync reports one by one; past them it counts.
REASONS_MOST = 100


@dataclass
class Synced:
    created: int = 0
    updated: int = 0
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)


def catalogue_sync() -> Synced:
    """Push every browsable category (parents first) and every product that is not a variant, in
    batches of SALESRANK_BATCH_SIZE. Raises client.Unreachable or client.Refused when salesrank
    does not take a batch."""
    Category = get_model("catalogue", "Category")
    Product = get_model("catalogue", "Product")
    synced = Synced()
    categories = Category.objects.browsable()
    _push(
        "/v1/catalogue/categories", "categories", _pages(categories, "path"), events.category_entries, synced
    )
    products = (
        Product.objects.filter(parent=None)
        .prefetch_browsable_categories()
        .prefetch_related("stockrecords", "children__stockrecords")
    )
    _push("/v1/catalogue/products", "products", _pages(products, "pk"), events.product_entries, synced)
    return synced


def _pages(queryset, order: str) -> Iterator[list]:
    """The queryset a batch at a time, by a cursor on `order` (a unique column)."""
    size = setting("SALESRANK_BATCH_SIZE")
    page = list(queryset.order_by(order)[:size])
    while page:
        yield page
        after = getattr(page[-1], order)
        page = list(queryset.filter(**{f"{order}__gt": after}).order_by(order)[:size])


def _push(
    path: str, key: str, pages: Iterator[list], entries: Callable[[list], list[dict]], synced: Synced
) -> None:
    for page in pages:
        sent = entries(page)
        reply = client.post(path, {key: sent})
        synced.created += int(reply.get("created", 0))
        synced.updated += int(reply.get("updated", 0))
        for item in reply.get("rejected") or []:
            synced.rejected += 1
            if len(synced.reasons) < REASONS_MOST:
                entry = sent[item["index"]]
                synced.reasons.append(
                    f"{key[:-1]} {entry.get('slug') or entry.get('id')}: {item.get('error')}"
                )

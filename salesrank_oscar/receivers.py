"""What the app listens to: order lines placed, refunds recorded, products and categories saved.

Each receiver writes to the outbox in the transaction of the save it hears about. Oscar's
`OrderCreator.place_order` creates the order and its lines inside `transaction.atomic()` and sends
`order_placed` only after that block has committed; the lines' `post_save` runs inside it, so an
order is committed with its outbox rows or not at all.
"""

from collections.abc import Callable

from django.db.models.signals import ModelSignal, m2m_changed, post_delete, post_init, post_save
from oscar.core.loading import get_model

from . import events, outbox
from .models import Kind


def connect() -> None:
    connections: list[tuple[ModelSignal, str, str, Callable[..., None]]] = [
        (post_save, "order", "Line", _line_saved),
        (post_save, "order", "PaymentEventQuantity", _line_refunded),
        (post_save, "catalogue", "Product", _product_saved),
        (post_save, "catalogue", "ProductCategory", _product_filed),
        (post_delete, "catalogue", "ProductCategory", _product_filed),
        (m2m_changed, "catalogue", "ProductCategory", _products_filed),
        (post_init, "partner", "StockRecord", _price_read),
        (post_save, "partner", "StockRecord", _price_saved),
        (post_save, "catalogue", "Category", _category_saved),
    ]
    for signal, app_label, model, receiver in connections:
        signal.connect(
            receiver, sender=get_model(app_label, model), dispatch_uid=f"salesrank-{receiver.__name__}"
        )


def _line_saved(sender, instance, created=False, raw=False, **kwargs):
    if created and not raw:
        outbox.sale_record(line=instance)


def _line_refunded(sender, instance, created=False, raw=False, **kwargs):
    if created and not raw and events.is_refund(instance.event):
        outbox.return_record(line_quantity=instance)


def _product_saved(sender, instance, raw=False, **kwargs):
    """A product saved: the one salesrank ranks for it (a variant's parent) is sent again."""
    if not raw:
        outbox.object_record(kind=Kind.PRODUCT, pk=instance.parent_id or instance.pk)


def _product_filed(sender, instance, raw=False, **kwargs):
    """A category given to a product or taken from it (only a parent or standalone product has them)."""
    if not raw:
        outbox.object_record(kind=Kind.PRODUCT, pk=instance.product_id)


def _products_filed(sender, instance, action, reverse, pk_set, **kwargs):
    """product.categories.add(…) or category.product_set.remove(…): no row of ProductCategory is
    saved one by one, so no post_save says so."""
    if action in ("post_add", "post_remove"):
        for pk in pk_set if reverse else [instance.pk]:
            outbox.object_record(kind=Kind.PRODUCT, pk=pk)
    elif action == "post_clear" and not reverse:
        outbox.object_record(kind=Kind.PRODUCT, pk=instance.pk)


def _price_read(sender, instance, **kwargs):
    """A stock record's price as read, to tell a new price from a save of its stock."""
    instance._salesrank_price = instance.__dict__.get("price")


def _price_saved(sender, instance, created=False, raw=False, **kwargs):
    """Every order allocates stock, which Oscar announces as a save of its stock records: only a
    new price (or a new stock record) is news to salesrank."""
    price = instance.__dict__.get("price")
    if raw or (not created and price == getattr(instance, "_salesrank_price", None)):
        return
    instance._salesrank_price = price
    outbox.object_record(kind=Kind.PRODUCT, pk=instance.product.parent_id or instance.product_id)


def _category_saved(sender, instance, raw=False, **kwargs):
    if not raw:
        outbox.object_record(kind=Kind.CATEGORY, pk=instance.pk)

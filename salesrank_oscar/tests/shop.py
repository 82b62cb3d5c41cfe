"""The shop's side of a test: orders placed the way Oscar places them."""

from oscar.core.loading import get_class, get_model
from oscar.test.factories import create_order


def order_placed(*lines, number=None):
    """An order of (product, quantity) lines, placed by Oscar's own OrderCreator.place_order (through
    Oscar's test factory, which totals the basket as a checkout does)."""
    Basket = get_model("basket", "Basket")
    basket = Basket.objects.create()
    basket.strategy = get_class("partner.strategy", "Selector")().strategy()
    for product, quantity in lines:
        basket.add_product(product, quantity)
    return create_order(basket=basket, number=number)

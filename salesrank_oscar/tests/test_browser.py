"""A shopper's order in the example shop, through Oscar's checkout in Chromium, moves the product's
badge: the shop's Celery worker sends the order when it commits, salesrank's next tick ranks it."""

import pytest
from django.core.management import call_command
from oscar.core.loading import get_model

from tests import processes
from tests.browser import shot

from .pages import salesrank_texts

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def shop(wired, shop_worker, live_server, settings):
    """The example shop's demo catalogue, served live, sending on commit to its Celery worker; its
    chess set."""
    settings.SALESRANK_SEND_ON_COMMIT = True
    settings.SALESRANK_CACHE_SECONDS = 1
    call_command("shop_demo", verbosity=0)
    return get_model("catalogue", "Product").objects.get(title="Chess set")


def test_an_order_placed_in_the_shop_shows_as_the_products_badge_after_the_next_tick(
    shop, page, wired, shop_worker
):
    # given: the product has no rank yet
    page.goto(shop.get_absolute_url())
    assert salesrank_texts(page.content())["salesrank-badge"] == []
    # when: a guest buys it through Oscar's checkout
    page.get_by_role("button", name="Add to basket").click()
    page.goto("/basket/")
    page.get_by_role("link", name="Proceed to checkout").click()
    page.get_by_label("My email address is").fill("shopper@example.com")
    page.get_by_role("button", name="Continue").click()
    for label, value in [
        ("First name", "Ada"),
        ("Last name", "Lovelace"),
        ("First line of address", "1 Main Street"),
        ("City", "London"),
        ("Post/Zip-code", "SW1A 1AA"),
    ]:
        page.get_by_label(label).fill(value)
    page.get_by_role("button", name="Continue").click()
    page.get_by_role("link", name="Continue").click()  # no payment details in the example
    page.get_by_role("button", name="Place order").first.click()
    page.wait_for_url("**/checkout/thank-you/")

    # then: once the worker has sent it and a tick has counted it, its page says so
    def badge():
        page.goto(shop.get_absolute_url())
        return salesrank_texts(page.content())["salesrank-badge"]

    processes.wait_until(
        badge,
        timeout=30,
        what="the badge on the product's page",
        watch=[wired.web, shop_worker],
        interval=0.5,
    )
    assert badge() == ["#1 in Board games"]
    shot(page, "oscar-product-badge")

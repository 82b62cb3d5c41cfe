"""Oscar's product and category pages with salesrank's badges and best sellers; and without them,
never with an error, while salesrank is down or slow."""

import io
import time
from decimal import Decimal as D

import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command
from oscar.test.factories import create_product

from salesrank_oscar.models import Kind, OutboxEntry, State

from .pages import salesrank_texts
from .proxy import Proxy
from .shop_side import order_placed

pytestmark = pytest.mark.django_db


@pytest.fixture
def sold(wired, catalogue, settings):
    """Chess (3) in Board games; a globe (2) and the atlas (1) in Books: sent, and on the boards."""
    settings.SALESRANK_SEND_BACKOFF = 0.1
    globe = create_product(title="Globe", price=D("30.00"), num_in_stock=100)
    globe.categories.add(catalogue["books"])
    orders = [order_placed((catalogue["chess"], 3), (globe, 2)), order_placed((catalogue["atlas"], 1))]
    _send()
    wired.wait_units(str(catalogue["chess"].pk), 3)
    wired.wait_units(str(catalogue["atlas"].pk), 1, category=catalogue["books"].slug)
    return {**catalogue, "globe": globe, "orders": orders}


def _send():
    call_command("salesrank_send", stdout=io.StringIO())


def _page(client, obj) -> tuple[dict, float]:
    started = time.monotonic()
    page = client.get(obj.get_absolute_url())
    took = time.monotonic() - started
    assert page.status_code == 200
    return salesrank_texts(page.text), took


def test_a_product_page_shows_its_ranks_and_a_category_page_its_best_sellers(sold, client):
    atlas, _ = _page(client, sold["atlas"])
    chess, _ = _page(client, sold["chess"])
    books, _ = _page(client, sold["books"])
    assert atlas["salesrank-badge"] == ["#1 in Toys", "#2 in Books"]
    assert chess["salesrank-badge"] == ["#1 in Board games"]
    assert books["salesrank-bestseller"] == ["#1 Globe", "#2 Atlas"]


def test_while_salesrank_is_down_orders_go_on_pages_render_without_it_and_all_arrives_once_back(
    sold, wired, client
):
    chess = str(sold["chess"].pk)
    # given: the badge shows
    assert _page(client, sold["chess"])[0]["salesrank-badge"] == ["#1 in Board games"]
    # when: salesrank stops; the shop takes orders and shows its pages
    wired.stop()
    cache.clear()
    orders = [order_placed((sold["chess"], 1)), order_placed((sold["chess"], 2))]
    product, product_took = _page(client, sold["chess"])
    category, category_took = _page(client, sold["books"])
    # then: no badge, no best sellers, no wait; the lines wait in the outbox
    assert product == category == {"salesrank-badge": [], "salesrank-bestseller": []}
    assert product_took < 2 and category_took < 2
    with pytest.raises(CommandError, match="ConnectionError") as failed:
        _send()
    assert failed.value.returncode == 1
    assert OutboxEntry.objects.filter(kind=Kind.EVENT, state=State.PENDING).count() == 2
    # when: it is back
    wired.start()
    _send()
    # then: each line counted once
    wired.wait_units(chess, 6)
    ids = [f"{order.number}-{order.lines.get().pk}" for order in orders]
    assert wired.sales(*ids) == dict.fromkeys(ids, 1)
    cache.clear()
    assert _page(client, sold["chess"])[0]["salesrank-badge"] == ["#1 in Board games"]


def test_while_salesrank_is_slow_a_page_waits_for_it_a_moment_only(sold, wired, settings, client):
    slow = Proxy(wired.url, delay=3)
    settings.SALESRANK_URL, settings.SALESRANK_READ_TIMEOUT = slow.url, 0.3
    try:
        product, product_took = _page(client, sold["chess"])
        category, category_took = _page(client, sold["books"])
    finally:
        slow.close()
    assert product == category == {"salesrank-badge": [], "salesrank-bestseller": []}
    # One read waited out its timeout; the next page asked nothing (salesrank is marked down).
    assert product_took < 1.5 and category_took < 1.0

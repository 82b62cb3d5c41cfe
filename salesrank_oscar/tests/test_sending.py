"""Orders placed through Oscar reach a real salesrank exactly once: sent, resent, refunded, rejected."""

import io
import json
from decimal import Decimal as D

import pytest
from django.core.management import CommandError, call_command
from oscar.core.loading import get_class, get_model
from oscar.test.factories import create_product, create_stockrecord

from salesrank_oscar.models import Kind, OutboxEntry, State

from .proxy import Proxy
from .shop_side import order_placed

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop(wired, catalogue, settings):
    """The catalogue, and short waits between the tries of a batch."""
    settings.SALESRANK_SEND_BACKOFF = 0.1
    return catalogue


def _send() -> str:
    out = io.StringIO()
    call_command("salesrank_send", stdout=out)
    return out.getvalue()


def _events(state: State) -> list[str]:
    return list(
        OutboxEntry.objects.filter(kind=Kind.EVENT, state=state).order_by("id").values_list("key", flat=True)
    )


def _ids(*orders) -> list[str]:
    return [f"{order.number}-{line.pk}" for order in orders for line in order.lines.order_by("id")]


def test_orders_placed_by_oscar_reach_salesrank_exactly_once(shop, wired):
    chess, atlas = str(shop["chess"].pk), str(shop["atlas"].pk)
    # given
    orders = [
        order_placed((shop["chess"], 2)),
        order_placed((shop["chess"], 1), (shop["atlas"], 1)),
        order_placed((shop["atlas"], 3)),
    ]
    # when
    _send()
    # then
    assert _events(State.SENT) == _ids(*orders)
    wired.wait_units(chess, 3)
    wired.wait_units(atlas, 4)
    wired.wait_units(chess, 3, category=shop["board_games"].slug)
    wired.wait_units(atlas, 4, category=shop["books"].slug)
    assert set(OutboxEntry.objects.values_list("state", flat=True)) == {State.SENT}  # the catalogue's too
    # when: sent again, nothing is left to send
    assert _send() == "sent 0, rejected 0, to send again 0\n"
    # then
    assert wired.sales(*_ids(*orders)) == dict.fromkeys(_ids(*orders), 1)
    assert wired.revenue(atlas) == "50.00"


def test_a_send_whose_reply_is_lost_after_salesrank_stored_it_is_sent_again_and_counted_once(
    shop, wired, settings
):
    product = str(shop["atlas"].pk)
    before = wired.units(product) or 0
    # given: the first reply held back past the shop's timeout
    slow = Proxy(wired.url, hold=1, hold_path="/v1/sales", delay=3)
    settings.SALESRANK_URL, settings.SALESRANK_SEND_TIMEOUT = slow.url, 1
    order = order_placed((shop["atlas"], 2))
    try:
        # when
        _send()
    finally:
        slow.close()
    # then: salesrank took it the first time and called the second a duplicate
    replies = [json.loads(reply) for path, _, _, reply in slow.posts if path == "/v1/sales"]
    assert replies == [
        {"accepted": 1, "duplicates": 0, "rejected": []},
        {"accepted": 0, "duplicates": 1, "rejected": []},
    ]
    assert _events(State.SENT) == _ids(order)
    wired.wait_units(product, before + 2)
    assert wired.sales(*_ids(order)) == {_ids(order)[0]: 1}


def test_a_backlog_is_sent_in_batches_of_at_most_the_batch_size_in_the_order_written(shop, wired, settings):
    # given
    settings.SALESRANK_BATCH_SIZE = 2
    watched = Proxy(wired.url)
    settings.SALESRANK_URL = watched.url
    orders = [order_placed((shop["chess"], 1), (shop["atlas"], 1)) for _ in range(2)]
    orders.append(order_placed((shop["chess"], 1)))
    # when
    try:
        _send()
    finally:
        watched.close()
    # then
    batches = [
        [event["id"] for event in json.loads(body)["events"]]
        for path, body, _, _ in watched.posts
        if path == "/v1/sales"
    ]
    ids = _ids(*orders)
    assert batches == [ids[0:2], ids[2:4], ids[4:5]]


def test_a_line_salesrank_rejects_is_kept_with_its_reason_and_shown_in_the_admin(
    shop, wired, settings, client
):
    # given: products named by UPC, one of which salesrank cannot take as an id
    settings.SALESRANK_PRODUCT_ID = "upc"
    good = create_product(title="Yo-yo", upc="yoyo-1")
    bad = create_product(title="Spinning top", upc="top #1")
    for product in (good, bad):
        create_stockrecord(product, price=D("4.00"), num_in_stock=10)
    order = order_placed((good, 1), (bad, 1))
    good_id, bad_id = _ids(order)
    # when
    _send()
    # then: the line, and the product, kept with salesrank's reasons
    assert _events(State.REJECTED) == [bad_id]
    assert _events(State.SENT) == [good_id]
    reasons = dict(OutboxEntry.objects.filter(state=State.REJECTED).values_list("key", "reason"))
    assert reasons[bad_id] == "productId must be 1 to 64 characters of A-Z a-z 0-9 . _ : -"
    assert reasons[str(bad.pk)] == "id must be 1 to 64 characters of A-Z a-z 0-9 . _ : -"
    wired.wait_units("yoyo-1", 1)
    # and the admin lists it with its reason
    User = get_model("auth", "User")
    client.force_login(User.objects.create_superuser("boss", "boss@example.com", "x"))
    page = client.get("/admin/salesrank_oscar/outboxentry/", {"state__exact": "rejected"})
    assert page.status_code == 200
    assert bad_id in page.text and "productId must be 1 to 64 characters" in page.text


def test_a_refund_recorded_in_oscar_is_a_return_in_salesrank(shop, wired):
    # given: 3 units sold, sent
    product = create_product(title="Drum", price=D("7.00"), num_in_stock=10)
    order = order_placed((product, 3))
    _send()
    wired.wait_units(str(product.pk), 3)
    # when: one refunded in Oscar
    EventHandler = get_class("order.processing", "EventHandler")
    refund, _ = get_model("order", "PaymentEventType").objects.get_or_create(name="Refund")
    EventHandler().handle_payment_event(order, refund, D("7.00"), [order.lines.get()], [1])
    _send()
    # then
    wired.wait_units(str(product.pk), 2)
    assert wired.revenue(str(product.pk)) == "14.00"


def test_a_token_salesrank_refuses_leaves_the_lines_waiting(shop, wired, settings):
    settings.SALESRANK_TOKEN = "not-a-token"
    order_placed((shop["chess"], 1))
    with pytest.raises(CommandError, match="HTTP 401") as failed:
        _send()
    assert failed.value.returncode == 1
    assert set(OutboxEntry.objects.values_list("state", flat=True)) == {State.PENDING}


def test_the_boards_equal_the_recompute_after_all_of_it(wired):
    verified = wired.manage("rankings_verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr

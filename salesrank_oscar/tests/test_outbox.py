"""What the shop writes to the outbox, and when: Oscar's own order creation, refunds, catalogue saves."""

import datetime as dt
from decimal import ROUND_HALF_UP
from decimal import Decimal as D

import pytest
from django.core.management import call_command
from django.utils import timezone
from oscar.apps.order.signals import order_placed as order_placed_signal
from oscar.core.loading import get_class, get_model
from oscar.test.factories import create_product, create_stockrecord

from salesrank_oscar import sending
from salesrank_oscar.models import Kind, OutboxEntry, State

from .shop_side import order_placed

pytestmark = pytest.mark.django_db


def _events():
    return [row.payload for row in OutboxEntry.objects.filter(kind=Kind.EVENT).order_by("id")]


def test_each_line_of_an_order_placed_by_oscar_is_one_sale_event_in_the_outbox(catalogue):
    """One event per line: id = order number + line id, ts = the order's time, amount = the line's
    price after discounts, categories = the product's category slugs."""
    # when
    order = order_placed((catalogue["chess"], 2), (catalogue["atlas"], 1))
    # then
    chess_line, atlas_line = order.lines.order_by("id")
    ts = order.date_placed.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    assert _events() == [
        {
            "id": f"{order.number}-{chess_line.pk}",
            "ts": ts,
            "productId": str(catalogue["chess"].pk),
            "categories": [catalogue["board_games"].slug],
            "qty": 2,
            "amount": "50.00",
        },
        {
            "id": f"{order.number}-{atlas_line.pk}",
            "ts": ts,
            "productId": str(catalogue["atlas"].pk),
            "categories": sorted([catalogue["books"].slug, catalogue["toys"].slug]),
            "qty": 1,
            "amount": "12.50",
        },
    ]


def test_a_line_with_a_discount_is_sent_at_its_price_after_the_discount(catalogue):
    # given: Oscar's default test offer, 20 % off every product
    from oscar.test.factories import create_offer, create_order

    create_offer()
    Applicator = get_class("offer.applicator", "Applicator")
    Basket = get_model("basket", "Basket")
    basket = Basket.objects.create()
    basket.strategy = get_class("partner.strategy", "Selector")().strategy()
    basket.add_product(catalogue["chess"], 2)
    Applicator().apply(basket)
    # when
    create_order(basket=basket)
    # then: 2 × 25.00 less 20 %
    assert [event["amount"] for event in _events()] == ["40.00"]


def test_the_lines_are_in_the_outbox_once_the_order_commits_even_if_order_placed_never_arrives(catalogue):
    """Oscar sends order_placed after the order's transaction has committed; a process that dies
    in between has committed the order, and its lines are in the outbox with it."""

    def dies(**kwargs):
        raise SystemExit("the process dies after the commit")

    order_placed_signal.connect(dies, dispatch_uid="dies")
    try:
        with pytest.raises(SystemExit):
            order_placed((catalogue["chess"], 1))
    finally:
        order_placed_signal.disconnect(dispatch_uid="dies")
    Order = get_model("order", "Order")
    order = Order.objects.get()
    assert [event["id"] for event in _events()] == [f"{order.number}-{order.lines.get().pk}"]


def test_an_order_that_fails_inside_its_transaction_leaves_no_line_in_the_outbox(catalogue, monkeypatch):
    OrderCreator = get_class("order.utils", "OrderCreator")

    def fails(self, line):
        raise RuntimeError("stock could not be allocated")

    monkeypatch.setattr(OrderCreator, "update_stock_records", fails)
    with pytest.raises(RuntimeError):
        order_placed((catalogue["chess"], 1))
    assert not get_model("order", "Order").objects.exists()
    assert _events() == []


def _refund(order, *line_quantities, type_name="Refund"):
    EventHandler = get_class("order.processing", "EventHandler")
    PaymentEventType = get_model("order", "PaymentEventType")
    event_type, _ = PaymentEventType.objects.get_or_create(name=type_name)
    lines = [line for line, _ in line_quantities]
    quantities = [quantity for _, quantity in line_quantities]
    amount = sum(line.line_price_incl_tax * quantity / line.quantity for line, quantity in line_quantities)
    return EventHandler().handle_payment_event(order, event_type, amount, lines, quantities)


def test_a_refund_on_lines_is_a_return_event_of_the_refunded_units_and_amount(catalogue):
    """Pro rata to the cent, and the refunds of every unit add up to the line's amount exactly."""
    # given: a line of 3 units whose amount after a discount does not divide by 3
    from oscar.test.factories import create_offer

    create_offer()  # 20 % off
    product = create_product(title="Kite", price=D("2.78"), num_in_stock=10)
    Applicator = get_class("offer.applicator", "Applicator")
    Basket = get_model("basket", "Basket")
    basket = Basket.objects.create()
    basket.strategy = get_class("partner.strategy", "Selector")().strategy()
    basket.add_product(product, 3)
    Applicator().apply(basket)
    from oscar.test.factories import create_order

    order = create_order(basket=basket)
    line = order.lines.get()
    amount = line.line_price_incl_tax
    assert (amount * 100) % 3 != 0
    one = (amount / 3).quantize(D("0.01"), rounding=ROUND_HALF_UP)
    sale = f"{order.number}-{line.pk}"
    # when: one unit refunded, then the other two
    first = _refund(order, (line, 1))
    second = _refund(order, (line, 2))
    # then
    returns = _events()[1:]
    PaymentEventQuantity = get_model("order", "PaymentEventQuantity")
    first_row = PaymentEventQuantity.objects.get(event=first)
    second_row = PaymentEventQuantity.objects.get(event=second)
    assert returns == [
        {
            "id": f"{sale}-r{first_row.pk}",
            "ts": first.date_created.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
            "productId": str(product.pk),
            "qty": -1,
            "amount": str(one),
            "returnOf": sale,
        },
        {
            "id": f"{sale}-r{second_row.pk}",
            "ts": second.date_created.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
            "productId": str(product.pk),
            "qty": -2,
            "amount": str(amount - one),
            "returnOf": sale,
        },
    ]


def test_a_payment_event_of_another_type_is_not_a_return(catalogue):
    order = order_placed((catalogue["chess"], 1))
    _refund(order, (order.lines.get(), 1), type_name="Paid")
    assert len(_events()) == 1


def test_saved_products_prices_and_categories_are_noted_for_sending(catalogue):
    """A product (its categories, a new price of a variant of it) or a category saved; allocating
    stock for an order is not news."""
    from oscar.apps.catalogue.categories import create_from_breadcrumbs

    OutboxEntry.objects.all().delete()
    # given
    shirt = create_product(title="Shirt", structure="parent")
    small = create_product(title="Shirt S", parent=shirt, price=D("9.00"), num_in_stock=5)
    OutboxEntry.objects.all().delete()
    # when: an order allocates the variant's stock
    order_placed((small, 1))
    # then: its sale only
    assert list(OutboxEntry.objects.values_list("kind", flat=True)) == [Kind.EVENT]
    # when: a new price, a category, a new category
    record = small.stockrecords.get()
    record.price = D("11.00")
    record.save()
    shirt.categories.add(catalogue["toys"])
    games = create_from_breadcrumbs("Games")
    # then: the parent, the product ranked for its variant
    noted = OutboxEntry.objects.exclude(kind=Kind.EVENT).values_list("kind", "key")
    assert sorted(set(noted)) == [(Kind.CATEGORY, str(games.pk)), (Kind.PRODUCT, str(shirt.pk))]


def test_with_product_ids_as_upcs_a_sale_names_the_upc(settings, catalogue):
    settings.SALESRANK_PRODUCT_ID = "upc"
    product = create_product(title="Puzzle", upc="0042-puzzle")
    create_stockrecord(product, price=D("5.00"), num_in_stock=10)
    order_placed((product, 1))
    assert [event["productId"] for event in _events()] == ["0042-puzzle"]


def test_a_category_whose_slug_salesrank_cannot_take_is_named_by_its_id(catalogue):
    from oscar.apps.catalogue.categories import create_from_breadcrumbs

    jouets = create_from_breadcrumbs("Jouets d'été")
    jouets.slug = "jouets-dété"
    jouets.save()
    product = create_product(title="Ballon", price=D("3.00"), num_in_stock=10)
    product.categories.add(jouets)
    order_placed((product, 1))
    assert [event["categories"] for event in _events()] == [[f"c{jouets.pk}"]]


def test_sent_rows_are_deleted_after_their_keep_and_rejected_ones_after_theirs(settings):
    settings.SALESRANK_SENT_KEEP_DAYS, settings.SALESRANK_REJECTED_KEEP_DAYS = 7, 90
    now = timezone.now()
    ages = {"sent old": (State.SENT, 8), "sent new": (State.SENT, 6), "rejected old": (State.REJECTED, 91)}
    ages |= {"rejected new": (State.REJECTED, 89), "waiting old": (State.PENDING, 400)}
    for key, (state, days) in ages.items():
        row = OutboxEntry.objects.create(kind=Kind.EVENT, key=key, payload={}, state=state)
        OutboxEntry.objects.filter(pk=row.pk).update(created=now - dt.timedelta(days=days))
    assert sending.outbox_prune() == 2
    assert sorted(OutboxEntry.objects.values_list("key", flat=True)) == [
        "rejected new",
        "sent new",
        "waiting old",
    ]


def test_the_outbox_table_matches_its_migrations(settings):
    settings.MIGRATION_MODULES = {}  # the tests' tables are made without them (--no-migrations)
    call_command("makemigrations", "salesrank_oscar", "--check", "--dry-run", verbosity=0)

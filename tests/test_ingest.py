"""sales_ingest: which events are stored, which are rejected and why (docs/api.md, POST /v1/sales)."""

import datetime as dt
import hashlib
import json
from collections import defaultdict

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalogue.models import Category, Product
from rankings.engine.shards import active, shard_of
from rankings.ingest import events
from rankings.ingest.engagement import engagement_digest
from rankings.ingest.sales import event_digest, sales_ingest
from rankings.models import IngestLog, PendingSale, Sale
from tests.conftest import utc
from tests.rankings_helpers import table_rows_read

pytestmark = pytest.mark.django_db

NOW = utc(2026, 10, 11, 10, 0)
AMOUNT_FORM = "amount must be written with the digits 0-9 and at most one point, such as 25.00 (no exponent, no separators)"


def event(**overrides):
    """A valid sale event; keyword arguments replace fields, and a value of `...` removes one."""
    base = {
        "id": "ord-1-line-1",
        "ts": "2026-10-11T09:00:00Z",
        "productId": "p1",
        "categories": ["toys"],
        "qty": 2,
        "amount": "25.00",
    }
    merged = {**base, **overrides}
    return {key: value for key, value in merged.items() if value is not ...}


def ingest(*events):
    return sales_ingest(events=list(events), source="test", now=NOW)


def sale(event_id) -> Sale:
    return Sale.objects.get(event_id=event_id)


# --- rejections: one reason each -------------------------------------------------------------


REJECTIONS = [
    pytest.param(event(id=...), "id is required", id="id missing"),
    pytest.param(event(id=None), "id may not be null", id="id null"),
    pytest.param(event(id=""), "id must be a string of 1 to 128 characters", id="id empty"),
    pytest.param(event(id="x" * 129), "id must be a string of 1 to 128 characters", id="id of 129 characters"),
    pytest.param(event(id=17), "id must be a string of 1 to 128 characters", id="id a number"),
    pytest.param(event(id="a\x00b"), "id must be a string of 1 to 128 characters", id="id with a NUL"),
    pytest.param(event(ts=...), "ts is required", id="ts missing"),
    pytest.param(event(ts=True), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts boolean"),
    pytest.param(event(ts=[1760000000]), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts list"),
    pytest.param(event(ts={"s": 1}), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts object"),
    pytest.param(event(ts="yesterday"), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts words"),
    pytest.param(event(ts=1e300), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts out of range"),
    pytest.param(event(ts="2026-10-11T09:00:00"), "ts has no UTC offset; add Z or +00:00", id="ts naive ISO"),
    pytest.param(event(ts="2026-10-11T10:05:01Z"), "ts is more than 5 minutes in the future", id="ts in the future"),
    pytest.param(event(productId=...), "productId is required", id="productId missing"),
    pytest.param(event(productId="p 1"), "productId must be 1 to 64 characters of A-Z a-z 0-9 . _ : -", id="productId with a space"),
    pytest.param(event(productId="p/1"), "productId must be 1 to 64 characters of A-Z a-z 0-9 . _ : -", id="productId with a slash"),
    pytest.param(event(productId="p1\n"), "productId must be 1 to 64 characters of A-Z a-z 0-9 . _ : -", id="productId with a newline"),
    pytest.param(event(productId=""), "productId must be 1 to 64 characters of A-Z a-z 0-9 . _ : -", id="productId empty"),
    pytest.param(event(productId="p" * 65), "productId must be 1 to 64 characters of A-Z a-z 0-9 . _ : -", id="productId of 65 characters"),
    pytest.param(event(productId=15), "productId must be 1 to 64 characters of A-Z a-z 0-9 . _ : -", id="productId a number"),
    pytest.param(event(categories="toys"), "categories must be a list of at most 20 slugs", id="categories a string"),
    pytest.param(event(categories=["board games"]), "categories: 'board games' is not a slug (at most 50 of a-z A-Z 0-9 _ -)", id="category with a space"),
    pytest.param(event(categories=["toys\n"]), "categories: 'toys\\n' is not a slug (at most 50 of a-z A-Z 0-9 _ -)", id="category with a newline"),
    pytest.param(event(categories=["c" * 51]), f"categories: '{'c' * 51}' is not a slug (at most 50 of a-z A-Z 0-9 _ -)", id="category of 51 characters"),
    pytest.param(event(categories=[7]), "categories: 'int' is not a slug (at most 50 of a-z A-Z 0-9 _ -)", id="category a number"),
    pytest.param(event(categories=["toys", "all"]), "categories: 'all' is reserved for the board of every sale", id="category all"),
    pytest.param(event(qty=...), "qty is required", id="qty missing"),
    pytest.param(event(qty=0), "qty must be a non-zero integer", id="qty zero"),
    pytest.param(event(qty=1.5), "qty must be a non-zero integer", id="qty fractional"),
    pytest.param(event(qty="2"), "qty must be a non-zero integer", id="qty a string"),
    pytest.param(event(qty=True), "qty must be a non-zero integer", id="qty boolean"),
    pytest.param(event(qty=None), "qty may not be null", id="qty null"),
    pytest.param(event(qty=1_000_001), "qty must be between -1,000,000 and 1,000,000", id="qty over a million"),
    pytest.param(event(qty=-1_000_001, returnOf="o"), "qty must be between -1,000,000 and 1,000,000", id="qty under minus a million"),
    pytest.param(event(amount="-0.01"), "amount may not be negative", id="amount negative"),
    pytest.param(event(amount=-1), "amount may not be negative", id="amount a negative number"),
    pytest.param(event(amount="1.005"), "amount may have at most 2 decimal places", id="amount with 3 decimals"),
    pytest.param(event(amount=0.125), "amount may have at most 2 decimal places", id="amount a number with 3 decimals"),
    pytest.param(event(amount="1000000000000.00"), "amount may have at most 12 digits before the decimal point", id="amount with 13 digits"),
    pytest.param(event(amount="ten"), "amount must be a decimal number (a JSON string or number)", id="amount not a number"),
    pytest.param(event(amount="NaN"), "amount must be a decimal number (a JSON string or number)", id="amount NaN"),
    pytest.param(event(amount="Infinity"), "amount must be a decimal number (a JSON string or number)", id="amount infinite"),
    pytest.param(event(amount=True), "amount must be a decimal number (a JSON string or number)", id="amount boolean"),
    pytest.param(event(amount=["1"]), "amount must be a decimal number (a JSON string or number)", id="amount a list"),
    pytest.param(event(amount="1E-1000000000"), AMOUNT_FORM, id="amount a tiny exponent"),
    pytest.param(event(amount="1e2"), AMOUNT_FORM, id="amount with an exponent"),
    pytest.param(event(amount="2.5E+1"), AMOUNT_FORM, id="amount with a signed exponent"),
    pytest.param(event(amount="1_000"), AMOUNT_FORM, id="amount with an underscore"),
    pytest.param(event(amount="1,000.00"), AMOUNT_FORM, id="amount with a comma"),
    pytest.param(event(amount="\u0661\u0662"), AMOUNT_FORM, id="amount in Arabic-Indic digits"),
    pytest.param(event(amount="\uff11\uff12.00"), AMOUNT_FORM, id="amount in full-width digits"),
    pytest.param(event(ts="1_791_709_200"), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts epoch with underscores"),
    pytest.param(event(ts="1.7917092e9"), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts epoch with an exponent"),
    pytest.param(event(ts="\u0661\u0667\u0669\u0661\u0667\u0660\u0669\u0662\u0660\u0660"), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts epoch in Arabic-Indic digits"),
    pytest.param(event(ts="2026-10-11T09:00:00.\u0661Z"), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts ISO with an Arabic-Indic digit"),
    pytest.param(event(id="ord\x07-1"), "id may not contain the control or format character U+0007", id="id with a control character"),
    pytest.param(event(id="ord\x85-1"), "id may not contain the control or format character U+0085", id="id with a C1 control character"),
    pytest.param(event(id="ord-\u202e1-gnp"), "id may not contain the control or format character U+202E", id="id with a right-to-left override"),
    pytest.param(event(id="\u200ford-1"), "id may not contain the control or format character U+200F", id="id with a right-to-left mark"),
    pytest.param(event(id="ord-\u2066x\u2069"), "id may not contain the control or format character U+2066", id="id with a bidi isolate"),
    pytest.param(event(id="ord\u200b1"), "id may not contain the control or format character U+200B", id="id with a zero-width space"),
    pytest.param(event(returnOf="ord-\u2069", qty=-1), "returnOf may not contain the control or format character U+2069", id="returnOf with a bidi character"),
    pytest.param(event(returnOf="o\x1b[2J", qty=-1), "returnOf may not contain the control or format character U+001B", id="returnOf with an escape"),
    pytest.param(event(productId="."), "productId may not be '.' or '..': no URL can name it", id="productId a dot"),
    pytest.param(event(productId=".."), "productId may not be '.' or '..': no URL can name it", id="productId two dots"),
    pytest.param(event(categories=[f"c{i}" for i in range(21)]), "categories must be a list of at most 20 slugs", id="21 categories"),
    pytest.param(event(returnOf=7, qty=-1), "returnOf must be a string of 1 to 128 characters", id="returnOf a number"),
    pytest.param(event(qty=-1), "a negative qty is a return and needs returnOf", id="negative qty without returnOf"),
    pytest.param(event(returnOf="ord-0-line-1"), "a return (returnOf) needs a negative qty", id="positive qty with returnOf"),
]  # fmt: skip


@pytest.mark.parametrize(("bad_event", "reason"), REJECTIONS)
def test_an_invalid_event_is_rejected_with_its_reason(bad_event, reason):
    """Each field rule has its own reason, naming the field, so the sender can fix the event."""
    # given a batch with one good event and the bad one
    good = event(id="good")

    # when
    result = ingest(good, bad_event)

    # then the bad one is rejected with its index, its id if it has a valid one, and the reason
    expected_id = "ord-1-line-1" if bad_event.get("id") == "ord-1-line-1" else None
    assert result.rejected == [{"index": 1, "id": expected_id, "error": reason}]
    assert result.accepted == 1
    assert list(Sale.objects.values_list("event_id", flat=True)) == ["good"]


@pytest.mark.parametrize("not_an_object", [None, "ord-1", 7, ["ord-1"], True])
def test_an_event_that_is_not_an_object_is_rejected(not_an_object):
    result = ingest(not_an_object, event())

    assert result.rejected == [{"index": 0, "id": None, "error": "event must be a JSON object"}]
    assert result.accepted == 1


def test_every_rejection_of_a_batch_is_reported_in_order():
    # given
    events = [event(id="a", qty=0), event(id="b"), event(id="c", ts="soon"), event(id="d")]

    # when
    result = ingest(*events)

    # then
    assert [(r["index"], r["id"]) for r in result.rejected] == [(0, "a"), (2, "c")]
    assert result.accepted == 2


# --- what is accepted ------------------------------------------------------------------------


ACCEPTED = [
    pytest.param(event(ts=1791709200), utc(2026, 10, 11, 9, 0), id="ts epoch seconds"),
    pytest.param(
        event(ts=1791709200.25), utc(2026, 10, 11, 9, 0, 0, 250000), id="ts fractional epoch seconds"
    ),
    pytest.param(event(ts="1791709200"), utc(2026, 10, 11, 9, 0), id="ts epoch seconds as a string"),
    pytest.param(event(ts="2026-10-11T11:00:00+02:00"), utc(2026, 10, 11, 9, 0), id="ts with an offset"),
    pytest.param(event(ts="2026-10-11T10:05:00Z"), utc(2026, 10, 11, 10, 5), id="ts exactly 5 minutes ahead"),
    pytest.param(event(ts="2020-01-01T00:00:00Z"), utc(2020, 1, 1), id="ts years ago"),
]


@pytest.mark.parametrize(("good_event", "stored_ts"), ACCEPTED)
def test_ts_is_stored_as_utc(good_event, stored_ts):
    result = ingest(good_event)

    assert result.rejected == []
    assert sale("ord-1-line-1").ts == stored_ts


@pytest.mark.parametrize(
    ("amount", "cents"),
    [
        ("25.00", 2500),
        ("25.5", 2550),
        (" 7 ", 700),
        ("0", 0),
        (".5", 50),
        ("1.500", 150),
        (25.1, 2510),
        (3, 300),
        ("999999999999.99", 99999999999999),
    ],
)
def test_amount_is_stored_exactly_in_cents(amount, cents):
    """A JSON string or number with at most 2 places and 12 digits before the point, never a float sum."""
    result = ingest(event(amount=amount))

    assert result.rejected == []
    assert sale("ord-1-line-1").amount_cents == cents


@pytest.mark.parametrize("qty", [1, 1_000_000])
def test_qty_up_to_a_million_is_accepted(qty):
    result = ingest(event(qty=qty))

    assert result.accepted == 1
    assert sale("ord-1-line-1").qty == qty


def test_an_id_of_128_characters_and_a_product_id_of_64_are_accepted():
    result = ingest(event(id="x" * 128, productId="P-9.a_b:" + "z" * 56))

    assert result.accepted == 1


def test_unknown_keys_are_ignored():
    result = ingest(event(channel="web", currency="EUR"))

    assert result.accepted == 1


def test_null_for_an_optional_field_means_absent():
    # given a product with a price and a category
    toys = Category.objects.create(slug="toys", name="Toys")
    product = Product.objects.create(product_id="p1", name="Kite", price_cents=1250)
    product.categories.add(toys)

    # when
    result = ingest(event(categories=None, amount=None, returnOf=None))

    # then
    assert result.accepted == 1
    stored = sale("ord-1-line-1")
    assert (stored.categories, stored.amount_cents, stored.return_of) == (["toys"], 2500, None)


# --- duplicates ------------------------------------------------------------------------------


def test_a_resent_event_in_the_same_batch_is_a_duplicate():
    result = ingest(event(), event())

    assert (result.accepted, result.duplicates, result.rejected) == (1, 1, [])
    assert Sale.objects.count() == 1


def test_a_resent_event_in_a_later_batch_is_a_duplicate():
    ingest(event())

    result = ingest(event())

    assert (result.accepted, result.duplicates, result.rejected) == (0, 1, [])
    assert Sale.objects.count() == 1


def test_a_resend_in_another_notation_is_still_a_duplicate():
    """Same content, other spelling: epoch vs ISO ts, categories reordered, amount as a number."""
    ingest(event(ts="2026-10-11T09:00:00Z", categories=["toys", "gifts"], amount="25.00"))

    result = ingest(event(ts=1791709200, categories=["gifts", "toys", "gifts"], amount=25))

    assert (result.accepted, result.duplicates, result.rejected) == (0, 1, [])


def test_reusing_an_id_for_other_content_is_rejected():
    # given a stored event
    ingest(event())

    # when the same id comes with another qty, in a later batch and twice in a new one
    later = ingest(event(qty=3))
    same_batch = ingest(event(id="n"), event(id="n", amount="1.00"))

    # then the reuses are rejected and the first content stays
    assert later.rejected == [
        {"index": 0, "id": "ord-1-line-1", "error": "id already used by a different event"}
    ]
    assert same_batch.rejected == [{"index": 1, "id": "n", "error": "id already used by a different event"}]
    assert sale("ord-1-line-1").qty == 2
    assert sale("n").amount_cents == 2500


# --- returns ---------------------------------------------------------------------------------


def original(**overrides):
    return event(id="o", qty=3, amount="10.00", categories=["toys", "gifts"], **overrides)


def a_return(event_id, qty, **overrides):
    fields = {"ts": "2026-10-11T09:30:00Z", "returnOf": "o", "categories": ..., "amount": ..., **overrides}
    return event(id=event_id, qty=qty, **fields)


def test_a_partial_return_refunds_pro_rata():
    """10.00 for 3 units: returning 1 refunds 10.00 × 1 ÷ 3 = 3.333…, rounded to 3.33."""
    ingest(original())

    result = ingest(a_return("r1", -1))

    assert result.accepted == 1
    assert sale("r1").amount_cents == 333


def test_several_partial_returns_never_refund_more_than_the_sale():
    """The return that completes the sale refunds what is left: 3.33 + 3.33 + 3.34 = 10.00."""
    ingest(original())

    ingest(a_return("r1", -1), a_return("r2", -1))
    ingest(a_return("r3", -1))

    assert [sale(r).amount_cents for r in ("r1", "r2", "r3")] == [333, 333, 334]


def test_pro_rata_refunds_round_half_up():
    """0.05 for 2 units: returning 1 refunds 0.025, which rounds up to 0.03."""
    ingest(event(id="o", qty=2, amount="0.05"))

    ingest(a_return("r1", -1))

    assert sale("r1").amount_cents == 3


def test_a_return_may_state_its_refund():
    ingest(original())

    result = ingest(a_return("r1", -1, amount="5.00"))

    assert result.accepted == 1
    assert sale("r1").amount_cents == 500


def test_a_return_counts_in_the_bucket_and_categories_of_its_original():
    """A window holds the net sales made in it: the return is dated back to the sale."""
    ingest(original())

    ingest(a_return("r1", -1, categories=["elsewhere"]))

    stored = sale("r1")
    assert stored.counted_at == utc(2026, 10, 11, 9, 0)
    assert stored.ts == utc(2026, 10, 11, 9, 30)
    assert stored.categories == ["toys", "gifts"]
    assert (stored.qty, stored.return_of) == (-1, "o")


def test_returning_more_units_than_were_sold_is_rejected():
    ingest(original())
    ingest(a_return("r1", -2))

    result = ingest(a_return("r2", -2))

    assert result.rejected == [
        {"index": 0, "id": "r2", "error": "return of 2 units exceeds the 1 not yet returned"}
    ]


def test_refunding_more_than_was_paid_is_rejected():
    ingest(original())
    ingest(a_return("r1", -1, amount="6.00"))

    result = ingest(a_return("r2", -1, amount="4.01"))

    assert result.rejected == [
        {"index": 0, "id": "r2", "error": "refund of 4.01 exceeds the 4.00 not yet refunded"}
    ]


def test_a_return_of_an_unknown_sale_is_rejected():
    result = ingest(a_return("r1", -1))

    assert result.rejected == [{"index": 0, "id": "r1", "error": "returnOf refers to an unknown sale"}]


def test_a_return_of_another_product_is_rejected():
    ingest(original())

    result = ingest(a_return("r1", -1, productId="p2"))

    assert result.rejected == [
        {"index": 0, "id": "r1", "error": "returnOf refers to a sale of another product"}
    ]


def test_a_return_of_a_return_is_rejected():
    # given a stored return
    ingest(original())
    ingest(a_return("r1", -1))

    # when returns refer to it, in a later batch and in the batch of another return
    later = ingest(a_return("r2", -1, returnOf="r1"))
    same_batch = ingest(a_return("r3", -1), a_return("r4", -1, returnOf="r3"))

    # then
    assert later.rejected == [{"index": 0, "id": "r2", "error": "returnOf refers to a return, not a sale"}]
    assert same_batch.rejected == [
        {"index": 1, "id": "r4", "error": "returnOf refers to a return, not a sale"}
    ]


def test_a_return_in_the_same_batch_as_its_original_is_accepted():
    result = ingest(original(), a_return("r1", -1), a_return("r2", -2), a_return("r3", -1))

    assert result.accepted == 3
    assert result.rejected == [
        {"index": 3, "id": "r3", "error": "return of 1 units exceeds the 0 not yet returned"}
    ]
    assert [sale(r).amount_cents for r in ("r1", "r2")] == [333, 667]


def test_a_return_before_its_original_in_the_batch_is_rejected():
    """Events take effect in the order given."""
    result = ingest(a_return("r1", -1), original())

    assert result.rejected == [{"index": 0, "id": "r1", "error": "returnOf refers to an unknown sale"}]
    assert result.accepted == 1


def test_a_resent_return_is_a_duplicate_not_an_over_return():
    ingest(original())
    ingest(a_return("r1", -3))

    result = ingest(a_return("r1", -3))

    assert (result.accepted, result.duplicates, result.rejected) == (0, 1, [])


# --- categories, amounts and the catalogue ---------------------------------------------------


def test_without_categories_a_sale_counts_in_the_products_catalogue_categories():
    # given
    toys, gifts = (
        Category.objects.create(slug="toys", name="Toys"),
        Category.objects.create(slug="gifts", name="Gifts"),
    )
    Product.objects.create(product_id="p1", name="Kite", price_cents=999).categories.add(toys, gifts)

    # when one event leaves categories out and another sends an empty list
    result = ingest(event(id="a", categories=...), event(id="b", categories=[]))

    # then
    assert result.accepted == 2
    assert sale("a").categories == ["gifts", "toys"]
    assert sale("b").categories == ["gifts", "toys"]


def test_without_amount_a_sale_costs_the_catalogue_price_times_qty():
    Product.objects.create(product_id="p1", name="Kite", price_cents=999)

    ingest(event(amount=..., qty=3))

    assert sale("ord-1-line-1").amount_cents == 2997


def test_the_categories_on_the_event_win_over_the_catalogue():
    toys = Category.objects.create(slug="toys", name="Toys")
    Product.objects.create(product_id="p1", name="Kite").categories.add(toys)

    ingest(event(categories=["outdoor"]))

    assert sale("ord-1-line-1").categories == ["outdoor"]


def test_a_category_listed_twice_counts_once():
    ingest(event(categories=["toys", "gifts", "toys"]))

    assert sale("ord-1-line-1").categories == ["toys", "gifts"]


def test_unknown_products_and_categories_become_placeholders():
    """No sale is lost for want of catalogue data."""
    # when
    result = ingest(
        event(productId="new-1", categories=["new-cat", "toys"]),
        event(id="2", productId="new-2", categories=...),
    )

    # then
    assert result.accepted == 2
    new_cat = Category.objects.get(slug="new-cat")
    assert new_cat.is_placeholder
    assert new_cat.has_sales
    product = Product.objects.get(product_id="new-1")
    assert product.is_placeholder
    assert sorted(product.categories.values_list("slug", flat=True)) == ["new-cat", "toys"]
    assert Product.objects.get(product_id="new-2").is_placeholder
    assert sale("2").categories == []


def test_a_new_product_is_linked_to_the_categories_of_its_first_event_only():
    """Each event may name up to 20 new categories: were a new product linked to those of all
    its batch's events, 5,000 sales would file it under 100,000 categories."""
    # when a new product's first event names two categories, and its later ones others
    result = ingest(
        event(id="a", productId="wide", categories=["c1", "c0"]),
        *[event(id=f"b{i}", productId="wide", categories=[f"d{i}", f"e{i}"]) for i in range(50)],
        event(id="c", productId="bare", categories=[]),
        event(id="d", productId="bare", categories=["f1"]),
    )

    # then it is filed under the first event's categories; one whose first event names none, under none
    assert result.accepted == 53
    assert sorted(Product.objects.get(product_id="wide").categories.values_list("slug", flat=True)) == [
        "c0",
        "c1",
    ]
    assert not Product.objects.get(product_id="bare").categories.exists()
    assert Category.objects.filter(slug="e49").exists()  # the sales still count in every category they name


def test_known_products_and_categories_are_left_as_they_are():
    toys = Category.objects.create(slug="toys", name="Toys")
    Product.objects.create(product_id="p1", name="Kite", price_cents=999)

    ingest(event(categories=["toys"]))

    assert not Category.objects.get(pk=toys.pk).is_placeholder
    product = Product.objects.get(product_id="p1")
    assert (product.is_placeholder, product.name, product.categories.count()) == (False, "Kite", 0)


# --- storage ---------------------------------------------------------------------------------


def test_each_sale_is_queued_once_for_every_shard_of_its_boards():
    """The tick of each shard takes the sale from its queue, with the boards it counts in there;
    'all' counts every sale."""
    ingest(event(categories=["toys", "gifts", "books", "garden"]))

    shards = active().layout
    expected = defaultdict(set)
    for slug in ("all", "toys", "gifts", "books", "garden"):
        expected[shard_of(slug, shards)].add(slug)
    queued = PendingSale.objects.filter(sale=sale("ord-1-line-1")).values_list("shard", "categories")
    assert sorted(shard for shard, _ in queued) == sorted(expected)
    assert {shard: set(categories) for shard, categories in queued} == expected


def test_the_number_of_categories_of_an_event_is_a_setting(settings):
    """RANKINGS["MAX_EVENT_CATEGORIES"] bounds the placeholder categories one batch can create."""
    settings.RANKINGS = {**settings.RANKINGS, "MAX_EVENT_CATEGORIES": 3}
    three = [f"c{i}" for i in range(3)]

    result = ingest(event(id="a", categories=three), event(id="b", categories=[*three, "c3"]))

    assert result.accepted == 1
    assert result.rejected == [
        {"index": 1, "id": "b", "error": "categories must be a list of at most 3 slugs"}
    ]


def test_a_batch_creates_at_most_max_batch_new_categories_and_refuses_the_events_past_them(settings):
    """RANKINGS["MAX_BATCH_NEW_CATEGORIES"] bounds the placeholder categories one batch creates (at
    the defaults, 5,000 events naming 20 new slugs each would create 100,000): an event that would
    take the batch past it is rejected, to be sent again in another batch; known slugs cost nothing."""
    # given a bound of four new categories, and a category the catalogue has
    settings.RANKINGS = {**settings.RANKINGS, "MAX_BATCH_NEW_CATEGORIES": 4}
    Category.objects.create(slug="toys", name="Toys")

    # when events name new categories, some of them twice, in known ones and without any
    result = ingest(
        event(id="a", categories=["n1", "n2", "toys"]),
        event(id="b", categories=["n2", "n3", "n4"]),
        event(id="c", categories=["n1", "n5"]),
        event(id="d", categories=["toys", "n4"]),
        event(id="e", categories=[]),
        event(id="f", categories=[f"m{i}" for i in range(5)]),
    )

    # then the events that would have made a fifth and more are refused, and no more is created
    refusal = "categories: this batch names more than 4 categories the catalogue does not have; send this event again in another batch"
    assert result.accepted == 4
    assert result.rejected == [
        {"index": 2, "id": "c", "error": refusal},
        {"index": 5, "id": "f", "error": refusal},
    ]
    assert sorted(Category.objects.values_list("slug", flat=True)) == ["n1", "n2", "n3", "n4", "toys"]


def test_a_return_of_a_sale_refused_for_new_categories_is_refused_to_be_sent_again_too(settings):
    """The sale is refused for now (another batch takes it); its return in the same batch can be
    stored only after it, so it is refused with the same reason, not as a return of an unknown sale."""
    settings.RANKINGS = {**settings.RANKINGS, "MAX_BATCH_NEW_CATEGORIES": 2}

    result = ingest(
        event(id="a", categories=["n1", "n2"]),
        event(id="b", categories=["n3"]),
        event(id="b-return", categories=["n3"], qty=-1, returnOf="b"),
    )

    refusal = "categories: this batch names more than 2 categories the catalogue does not have; send this event again in another batch"
    assert result.accepted == 1
    assert result.rejected == [
        {"index": 1, "id": "b", "error": refusal},
        {"index": 2, "id": "b-return", "error": refusal},
    ]
    # and sent again together, both are stored
    assert (
        ingest(
            event(id="b", categories=["n3"]),
            event(id="b-return", categories=["n3"], qty=-1, returnOf="b"),
        ).accepted
        == 2
    )


def test_how_far_ahead_an_event_may_be_is_a_setting_and_its_rejection_says_so(settings):
    """RANKINGS["MAX_FUTURE_SECONDS"] both sets the limit and words the rejection."""
    # given a limit of one minute
    settings.RANKINGS = {**settings.RANKINGS, "MAX_FUTURE_SECONDS": 60}

    # when one event is 60 s ahead of the clock and another 61 s
    result = ingest(event(id="a", ts="2026-10-11T10:01:00Z"), event(id="b", ts="2026-10-11T10:01:01Z"))

    # then only the second is refused, with the limit the setting gives
    assert result.accepted == 1
    assert result.rejected == [{"index": 1, "id": "b", "error": "ts is more than 1 minute in the future"}]


def test_each_call_is_logged_with_its_counts():
    ingest(event(), event(), event(id="bad", qty=0))

    log = IngestLog.objects.get()
    assert (log.source, log.accepted, log.duplicates, log.rejected) == ("test", 1, 1, 1)


def test_an_empty_batch_stores_nothing():
    result = ingest()

    assert result.as_dict() == {"accepted": 0, "duplicates": 0, "rejected": []}


def test_the_clock_defaults_to_now():
    """Without `now`, the future limit is measured from the server clock."""
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=4)
    late = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=6)

    result = sales_ingest(events=[event(id="a", ts=soon.isoformat()), event(id="b", ts=late.isoformat())])

    assert result.accepted == 1
    assert result.rejected[0]["id"] == "b"


# --- anything at all -------------------------------------------------------------------------

_any_text = st.text(st.characters(exclude_categories=()), max_size=70)  # surrogates and NUL included
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_any_text, inner, max_size=3),
    max_leaves=6,
)
_events = st.fixed_dictionaries(
    {},
    optional={
        "id": _json | st.sampled_from(["a", "b", "o"]),
        "ts": _json | st.integers(0, 1_800_000_000) | st.datetimes(timezones=st.just(dt.UTC)).map(str),
        "productId": _json | st.sampled_from(["p1", "p2"]),
        "categories": _json | st.lists(st.sampled_from(["toys", "all", "x y", "gifts"]), max_size=3),
        "qty": _json | st.integers(-3, 3),
        "amount": _json | st.decimals(allow_nan=True).map(str),
        "returnOf": _json | st.sampled_from(["o", "a"]),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(_events | _json, max_size=6))
def test_any_batch_is_answered_with_a_fate_for_every_event(batch):
    """No input makes ingest fail: each event is accepted, a duplicate, or rejected with a reason."""
    result = ingest(*batch)

    assert result.accepted + result.duplicates + len(result.rejected) == len(batch)
    assert all(isinstance(r["error"], str) and r["error"] for r in result.rejected)


# What the fields let through to a digest: any id, product ids and slugs of their patterns; the fields
# both kinds of event share.
_shared_fields = {
    "event_id": _any_text.filter(bool),
    "seconds": st.floats(0, 4e9, allow_nan=False),
    "product_id": st.from_regex(events._PRODUCT_ID, fullmatch=True),
    "categories": st.none() | st.lists(st.from_regex(events._SLUG, fullmatch=True), max_size=3),
}


def _json_md5(event_id, ts, product_id, categories, *rest) -> str:
    """The MD5 of json.dumps of an event's canonical list, as digests were first made."""
    canonical = [
        event_id,
        round(ts.timestamp(), 6),
        product_id,
        sorted(categories) if categories else None,
        *rest,
    ]
    return hashlib.md5(json.dumps(canonical).encode(), usedforsecurity=False).hexdigest()


@settings(max_examples=200, deadline=None)
@given(
    **_shared_fields,
    qty=st.integers(-(10**6), 10**6),
    amount=st.none() | st.decimals(0, 10**12, places=2),
    return_of=st.none() | _any_text.filter(bool),
)
def test_an_event_digest_is_the_md5_of_its_canonical_json_as_json_dumps_writes_it(
    event_id, seconds, product_id, categories, qty, amount, return_of
):
    """Stored sales keep the digests they were given: a resend of one must still match."""
    ts = dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    data = {
        "id": event_id,
        "ts": ts,
        "productId": product_id,
        "categories": categories,
        "qty": qty,
        "amount": amount,
        "returnOf": return_of,
    }
    cents = int(amount * 100) if amount is not None else None

    assert event_digest(data) == _json_md5(event_id, ts, product_id, categories, qty, cents, return_of)


@settings(max_examples=200, deadline=None)
@given(**_shared_fields, kind=st.sampled_from(["view", "wish"]))
def test_an_engagement_digest_is_the_md5_of_its_canonical_json_as_json_dumps_writes_it(
    event_id, seconds, product_id, categories, kind
):
    """Stored views keep the digests they were given: a resend of one must still match."""
    ts = dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    data = {"id": event_id, "ts": ts, "productId": product_id, "categories": categories, "kind": kind}

    assert engagement_digest(data) == _json_md5(event_id, ts, product_id, categories, kind)


# --- what a batch reads ----------------------------------------------------------------------


def test_a_batch_reads_the_ids_and_totals_it_names_not_every_one_stored():
    """A batch of 1,000 sales among 50,000 stored ids and product totals reads about its own rows of
    each: at this size the planner matched them by a join that read the whole tables."""
    # given 50,000 stored sale ids and product totals, analysed as autovacuum would
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO rankings_saleid (event_id, digest, sale_id, counted_at)"
            " SELECT 'old-' || i, 'x', -i, %s FROM generate_series(1, 50000) AS i",
            [NOW - dt.timedelta(days=1)],
        )
        cursor.execute(
            "INSERT INTO rankings_producttotal (product_id, units, revenue_cents)"
            " SELECT 'old-' || i, 1, 100 FROM generate_series(1, 50000) AS i"
        )
        cursor.execute("ANALYZE rankings_saleid; ANALYZE rankings_producttotal")
    events = [event(id=f"new-{i}", productId=f"p{i % 300}") for i in range(1_000)]
    before = {table: table_rows_read(table) for table in ("rankings_saleid", "rankings_producttotal")}
    # when
    result = ingest(*events)
    # then every sale is stored, and each table read no more than a few rows a sale
    assert result.accepted == 1_000
    read = {table: table_rows_read(table) - before[table] for table in before}
    assert read["rankings_saleid"] < 3_000, read
    assert read["rankings_producttotal"] < 3_000, read


def test_a_batch_reads_the_tree_that_counts_once_a_process_however_large():
    """Each batch expands its sales' categories with the active version's tree, which a rebuild froze
    for good: read whole for every batch, a tree of 100,000 categories cost a batch 34 ms."""
    from rankings.models import RankingVersion
    from rankings.serving import memory

    # given the version that counts with a tree of 10,000 categories, toys the last of a chain
    chain = {f"k{i}": f"k{i + 1}" for i in range(9_999)}
    RankingVersion.objects.filter(number=active().number).update(tree={"toys": "k0", **chain})
    memory.forget_all()
    assert ingest(event(id="first")).accepted == 1
    with connection.cursor() as cursor:  # where PostgreSQL keeps a tree that large: out of line
        cursor.execute(
            "SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'rankings_rankingversion'"
        )
        (stored_apart,) = cursor.fetchone()
    before = table_rows_read(stored_apart)
    # when a later batch is stored
    assert ingest(event(id="second", productId="p2")).accepted == 1
    # then it reads no part of the tree, and its sale counts in every ancestor of toys all the same
    assert table_rows_read(stored_apart) == before
    queued = PendingSale.objects.filter(sale__in=Sale.objects.filter(event_id="second"))
    assert {"toys", "k0", "k9999"} <= {slug for row in queued for slug in row.categories}

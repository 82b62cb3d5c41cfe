"""POST /v1/sales: the contract of DESIGN.md §4."""

import pytest

from rankings.models import Sale

pytestmark = pytest.mark.django_db


def event(**overrides):
    base = {
        "id": "ord-1-line-1",
        "ts": 1760000000,
        "productId": "p1",
        "categories": ["toys"],
        "qty": 2,
        "amount": "25.00",
    }
    return {**base, **overrides}


def test_a_valid_event_is_stored_with_exact_cents(ingest_api):
    reply = ingest_api.post("/v1/sales", {"events": [event()]}, format="json")

    assert reply.status_code == 200
    assert reply.json() == {"accepted": 1, "duplicates": 0, "rejected": []}
    sale = Sale.objects.get(event_id="ord-1-line-1")
    assert (sale.qty, sale.amount_cents, sale.categories) == (2, 2500, ["toys"])


def test_the_valid_events_of_a_mixed_batch_are_stored(ingest_api):
    events = [event(id="a"), event(id="b", qty=0), event(id="c")]

    reply = ingest_api.post("/v1/sales", {"events": events}, format="json").json()

    assert reply["accepted"] == 2
    assert reply["rejected"] == [{"index": 1, "id": "b", "error": "qty must be a non-zero integer"}]
    assert set(Sale.objects.values_list("event_id", flat=True)) == {"a", "c"}


def test_without_a_token_the_batch_is_refused(api):
    reply = api.post("/v1/sales", {"events": [event()]}, format="json")

    assert reply.status_code == 401
    assert "error" in reply.json()
    assert not Sale.objects.exists()

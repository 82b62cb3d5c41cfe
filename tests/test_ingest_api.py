"""POST /v1/sales: authentication, batch limits, per-event rejections (docs/api.md)."""

import gc
import json

import pytest
from django.contrib.auth.models import Permission
from hypothesis import given, settings
from hypothesis import strategies as st

from rankings.ingest.events import json_decoded
from rankings.models import Sale
from rankings.operations.tokens import token_create

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


def test_a_bad_token_is_refused(api):
    api.credentials(HTTP_AUTHORIZATION="Token not-a-key")

    reply = api.post("/v1/sales", {"events": [event()]}, format="json")

    assert reply.status_code == 401
    assert reply.json() == {"error": "Invalid token."}
    assert not Sale.objects.exists()


def test_a_user_without_the_add_sale_permission_is_forbidden(api, django_user_model):
    """A token proves who is sending; only users with rankings.add_sale may store sales."""
    # given a user with a token but no permission
    user = django_user_model.objects.create_user("reader")
    api.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=user)}")

    # when
    reply = api.post("/v1/sales", {"events": [event()]}, format="json")

    # then
    assert reply.status_code == 403
    assert set(reply.json()) == {"error"}
    assert not Sale.objects.exists()


def test_an_inactive_user_is_refused(ingest_api, ingest_user):
    ingest_user.is_active = False
    ingest_user.save()

    reply = ingest_api.post("/v1/sales", {"events": [event()]}, format="json")

    assert reply.status_code == 401
    assert "error" in reply.json()


def test_a_batch_of_5001_events_is_too_large(ingest_api):
    events = [event(id=f"e{i}") for i in range(5001)]

    reply = ingest_api.post("/v1/sales", {"events": events}, format="json")

    assert reply.status_code == 413
    assert reply.json() == {"error": "at most 5000 events per batch; this one has 5001"}
    assert not Sale.objects.exists()


def test_a_full_batch_of_5000_events_is_accepted(ingest_api):
    events = [event(id=f"e{i}", productId=f"p{i % 700}", categories=[f"c{i % 50}"]) for i in range(5000)]

    reply = ingest_api.post("/v1/sales", {"events": events}, format="json")

    assert reply.status_code == 200
    assert reply.json() == {"accepted": 5000, "duplicates": 0, "rejected": []}
    assert Sale.objects.count() == 5000


def test_duplicates_are_counted_in_the_reply(ingest_api):
    ingest_api.post("/v1/sales", {"events": [event()]}, format="json")

    reply = ingest_api.post("/v1/sales", {"events": [event(), event(id="new")]}, format="json")

    assert reply.json() == {"accepted": 1, "duplicates": 1, "rejected": []}


BAD_BODIES = [
    pytest.param(b"[]", 'body must be {"events": [ ... ]}', id="a JSON list"),
    pytest.param(b'"events"', 'body must be {"events": [ ... ]}', id="a JSON string"),
    pytest.param(b"12", 'body must be {"events": [ ... ]}', id="a JSON number"),
    pytest.param(b"null", 'body must be {"events": [ ... ]}', id="null"),
    pytest.param(b"", 'body must be {"events": [ ... ]}', id="empty"),
    pytest.param(b"{}", 'body must be {"events": [ ... ]}', id="no events"),
    pytest.param(b'{"events": null}', 'body must be {"events": [ ... ]}', id="events null"),
    pytest.param(b'{"events": {"id": "a"}}', 'body must be {"events": [ ... ]}', id="events an object"),
    pytest.param(b'{"events": "a"}', 'body must be {"events": [ ... ]}', id="events a string"),
    pytest.param(b'{"events": [', "JSON parse error", id="invalid JSON"),
    pytest.param(b'{"events": [NaN]}', "JSON parse error", id="NaN"),
    pytest.param(b"\xff\xfe\x00", "JSON parse error", id="not UTF-8"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "JSON parse error", id="nested too deeply"),
    pytest.param(b'{"events": [' + b"9" * 5000 + b"]}", "JSON parse error", id="an integer of 5000 digits"),
]


@pytest.mark.parametrize(("body", "error"), BAD_BODIES)
def test_a_body_that_is_not_a_batch_is_a_400_json_error(ingest_api, body, error):
    reply = ingest_api.generic("POST", "/v1/sales", body, content_type="application/json")

    assert reply.status_code == 400
    assert reply.json()["error"].startswith(error)
    assert not Sale.objects.exists()


def test_a_body_that_is_not_json_is_refused_as_json(ingest_api):
    reply = ingest_api.generic("POST", "/v1/sales", b"id=1", content_type="application/x-www-form-urlencoded")

    assert reply.status_code == 415
    assert "error" in reply.json()


@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
)
@pytest.mark.parametrize(
    ("path", "permission"),
    [
        ("/v1/sales", "rankings.add_sale"),
        ("/v1/engagements", "rankings.add_engagement"),
        ("/v1/catalogue/products", "catalogue.change_product"),
        ("/v1/catalogue/categories", "catalogue.change_category"),
    ],
)
def test_an_empty_body_of_a_form_is_a_400_json_error(ingest_api, ingest_user, content_type, path, permission):
    """DRF reads an empty body of any type as an empty form, which no parser made: still no batch."""
    app_label, codename = permission.split(".")
    ingest_user.user_permissions.add(
        Permission.objects.get(codename=codename, content_type__app_label=app_label)
    )

    reply = ingest_api.generic("POST", path, b"", content_type=content_type)

    assert reply.status_code == 400
    assert reply.json()["error"].startswith("body must be {")


GARBAGE_EVENTS = [
    pytest.param(None, "event must be a JSON object", id="null"),
    pytest.param([], "event must be a JSON object", id="a list"),
    pytest.param("ord-1", "event must be a JSON object", id="a string"),
    pytest.param(1e308, "event must be a JSON object", id="a huge number"),
    pytest.param({}, "id is required", id="an empty object"),
    pytest.param(event(ts=10**300), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts huge"),
    pytest.param(event(ts=-(10**300)), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts hugely negative"),
    pytest.param(event(ts="9" * 400), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts huge string"),
    pytest.param(event(ts="0001-01-01T00:00:00+01:00"), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts before year 1 in UTC"),
    pytest.param(event(ts="²"), "ts must be epoch seconds or an ISO-8601 time with a UTC offset", id="ts a superscript digit"),
    pytest.param(event(qty=10**300), "qty must be between -1,000,000 and 1,000,000", id="qty huge"),
    pytest.param(event(qty=1e300), "qty must be a non-zero integer", id="qty a huge float"),
    pytest.param(event(amount=10**300), "amount may have at most 12 digits before the decimal point", id="amount huge"),
    pytest.param(event(amount="1e999999"), "amount must be written with the digits 0-9 and at most one point, such as 25.00 (no exponent, no separators)", id="amount huge exponent"),
    pytest.param(event(amount=1e308), "amount may have at most 12 digits before the decimal point", id="amount a huge float"),
    pytest.param(event(amount={}), "amount must be a decimal number (a JSON string or number)", id="amount an object"),
    pytest.param(event(categories=[None]), "categories: 'NoneType' is not a slug (at most 50 of a-z A-Z 0-9 _ -)", id="a null category"),
    pytest.param(event(categories=["c"] * 51), "categories must be a list of at most 20 slugs", id="51 categories"),
    pytest.param(event(productId=None), "productId may not be null", id="productId null"),
    pytest.param(event(ts=None), "ts may not be null", id="ts null"),
    pytest.param(event(id="\ud800"), "id must be a string of 1 to 128 characters", id="id a lone surrogate"),
    pytest.param(event(id="a" * 100_000), "id must be a string of 1 to 128 characters", id="id of 100,000 characters"),
    pytest.param(event(returnOf="\x00", qty=-1), "returnOf must be a string of 1 to 128 characters", id="returnOf with a NUL"),
]  # fmt: skip


@pytest.mark.parametrize(("bad_event", "error"), GARBAGE_EVENTS)
def test_a_garbage_event_is_rejected_not_a_server_error(ingest_api, bad_event, error):
    """Whatever an event holds, the reply is 200 with a reason; the rest of the batch is stored."""
    body = json.dumps({"events": [event(id="good"), bad_event]})  # ASCII: lone surrogates escaped

    reply = ingest_api.generic("POST", "/v1/sales", body, content_type="application/json")

    assert reply.status_code == 200
    body = reply.json()
    assert body["accepted"] == 1
    assert [(r["index"], r["error"]) for r in body["rejected"]] == [(1, error)]


def test_the_reply_names_each_rejected_event_by_index_and_id(ingest_api):
    """An id that is itself invalid is not echoed: the index identifies the event."""
    events = [event(id="a"), event(id="b", productId="p 1"), event(id="x" * 200), event(id="d", qty=-2)]

    reply = ingest_api.post("/v1/sales", {"events": events}, format="json").json()

    assert reply["rejected"] == [
        {"index": 1, "id": "b", "error": "productId must be 1 to 64 characters of A-Z a-z 0-9 . _ : -"},
        {"index": 2, "id": None, "error": "id must be a string of 1 to 128 characters"},
        {"index": 3, "id": "d", "error": "a negative qty is a return and needs returnOf"},
    ]


def test_the_batch_limit_is_the_max_batch_events_setting(ingest_api, settings):
    """A batch one event over MAX_BATCH_EVENTS is refused whole, however the setting is set."""
    settings.RANKINGS = {**settings.RANKINGS, "MAX_BATCH_EVENTS": 3}

    over = ingest_api.post("/v1/sales", {"events": [event(id=f"e{i}") for i in range(4)]}, format="json")
    full = ingest_api.post("/v1/sales", {"events": [event(id=f"e{i}") for i in range(3)]}, format="json")

    assert over.status_code == 413
    assert over.json() == {"error": "at most 3 events per batch; this one has 4"}
    assert full.status_code == 200 and full.json()["accepted"] == 3


# --- the compiled JSON decoder reads a batch as json.loads does ---------------------------------

_json_text = st.text(st.characters(exclude_categories=()), max_size=20)  # lone surrogates too
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)  # past 64 bits both ways
    | st.floats()  # NaN and infinities too
    | _json_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_json_text, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=_json_values, ensure_ascii=st.booleans())
def test_the_compiled_decoder_reads_json_as_json_loads_does(value, ensure_ascii):
    """Same values of the same types, and what the compiled decoder refuses goes the slow way."""
    try:
        data = json.dumps(value, ensure_ascii=ensure_ascii).encode()
    except UnicodeEncodeError:  # a lone surrogate, not encodable as UTF-8 unescaped
        return
    slow = []

    decoded = json_decoded(data, lambda: slow.append(1) or json.loads(data))

    expected = json.loads(data)
    assert repr(decoded) == repr(expected)
    assert _types(decoded) == _types(expected)
    if slow:  # only what the compiled decoder cannot hold exactly goes the slow way
        assert any(s in data for s in (b"NaN", b"Infinity", b"\\ud", b"\\udc")), data


def _types(value):
    if isinstance(value, list):
        return [_types(v) for v in value]
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()}
    return type(value)


@pytest.mark.parametrize("body", [b'{"events": [{"qty": 99999999999999999999}]}', b'{"events": [1e400]}'])
def test_numbers_past_64_bits_or_a_double_are_read_as_json_loads_reads_them(body):
    assert repr(json_decoded(body, lambda: json.loads(body))) == repr(json.loads(body))


def test_the_garbage_collector_is_held_off_from_the_parse_to_the_reply_and_back_on_after(
    ingest_api, monkeypatch
):
    from rankings.ingest import sales

    seen = []
    parse = json_decoded

    def decoded(*args, **kwargs):
        seen.append(("parse", gc.isenabled()))
        return parse(*args, **kwargs)

    write = sales.SaleIngest.write

    def recorded(self, *args, **kwargs):
        seen.append(("write", gc.isenabled()))
        return write(self, *args, **kwargs)

    monkeypatch.setattr("rankings.serving.api.json_decoded", decoded)
    monkeypatch.setattr(sales.SaleIngest, "write", recorded)

    reply = ingest_api.post("/v1/sales", {"events": [event()]}, format="json")

    assert reply.json()["accepted"] == 1
    assert seen == [("parse", False), ("write", False)]
    assert gc.isenabled()


def test_the_garbage_collector_is_back_on_after_a_batch_that_failed(ingest_api, monkeypatch):
    from rankings.ingest import sales

    def broken(self, *args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(sales.SaleIngest, "write", broken)
    with pytest.raises(RuntimeError):
        sales.sales_ingest(events=[event()], source="test")

    assert gc.isenabled()

"""The API against its own OpenAPI schema (schemathesis, /v1/schema).

Every operation gets positive and negative cases through the WSGI app: no
response is a server error, every status code and body is one the schema
documents, and invalid input is refused.
"""

import urllib.parse

import pytest
import schemathesis
from django.contrib.auth.models import Permission
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.urls import Resolver404, resolve
from hypothesis import HealthCheck, settings
from rest_framework.throttling import ScopedRateThrottle
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
)

from rankings.conf import rankings_settings
from rankings.operations.tokens import token_create
from rankings.serving.api import MAX_DEPTH
from salesrank_site.wsgi import application

from .rankings_helpers import Shop

# Per operation and generation mode; enough to reach every documented status
# while the whole run stays well under two minutes.
MAX_EXAMPLES = 40


@pytest.fixture
def shop_with_boards(db):
    """A few real boards, so that reads of known categories and products answer 200."""
    shop = Shop()
    shop.send(
        shop.sale("p1", categories=["toys"], qty=3, amount="30.00"),
        shop.sale("p2", categories=["toys", "games"], qty=1, amount="12.50"),
        shop.sale("p3", categories=["games"], qty=2),
    )
    shop.tick()
    return shop


@pytest.fixture
def api(shop_with_boards, monkeypatch):
    """The WSGI app as schemathesis calls it, inside the test's transaction."""
    # Throttling has its own tests; here it would only turn generated reads into 429s.
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"ingest": None, "reads": None})
    # The app closes the database connection around each request, which would
    # end the test's transaction; Django's own test client keeps it open too.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def ingest_token(ingest_user):
    """A token that may send sales and push the catalogue, so that those bodies reach their services."""
    ingest_user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="catalogue", codename__in=["change_product", "change_category"]
        )
    )
    return token_create(user=ingest_user)


# Loaded once, at collection: /v1/schema needs neither the database nor Redis.
schema = schemathesis.openapi.from_wsgi("/v1/schema", application)
schema.config.generation.update(max_examples=MAX_EXAMPLES)
# More than 5,000 events is refused with 413 (MAX_BATCH_EVENTS), which is a refusal too.
schema.config.checks.negative_data_rejection.expected_statuses += ["413"]


def _outside_the_routes(case) -> bool:
    """A path parameter the URL pattern cannot match (a slug of other characters, an id with a '/')."""
    try:
        resolve(urllib.parse.unquote(case.formatted_path))
    except Resolver404:
        return True
    return False


# The batches whose items are judged one by one: path -> the body's key.
_BATCHES = {
    "/v1/sales": "events",
    "/v1/catalogue/products": "products",
    "/v1/catalogue/categories": "categories",
}


def _a_batch(case) -> bool:
    """A body {"events": [at most 5,000 items]} (or products, categories): the batch is taken, and
    each item judged on its own."""
    body, key = case.body, _BATCHES.get(case.operation.path)
    return (
        key is not None
        and isinstance(body, dict)
        and isinstance(body.get(key), list)
        and len(body[key]) <= 5000
    )


def _beyond_max_depth(case) -> bool:
    """offset + limit > 10,000: each is valid on its own, the pair is not (a 400 the schema cannot state)."""
    query = case.query or {}
    try:
        return int(query.get("offset", 0)) + int(query.get("limit", 50)) > MAX_DEPTH
    except (TypeError, ValueError):
        return False


@schema.parametrize()
# The fixtures (a shop, a token, the app's settings) are meant to be shared by every example.
@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_every_response_is_documented_and_no_input_causes_a_server_error(case, api, ingest_token):
    excluded = []
    if _beyond_max_depth(case):
        excluded.append(positive_data_acceptance)
    if _outside_the_routes(case):
        # Django answers such a URL with its HTML 404 page before any API view
        # runs; the status is still a refusal, but neither JSON nor the schema's.
        excluded += [content_type_conformance, response_schema_conformance]
    if _a_batch(case):
        # A batch with bad events is answered 200, each bad event listed as
        # rejected, so one bad event costs the others nothing; every event is accounted for below.
        excluded.append(negative_data_rejection)

    response = case.call_and_validate(
        headers={"Authorization": f"Token {ingest_token}"}, excluded_checks=excluded
    )

    if _a_batch(case) and response.request.method == "POST" and response.status_code == 200:
        reply = response.json()
        items = case.body[_BATCHES[case.operation.path]]
        taken = (
            reply.get("accepted", 0)
            + reply.get("duplicates", 0)
            + reply.get("created", 0)
            + reply.get("updated", 0)
        )
        assert taken + len(reply["rejected"]) == len(items)


def _sample_answers() -> dict:
    """Every hand-written reply (one that writes its JSON itself, not field by field) with one typed
    answer, every optional value present."""
    import datetime as dt
    from decimal import Decimal

    from rankings.serving import api as read_api
    from rankings.serving import categories_api, moves, moves_api, selectors
    from rankings.serving.thresholds import Thresholds

    at = dt.datetime(2026, 3, 2, 12, tzinfo=dt.UTC)
    item = selectors.RankedProduct(1, "p1", "Kite", 3, Decimal("12.30"), views=40, wishes=2, rank_then=4)
    new = selectors.RankedProduct(1, "p1", "Kite", 3, Decimal("12.30"), views=40, wishes=2, released_at=at)
    ranked = selectors.CategoryRank("toys", 1, 3, Decimal("12.30"), 4, 25.0, views=40, wishes=2)
    return {
        "BoardTopReply": (read_api.BoardTopReply, selectors.Board("toys", "7d", "units", at, 4, (item,))),
        "ProductRankReply": (
            read_api.ProductRankReply,
            selectors.Rank(
                "p1", "toys", "7d", "views", at, 1, 3, Decimal("12.30"), 4, 25.0, views=40, wishes=2
            ),
        ),
        "ProductRanksReply": (
            read_api.ProductRanksReply,
            selectors.Ranks("p1", "7d", "units", at, (ranked,)),
        ),
        "ProductNeighborsReply": (
            read_api.ProductNeighborsReply,
            selectors.Neighbors("p1", "toys", "7d", "units", at, 1, (item,)),
        ),
        "ThresholdsReply": (
            read_api.ThresholdsReply,
            Thresholds(
                "toys", "7d", "revenue", at, 4, ((1, Decimal("12.30")),), ((Decimal(1), Decimal(2), 3),)
            ),
        ),
        "BoardMoversReply": (
            moves_api.BoardMoversReply,
            moves.Movers("toys", "1d", "units", at, 1, (item,), then=at - dt.timedelta(hours=24)),
        ),
        "BoardNewReply": (moves_api.BoardNewReply, selectors.Board("toys", "7d", "units", at, 1, (new,))),
        "ProductHistoryReply": (
            moves_api.ProductHistoryReply,
            moves.History("p1", "toys", "1d", "units", (moves.HistoryPoint(at, 2),)),
        ),
        "CategoryListReply": (
            categories_api.CategoryListReply,
            selectors.CategoriesPage(2, [("all", "All"), ("toys", "Toys")], next="toys"),
        ),
    }


@pytest.mark.parametrize("name", sorted(_sample_answers()))
@pytest.mark.django_db
def test_each_reply_writes_exactly_the_fields_its_schema_declares(name, rf):
    """A reply written by a plain function for speed (or by hand, as the categories' list): its
    keys, and those of its nested items, are the fields the same serializer declares for the
    OpenAPI schema."""
    reply_class, answer = _sample_answers()[name]
    reply = reply_class(context={"request": rf.get("/v1/categories")})
    written = reply.to_representation(answer)

    declared = reply.fields
    assert list(written) == [f for f in written if f in declared] and set(written) == set(declared)
    for key, value in written.items():
        if isinstance(value, list) and hasattr(declared[key], "child"):
            child = declared[key].child
            if hasattr(child, "fields"):
                assert value and set(value[0]) == set(child.fields), key


def test_every_hand_written_reply_is_checked():
    """Each reply of the API that writes its own JSON (its `wire`, or its own to_representation),
    other than the items nested in another, is among the sampled ones above."""
    from rest_framework import serializers

    from rankings.serving import alerts_api, categories_api, engagement_api, moves_api
    from rankings.serving import api as read_api

    replies = {
        name: value
        for module in (read_api, moves_api, categories_api, engagement_api, alerts_api)
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, serializers.Serializer)
        and name.endswith("Reply")
        and not name.startswith("_")
        and value.__module__ == module.__name__
    }
    nested = {
        type(field.child).__name__
        for reply in replies.values()
        for field in reply().fields.values()
        if isinstance(field, serializers.ListSerializer)
    }
    hand_written = {
        name
        for name, reply in replies.items()
        if name not in nested and ("wire" in vars(reply) or "to_representation" in vars(reply))
    }
    assert hand_written == set(_sample_answers())


def test_the_documented_batch_limit_is_the_setting(settings):
    """The request body the schema documents is the serializer post() validates with: its limit is MAX_BATCH_EVENTS."""
    from rankings.serving.api import IngestRequest

    assert IngestRequest().fields["events"].max_length == rankings_settings.MAX_BATCH_EVENTS

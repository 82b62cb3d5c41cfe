"""What an anonymous caller can make a read cost: path segments checked before any lookup, the
schema made once per process and throttled, lists paged by cursor past their depth, a category's
children paged."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from drf_spectacular.generators import SchemaGenerator
from rest_framework.throttling import ScopedRateThrottle, SimpleRateThrottle

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)

TOO_LONG_SLUG = "a" * 51
TOO_LONG_ID = "p" * 65


# --- path segments ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        f"/v1/categories/{segment}/{read}"
        for segment in ["%00", "to%01ys", "to%20ys", TOO_LONG_SLUG, "x" * 129]
        for read in ["top", "thresholds", "movers", "new"]
    ]
    + [
        f"/v1/products/{segment}/{read}"
        for segment in ["%00", "p%7F1", "p%C3%A91", TOO_LONG_ID]
        for read in ["rank?category=all", "ranks", "neighbors?category=all", "history?category=all"]
    ],
)
def test_a_path_segment_that_cannot_be_a_slug_or_an_id_is_a_json_404_before_any_lookup(api, path):
    """A NUL, a control character, a space or a segment too long is no category and no product: the
    API says so without asking PostgreSQL or Redis (a NUL there reads as an outage, and a stale board)."""
    # given boards in Redis
    Shop().tick()
    # when
    with CaptureQueriesContext(connection) as queries:
        reply = api.get(path)
    # then
    assert reply.status_code == 404, reply.content
    assert set(reply.json()) == {"error"}
    assert len(queries) == 0


@pytest.mark.parametrize(
    "path",
    [
        f"/c/{TOO_LONG_SLUG}/",
        f"/c/{TOO_LONG_SLUG}/movers/",
        f"/c/{TOO_LONG_SLUG}/new/",
        "/c/%00/",
        "/p/%00/",
        f"/p/{TOO_LONG_ID}/",
        "/p/p%C3%A91/",
    ],
)
def test_a_page_of_a_segment_that_cannot_be_a_slug_or_an_id_is_a_404_before_any_lookup(client, path):
    Shop().tick()
    with CaptureQueriesContext(connection) as queries:
        reply = client.get(path)
    assert reply.status_code == 404
    assert len(queries) == 0


# --- the schema ---------------------------------------------------------------------------


def test_the_schema_is_made_once_per_process(api, monkeypatch):
    """Making the schema costs a tenth of a second of CPU or more: it is made once and its bytes served
    again, in YAML and in JSON alike."""
    # given a count of the schemas made
    made = []
    original = SchemaGenerator.get_schema

    def counted(self, *args, **kwargs):
        made.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    # when it is asked for five times, in both formats
    yaml = [api.get("/v1/schema") for _ in range(3)]
    json = [api.get("/v1/schema?format=json") for _ in range(2)]
    # then every reply is the same schema, made at most once
    assert {r.status_code for r in yaml + json} == {200}
    assert len({r.content for r in yaml}) == len({r.content for r in json}) == 1
    assert yaml[0]["Content-Type"].startswith("application/vnd.oai.openapi")
    assert json[0].json()["paths"]["/v1/categories"]
    assert len(made) <= 1


def test_the_schema_is_throttled_like_the_reads(api, monkeypatch):
    rates = {"reads": "3/min", "pages": "3/min"}
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", rates)
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", rates)

    statuses = [api.get("/v1/schema").status_code for _ in range(4)]

    assert statuses == [200, 200, 200, 429]

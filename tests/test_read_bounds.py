"""What an anonymous caller can make a read cost: path segments checked before any lookup, the
schema made once per process and throttled, lists paged by cursor past their depth, a category's
children paged."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from drf_spectacular.generators import SchemaGenerator
from rest_framework.throttling import ScopedRateThrottle, SimpleRateThrottle

from catalogue.models import Category
from rankings.serving import memory, page_parts

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


# --- deep lists ----------------------------------------------------------------------------


def _categories(count: int, *, parent: Category | None = None, prefix: str = "c") -> list[str]:
    """`count` categories, slug c00000… named "Category 00000…", in one statement."""
    made = [
        Category(slug=f"{prefix}{i:05}", name=f"Category {prefix}{i:05}", parent=parent) for i in range(count)
    ]
    Category.objects.bulk_create(made, batch_size=5000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE catalogue_category")
    memory.forget_all("categories")
    return [c.slug for c in made]


def _rows_read(sql: str) -> int:
    """How many rows the statement's scans returned, as PostgreSQL's EXPLAIN ANALYZE counts them."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
        (plan,) = cursor.fetchone()

    def walk(node) -> int:
        own = node["Actual Rows"] * node.get("Actual Loops", 1) if "Scan" in node["Node Type"] else 0
        return own + sum(walk(child) for child in node.get("Plans", []))

    return walk((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])


def _category_queries(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "catalogue_category" in q["sql"]]


@pytest.mark.parametrize("offset", ["10001", "2147483647"])
def test_the_category_list_refuses_an_offset_past_ten_thousand(api, offset):
    reply = api.get(f"/v1/categories?offset={offset}")

    assert reply.status_code == 400
    assert "offset" in reply.json()["error"] or "10000" in reply.json()["error"]


def test_the_category_list_pages_by_cursor_to_its_end(api):
    """after=<slug> reads the page that follows that category; next names the cursor of the page
    after, null on the last; walking it gives every category once, `all` first, then by name."""
    # given 150 categories
    slugs = _categories(150)
    Shop().tick()
    # when the list is walked 40 at a time
    seen, pages, after = [], 0, None
    while True:
        reply = api.get("/v1/categories?limit=40" + (f"&after={after}" if after else ""))
        assert reply.status_code == 200
        body = reply.json()
        seen += [item["slug"] for item in body["items"]]
        pages, after = pages + 1, body["next"]
        if after is None:
            break
    # then
    assert seen == ["all", *slugs]
    assert pages == 4 and body["total"] == 151
    assert api.get("/v1/categories?limit=151").json()["next"] is None
    assert api.get("/v1/categories?limit=150").json()["next"] == slugs[-2]
    # and an offset counts from the cursor
    assert [
        i["slug"] for i in api.get(f"/v1/categories?limit=2&after={slugs[9]}&offset=3").json()["items"]
    ] == (slugs[13:15])


@pytest.mark.parametrize("query, status", [("after=nope", 404), ("after=%00", 400)])
def test_a_bad_cursor_is_refused(api, query, status):
    """A cursor that is no category's slug is a 404, as any unknown category; one that cannot be a
    slug, a 400."""
    _categories(3)

    reply = api.get(f"/v1/categories?{query}")

    assert reply.status_code == status
    assert reply.json()["error"]


def test_a_page_after_a_category_reads_its_rows_only(api):
    """A page deep in a long list is one walk of the index from the cursor: its rows, not those before."""
    # given 3,000 categories
    slugs = _categories(3000)
    Shop().tick()
    # when the page after the 2,500th is read
    with CaptureQueriesContext(connection) as captured:
        body = api.get(f"/v1/categories?limit=10&after={slugs[2499]}").json()
    # then it holds the ten that follow, and its query read at most eleven rows
    assert [i["slug"] for i in body["items"]] == slugs[2500:2510]
    (page,) = [sql for sql in _category_queries(captured) if "ORDER BY" in sql]
    assert _rows_read(page) <= 11


def test_the_home_page_pages_past_ten_thousand_categories_by_cursor(client):
    """Pages 1 to 100 by number; the next after page 100 follows its last category (?after=), so no
    page is read by an offset past 10,000 rows."""
    # given 10,050 categories at the top of the tree
    slugs = _categories(10_050)
    Shop().tick()
    # when
    hundredth = client.get("/?page=100")
    past = client.get("/?page=101")
    # then page 100 shows the rows 9,901 to 10,000, and its next follows the last of them
    assert [c["slug"] for c in hundredth.context["categories"]] == slugs[9900:10000]
    assert hundredth.context["pages"]["next"] == f"/?after={slugs[9999]}"
    assert past.status_code == 404
    # and that page shows the last fifty, with no next
    with CaptureQueriesContext(connection) as captured:
        after = client.get(hundredth.context["pages"]["next"])
    assert [c["slug"] for c in after.context["categories"]] == slugs[10000:]
    assert after.context["pages"]["next"] is None
    assert not any("OFFSET 10" in sql for sql in _category_queries(captured))


def test_the_home_page_reads_the_top_of_the_tree_through_an_index(client):
    """A catalogue of a few top categories over thousands of others: the home page reads the top ones,
    not every category to find them (nor the tree, per row)."""
    # given 10 top categories and 3,000 under them
    tops = _categories(10, prefix="top")
    _categories(3000, parent=Category.objects.get(slug=tops[0]))
    Shop().tick()
    # when
    with CaptureQueriesContext(connection) as captured:
        reply = client.get("/")
    # then
    assert [c["slug"] for c in reply.context["categories"]] == tops
    assert sum(_rows_read(sql) for sql in _category_queries(captured)) <= 50


@pytest.mark.parametrize("path", ["/c/all/?page=201", "/c/all/new/?page=201"])
def test_a_board_page_past_ten_thousand_rows_is_404_before_any_read(client, monkeypatch, path):
    from .redis_round_trips import RedisRoundTrips

    Shop().tick()
    trips = RedisRoundTrips(monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        reply = client.get(path)

    assert reply.status_code == 404
    assert trips.count == 0 and len(queries) == 0


@pytest.mark.parametrize("read", ["top", "new"])
def test_a_board_list_past_ten_thousand_rows_is_400(api, read):
    Shop().tick()

    reply = api.get(f"/v1/categories/all/{read}?offset=9990&limit=20")

    assert reply.status_code == 400
    assert "10000" in reply.json()["error"]


def test_a_board_page_offers_no_page_past_the_depth(client, monkeypatch):
    """The pager's last page is the last within the depth, however long the board."""
    # given a board of 120 products, and a depth of 100 rows (two pages of 50)
    shop = Shop()
    shop.send(*[shop.sale(f"t{i}", categories=["toys"], qty=i + 1) for i in range(120)])
    shop.tick()
    monkeypatch.setattr(page_parts, "MAX_DEPTH", 100)
    # when
    second = client.get("/c/toys/?page=2")
    third = client.get("/c/toys/?page=3")
    # then
    assert second.status_code == 200
    assert (second.context["pages"]["last"], second.context["pages"]["next"]) == (2, None)
    assert third.status_code == 404


# --- a category's children ------------------------------------------------------------------


def test_a_category_page_shows_its_first_children_and_pages_the_rest_by_cursor(client, monkeypatch):
    """600 categories under one: its page shows the first CHILDREN_SHOWN, by name, with their leaders,
    and links to a page of them all, CHILDREN_PAGE at a time, each page after the last one shown."""
    from rankings.operations import backfill
    from rankings.serving.pages import CHILDREN_PAGE, CHILDREN_SHOWN

    from .redis_round_trips import RedisRoundTrips

    # given 600 categories under "big", in the tree that counts
    big = Category.objects.create(slug="big", name="Big")
    slugs = _categories(600, parent=big)
    backfill.version_build(activate=True)
    Shop().tick()
    names = [f"Category {slug}" for slug in slugs]
    client.get("/c/big/")  # the active version and the names, read once
    # when
    trips = RedisRoundTrips(monkeypatch)
    page = client.get("/c/big/")
    # then the page shows the first twenty, their leaders read in one round trip
    assert [s["name"] for s in page.context["subcategories"]] == names[:CHILDREN_SHOWN]
    assert trips.count <= 6
    assert len(page.content) < 40_000
    # and the page of them all walks every one, a hundred at a time
    seen, pages, url = [], 0, page.context["more_subcategories"]
    assert url == "/c/big/categories/"
    while url:
        reply = client.get(url)
        assert reply.status_code == 200
        seen += [s["name"] for s in reply.context["subcategories"]]
        pages, url = pages + 1, reply.context["pages"]["next"]
    assert seen == names
    assert pages == 600 // CHILDREN_PAGE


def test_a_category_with_few_children_shows_them_all_without_a_link(client):
    big = Category.objects.create(slug="big", name="Big")
    _categories(3, parent=big)
    Shop().tick()

    page = client.get("/c/big/")

    assert len(page.context["subcategories"]) == 3
    assert page.context["more_subcategories"] is None


@pytest.mark.parametrize("query", ["after=nope", "after=%00", "after=" + TOO_LONG_SLUG])
def test_a_page_of_children_after_no_category_is_404(client, query):
    Category.objects.create(slug="big", name="Big")
    Shop().tick()

    assert client.get(f"/c/big/categories/?{query}").status_code == 404

"""The read API (docs/api.md), served from Redis after real ticks."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalogue.models import Category, Product
from rankings.serving import answers, board_reader, catalogue_reads, categories, memory, selectors
from rankings.serving.api import BoardReadApi, ReadApi

from .conftest import built_once_for_the_class
from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)


def _shop() -> Shop:
    """Toys: Yo-yo 7, Kite 5, Puzzle 5, Robot 1 units; Gifts: Kite alone; ticked just now."""
    toys = Category.objects.create(slug="toys", name="Toys")
    gifts = Category.objects.create(slug="gifts", name="Gifts")
    for i, name in enumerate(["Kite", "Yo-yo", "Puzzle", "Robot"]):
        product = Product.objects.create(product_id=f"p{i}", name=name, price_cents=250)
        product.categories.set([toys, gifts] if i == 0 else [toys])
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    shop.send(
        shop.sale("p0", categories=["toys", "gifts"], qty=5, amount="12.50"),
        shop.sale("p1", qty=7, amount="3.01"),
        shop.sale("p2", qty=5, amount="99.99"),
        shop.sale("p3", qty=1),
    )
    shop.tick()
    return shop


@pytest.fixture
def shop():
    """A shop of the test's own, for a test that sends or ticks."""
    return _shop()


shop_once = built_once_for_the_class(_shop)


@pytest.mark.parametrize("window", ["1d", "30d"])
@pytest.mark.parametrize("metric", ["units", "revenue"])
def test_ranks_read_from_a_copy_of_the_board_are_those_redis_gives(api, shop, monkeypatch, window, metric):
    """A board asked for many products is copied into the process; its answers are Redis's own."""
    # given equal scores on the board (a tie ordered by product id) and a product without sales
    shop.send(shop.sale("p3", qty=4, amount="12.50"), shop.sale("p9", categories=["gifts"]))
    shop.tick()
    products = ["p0", "p1", "p2", "p3", "p9", "p404"]

    def ranks() -> list:
        memory.forget_all("answers")
        return [
            api.get(f"/v1/products/{p}/rank?category=toys&window={window}&metric={metric}") for p in products
        ]

    # when the same ranks are read with no copy, then with a copy made at the first read
    direct = ranks()
    monkeypatch.setattr(board_reader, "BOARD_COPY_AFTER", 1)
    copied = ranks()
    # then the copy was really made, and every answer (404 for an unknown product) is the same
    assert board_reader._board_copies, "no board was copied"
    assert [(r.status_code, r.json()) for r in copied] == [(r.status_code, r.json()) for r in direct]
    assert [r.status_code for r in direct] == [200] * 5 + [404]
    assert direct[0].json()["rank"] is not None and direct[4].json()["rank"] is None


def test_a_board_copy_is_kept_while_its_shard_is_unwritten_and_made_again_after_a_tick(
    api, shop, monkeypatch
):
    monkeypatch.setattr(board_reader, "BOARD_COPY_AFTER", 1)
    monkeypatch.setattr(answers, "FRESH_SECONDS", 0.0)  # every read checks the copy against Redis
    memory.forget_all("answers")

    def rank(product):
        return api.get(f"/v1/products/{product}/rank?category=toys").json()["rank"]

    # when a copy is made and read again with no tick in between
    assert rank("p3") == 4
    (first,) = [copy for copy, _ in board_reader._board_copies.values()]
    assert rank("p3") == 4
    # then the same copy answered
    assert [copy for copy, _ in board_reader._board_copies.values()] == [first]

    # when a tick moves p3 to the top, the next read (of a product not asked before: no
    # remembered answer) sees it from a new copy: p0 went from 2nd to 3rd
    shop.advance(seconds=1)
    shop.send(shop.sale("p3", qty=20))
    shop.tick()
    assert rank("p0") == 3
    (second,) = [copy for copy, _ in board_reader._board_copies.values()]
    assert second is not first


@pytest.mark.parametrize("path", ["/v1/categories?limit=", "/v1/categories/all/top?offset=&limit=5"])
def test_a_parameter_given_without_a_value_is_a_400(api, path):
    """`?limit=` is not "left out": the caller meant a value and gets told it is missing."""
    response = api.get(path)
    assert response.status_code == 400
    assert "may not be empty" in response.json()["error"]


@pytest.mark.parametrize(
    "path", ["/v1/categories?offset=0.0", "/v1/categories/all/top?limit=5.0", "/v1/categories?limit=%202"]
)
def test_an_integer_parameter_given_as_anything_but_digits_is_a_400(api, path):
    """The schema says integer: `0.0` and ` 2`, which DRF's field would read as 0 and 2, are refused."""
    response = api.get(path)
    assert response.status_code == 400
    assert "valid integer" in response.json()["error"]


# What a reply says besides its body: an anonymous GET of a board read is answered without DRF's
# request (BoardReadApi.dispatch), and must say all that DRF's dispatch would have said.
_HEADERS = ("Content-Type", "Cache-Control", "Allow", "Vary", "ETag", "Warning", "Retry-After")


# --- reads of one shop, built once for the tests that read it ------------------------------


@pytest.mark.django_db
class TestReadsOfOneShop:
    """Reads of the shop, built once for the class: each test finds the database and Redis as the
    build left them, whatever the previous test wrote."""

    @pytest.fixture
    def shop(self, shop_once):
        return shop_once.restored()

    def test_top_lists_the_board_in_rank_order_with_names_and_both_metrics(self, api, shop):
        reply = api.get("/v1/categories/toys/top?window=1d")

        assert reply.status_code == 200
        body = reply.json()
        assert body["category"] == "toys" and body["window"] == "1d" and body["metric"] == "units"
        assert body["total"] == 4
        assert body["asOf"] == shop.now.isoformat().replace("+00:00", "Z")
        assert body["items"] == [
            {"rank": 1, "productId": "p1", "name": "Yo-yo", "units": 7, "revenue": "3.01", "rankThen": None},
            {"rank": 2, "productId": "p0", "name": "Kite", "units": 5, "revenue": "12.50", "rankThen": None},
            {
                "rank": 3,
                "productId": "p2",
                "name": "Puzzle",
                "units": 5,
                "revenue": "99.99",
                "rankThen": None,
            },
            {"rank": 4, "productId": "p3", "name": "Robot", "units": 1, "revenue": "2.50", "rankThen": None},
        ]

    def test_top_by_revenue_with_limit_and_offset(self, api, shop):
        body = api.get("/v1/categories/toys/top?metric=revenue&limit=2&offset=1").json()

        assert [(i["rank"], i["productId"], i["revenue"]) for i in body["items"]] == [
            (2, "p0", "12.50"),
            (3, "p1", "3.01"),
        ]

    def test_a_top_read_costs_one_catalogue_query(self, api, shop):
        api.get("/v1/categories/toys/top")  # warm the category cache
        memory.forget_all("answers")
        with CaptureQueriesContext(connection) as queries:
            api.get("/v1/categories/toys/top")
        assert len(queries) == 1

    def test_rank_of_a_product_with_percentile(self, api, shop):
        body = api.get("/v1/products/p2/rank?category=toys").json()

        assert body["rank"] == 3 and body["total"] == 4 and body["units"] == 5 and body["revenue"] == "99.99"
        assert body["percentile"] == 75.0

    def test_a_board_larger_than_a_copy_is_read_from_redis(self, api, shop, monkeypatch):
        monkeypatch.setattr(board_reader, "BOARD_COPY_AFTER", 1)
        monkeypatch.setattr(board_reader, "BOARD_COPY_MEMBERS", 3)  # the toys board has 4
        memory.forget_all("answers")

        reply = api.get("/v1/products/p2/rank?category=toys&window=30d")

        assert reply.json()["rank"] == 3
        assert [copy for copy, _ in board_reader._board_copies.values()] == [None]

    def test_a_product_without_sales_on_a_board_is_unranked_not_an_error(self, api, shop):
        body = api.get("/v1/products/p1/rank?category=gifts").json()

        assert body["rank"] is None and body["percentile"] is None and body["units"] == 0

    def test_unranked_products_read_many_times_cost_one_copy_of_the_catalogue(self, api, shop, monkeypatch):
        """A reader of many unranked products: after CATALOGUE_COPY_AFTER lookups the catalogue is
        read whole, once, and answers the rest; a product created after the copy is still found."""
        monkeypatch.setattr(catalogue_reads, "CATALOGUE_COPY_AFTER", 2)
        api.get("/v1/categories/gifts/top")  # the category names read
        memory.forget_all("answers")
        with CaptureQueriesContext(connection) as queries:
            replies = [api.get(f"/v1/products/p{i}/rank?category=gifts") for i in (1, 2, 3, 1, 2, 3, 404)]
        assert [(r.status_code, r.json().get("rank")) for r in replies] == [(200, None)] * 6 + [(404, None)]
        # p1 alone, then the copy (at p2), which knew p3; an id no product has is asked for alone (it
        # may be a product created since the copy)
        assert len(queries) == 3, [q["sql"] for q in queries]

        Product.objects.create(product_id="p5", name="Drum", price_cents=100)
        assert api.get("/v1/products/p5/rank?category=gifts").status_code == 200

    def test_a_catalogue_larger_than_the_product_memory_is_looked_up_product_by_product(
        self, api, shop, monkeypatch
    ):
        monkeypatch.setattr(catalogue_reads, "CATALOGUE_COPY_AFTER", 1)
        monkeypatch.setattr(catalogue_reads, "PRODUCT_CACHE_SIZE", 3)  # the shop has 4 products
        api.get("/v1/categories/gifts/top")  # the category names read
        memory.forget_all("answers")
        with CaptureQueriesContext(connection) as queries:
            replies = [api.get(f"/v1/products/p{i}/rank?category=gifts") for i in (1, 2, 3, 404)]
        assert [r.status_code for r in replies] == [200, 200, 200, 404]
        # the copy was tried once (at p1) and found too large; each product was then read alone
        assert len(queries) == 5, [q["sql"] for q in queries]

    def test_ranks_in_each_of_the_products_categories(self, api, shop):
        body = api.get("/v1/products/p0/ranks?window=30d").json()

        assert [(r["category"], r["rank"], r["total"]) for r in body["ranks"]] == [
            ("gifts", 1, 1),
            ("toys", 2, 4),
        ]

    def test_neighbours_are_the_products_just_above_and_below(self, api, shop):
        body = api.get("/v1/products/p0/neighbors?category=toys&n=1").json()

        assert body["rank"] == 2
        assert [i["productId"] for i in body["items"]] == ["p1", "p0", "p2"]

    @pytest.mark.parametrize(
        "url",
        [
            "/v1/categories/toys/top?window=2d",
            "/v1/categories/toys/top?metric=likes",
            "/v1/categories/toys/top?limit=0",
            "/v1/categories/toys/top?limit=101",
            "/v1/categories/toys/top?offset=9990&limit=11",
            "/v1/categories/toys/top?offset=-1",
            "/v1/categories/toys/top?limit=abc",
            "/v1/products/p0/rank",
            "/v1/products/p0/rank?category=no%20slug",
            "/v1/products/p0/neighbors?category=toys&n=0",
        ],
    )
    def test_bad_parameters_are_400_with_a_json_error(self, api, shop, url):
        reply = api.get(url)

        assert reply.status_code == 400
        assert reply.json()["error"]

    @pytest.mark.parametrize(
        "url",
        [
            "/v1/categories/nope/top",
            "/v1/products/nope/rank?category=toys",
            "/v1/products/p0/rank?category=nope",
            "/v1/products/nope/ranks",
        ],
    )
    def test_unknown_category_or_product_is_404(self, api, shop, url):
        reply = api.get(url)

        assert reply.status_code == 404
        assert "unknown" in reply.json()["error"]

    def test_categories_list_starts_with_all(self, api, shop):
        body = api.get("/v1/categories").json()

        assert body["total"] == 3
        assert [i["slug"] for i in body["items"]] == ["all", "gifts", "toys"]
        assert body["items"][2]["url"].endswith("/v1/categories/toys/top")

    def test_categories_are_listed_a_page_at_a_time(self, api, shop):
        """limit (1-1000, default 100) and offset page through the list; total counts every category."""
        # given 150 more categories, "c000" to "c149", named "C000" to "C149"
        for i in range(150):
            Category.objects.create(slug=f"c{i:03}", name=f"C{i:03}")
        memory.forget_all("categories")
        # when
        first = api.get("/v1/categories").json()
        middle = api.get("/v1/categories?limit=2&offset=1").json()
        last = api.get("/v1/categories?offset=151&limit=1000").json()
        # then
        assert first["total"] == middle["total"] == last["total"] == 153
        assert len(first["items"]) == 100 and first["items"][0]["slug"] == "all"
        assert [i["slug"] for i in middle["items"]] == ["c000", "c001"]
        assert [i["slug"] for i in last["items"]] == ["gifts", "toys"]

    @pytest.mark.parametrize(
        "query",
        ["limit=0", "limit=1001", "limit=x", "offset=-1", "offset=1.5", "offset=99999999999999999999"],
    )
    def test_bad_category_list_parameters_are_400(self, api, shop, query):
        reply = api.get(f"/v1/categories?{query}")

        assert reply.status_code == 400
        assert reply.json()["error"]

    def test_an_unknown_slug_is_looked_up_at_most_once_per_interval(
        self, api, shop, django_assert_max_num_queries, monkeypatch
    ):
        """A flood of one made-up slug must not turn into a flood of queries."""
        # given an interval longer than the test
        monkeypatch.setattr(categories, "CATEGORY_MISS_RELOAD_SECONDS", 60.0, raising=False)
        # when one unknown slug is asked for eighty times
        with django_assert_max_num_queries(1):
            replies = [api.get("/v1/categories/made-up/top").status_code for i in range(40)]
            replies += [api.get("/v1/products/p0/rank?category=made-up").status_code for i in range(40)]
        # then each is a 404, and the category was looked up once
        assert set(replies) == {404}

    def test_categories_are_looked_up_by_slug_not_loaded_whole(self, api, shop):
        """A read names one category: a process holds the names it was asked for, not the table."""
        # given many categories, none read yet
        Category.objects.bulk_create(Category(slug=f"c{i:04}", name=f"C{i:04}") for i in range(2000))
        memory.forget_all("categories")
        # when one of them is read
        with CaptureQueriesContext(connection) as captured:
            assert api.get("/v1/categories/toys/top").status_code == 200
        # then one query read the category table, for that slug, and the process remembers that one name
        read = [q["sql"] for q in captured.captured_queries if "catalogue_category" in q["sql"]]
        assert len(read) == 1 and "slug = ANY" in read[0]
        assert list(categories._category_names) == ["toys"]

    def test_the_names_a_process_remembers_are_bounded(self, shop, monkeypatch):
        # given a process that remembers the bytes of 3 category names (slug, name and bookkeeping)
        bound = 3 * (memory.ENTRY_BYTES + memory.weight("c0") + memory.weight("C0"))
        monkeypatch.setattr(
            categories, "_category_names", memory.WeighedTLRU(maxsize=bound, ttu=lambda *_: float("inf"))
        )
        monkeypatch.setattr(categories, "_category_known", memory.WeighedLRU(maxsize=bound))
        Category.objects.bulk_create(Category(slug=f"c{i}", name=f"C{i}") for i in range(10))
        # when every category is read
        names = selectors.categories_names([f"c{i}" for i in range(10)])
        # then each was found, and only the last three are held
        assert names == {f"c{i}": f"C{i}" for i in range(10)}
        assert sorted(categories._category_names) == ["c7", "c8", "c9"]
        assert len(categories._category_known) == 3

    def test_a_category_created_a_moment_ago_is_found_after_the_interval(self, api, shop, monkeypatch):
        api.get("/v1/categories")
        Category.objects.create(slug="kites", name="Kites")
        monkeypatch.setattr(categories, "CATEGORY_MISS_RELOAD_SECONDS", 0.0)

        assert api.get("/v1/categories/kites/top").status_code == 200

    def test_ranks_of_a_product_in_no_category_is_an_empty_list(self, api, shop):
        Product.objects.create(product_id="loner", name="Loner")

        reply = api.get("/v1/products/loner/ranks")

        assert reply.status_code == 200
        assert reply.json()["ranks"] == []

    @pytest.mark.parametrize(
        "path",
        [
            "/v1/products/p0/rank?category=toys",
            "/v1/categories/toys/top?limit=2",
            "/v1/products/nobody/rank?category=toys",  # 404
            "/v1/categories/toys/top?limit=0",  # 400
            "/v1/categories/nowhere/thresholds",  # 404
        ],
    )
    def test_an_anonymous_read_answers_as_drf_would(self, api, shop, monkeypatch, path):
        fast = api.get(path)
        memory.forget_all("answers")
        monkeypatch.setattr(BoardReadApi, "dispatch", ReadApi.dispatch)
        through_drf = api.get(path)

        assert fast.status_code == through_drf.status_code
        assert fast.content == through_drf.content
        assert {h: fast.get(h) for h in _HEADERS} == {h: through_drf.get(h) for h in _HEADERS}
        assert fast["Allow"] == "GET, HEAD, OPTIONS"


def test_ranks_of_a_product_in_many_categories_are_its_first_by_slug_and_say_there_are_more(api):
    """A product may be filed under thousands of categories: one request reads the first
    PRODUCT_CATEGORIES_READ of them, by slug, and says the product is in more."""
    # given a product filed under one category more than a reply holds, selling in each
    most = selectors.PRODUCT_CATEGORIES_READ
    slugs = sorted(f"w{i:03}" for i in range(most + 1))
    Category.objects.bulk_create([Category(slug=slug, name=slug) for slug in slugs])
    Product.objects.create(product_id="wide", name="Wide").categories.set(Category.objects.all())
    Product.objects.create(product_id="narrow", name="Narrow").categories.set(
        Category.objects.filter(slug__in=slugs[:most])
    )
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    shop.send(*[shop.sale("wide", categories=slugs[i : i + 20]) for i in range(0, most + 1, 20)])
    shop.tick()

    # when
    wide = api.get("/v1/products/wide/ranks").json()
    narrow = api.get("/v1/products/narrow/ranks").json()

    # then
    assert [r["category"] for r in wide["ranks"]] == slugs[:most]
    assert {r["rank"] for r in wide["ranks"]} == {1}
    assert wide["more"] is True
    assert ([r["category"] for r in narrow["ranks"]], narrow["more"]) == (slugs[:most], False)

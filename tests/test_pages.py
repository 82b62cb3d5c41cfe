"""The pages: home, a category's best sellers and a product, from real ticks."""

import datetime as dt
import re
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from catalogue.models import Category, Product
from rankings.serving import answers, memory, selectors
from rankings.serving.charts import bar_chart
from rankings.serving.page_parts import age_text
from rankings.serving.pages import daily_units

from .conftest import built_once_for_the_class
from .rankings_helpers import Shop
from .redis_round_trips import RedisRoundTrips

pytestmark = pytest.mark.django_db(transaction=True)

NOW = dt.datetime(2026, 3, 2, 12, 0, 0, tzinfo=dt.UTC)


def _catalogue(categories: dict[str, str], products: dict[str, tuple[str, int, list[str]]]):
    """Categories (slug -> name) and products (id -> (name, price in cents, category slugs))."""
    made = {slug: Category.objects.create(slug=slug, name=name) for slug, name in categories.items()}
    for product_id, (name, price, slugs) in products.items():
        product = Product.objects.create(product_id=product_id, name=name, price_cents=price)
        product.categories.set([made[s] for s in slugs])


def _small_shop() -> Shop:
    """Toys: Yo-yo 7, Kite 5, Puzzle 5, Robot 1 units; Gifts: Kite alone; ticked just now."""
    _catalogue(
        {"toys": "Toys", "gifts": "Gifts"},
        {
            "p0": ("Kite", 250, ["toys", "gifts"]),
            "p1": ("Yo-yo", 43, ["toys"]),
            "p2": ("Puzzle", 2000, ["toys"]),
            "p3": ("Robot", 250, ["toys"]),
        },
    )
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    shop.send(
        shop.sale("p0", categories=["toys", "gifts"], qty=5, amount="12.50"),
        shop.sale("p1", qty=7, amount="3.01"),
        shop.sale("p2", qty=5, amount="99.99"),
        shop.sale("p3", qty=1),
    )
    shop.tick()
    return shop


def _big_shop() -> Shop:
    """120 toys; toy i sold i + 1 units in one sale, so the board is t119, t118, …, t0."""
    _catalogue(
        {"toys": "Toys"},
        {f"t{i}": (f"Toy number {i}", 100 + i, ["toys"]) for i in range(120)},
    )
    shop = Shop(now=NOW)
    shop.send(*[shop.sale(f"t{i}", qty=i + 1) for i in range(120)])
    shop.tick()
    return shop


@pytest.fixture
def shop():
    return _small_shop()


small_shop_once = built_once_for_the_class(_small_shop)


big_shop_once = built_once_for_the_class(_big_shop)


def _rows(response) -> list[tuple[int, str]]:
    return [(row.item.rank, row.item.product_id) for row in response.context["items"]]


# --- home ------------------------------------------------------------------------


def test_home_costs_two_queries_whatever_the_number_of_categories(client, django_assert_max_num_queries):
    """Fifty categories' leaders: one query for the page of categories, one for their count (read
    again every few seconds), one for every product name, one for the snapshots their rank arrows
    compare with (once an hour)."""
    # given fifty categories with three sellers each
    _catalogue(
        {f"c{i}": f"Category {i}" for i in range(50)},
        {f"x{i}": (f"Thing {i}", 100, [f"c{i % 50}"]) for i in range(150)},
    )
    shop = Shop(now=NOW)
    shop.send(*[shop.sale(f"x{i}", categories=[f"c{i % 50}"], qty=1 + i % 7) for i in range(150)])
    shop.tick()
    # when / then
    with django_assert_max_num_queries(4):
        reply = client.get("/")
    assert reply.status_code == 200
    assert len(reply.context["categories"]) == 50
    assert all(len(c["items"]) == 3 for c in reply.context["categories"])


def _many_categories(count: int, *, sold: bool = True) -> None:
    _catalogue(
        {f"c{i:03}": f"Category {i:03}" for i in range(count)},
        {f"x{i}": (f"Thing {i}", 100, [f"c{i % count:03}"]) for i in range(count * 2)},
    )
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    if sold:
        shop.send(
            *[shop.sale(f"x{i}", categories=[f"c{i % count:03}"], qty=1 + i % 7) for i in range(count * 2)]
        )
    shop.tick()


@pytest.mark.single_redis
def test_home_reads_every_leader_in_one_redis_round_trip(client, monkeypatch):
    """Fifty categories' leaders, and the overall ones, come from one pipelined call to Redis."""
    # given fifty categories with sellers, the active version already known
    _many_categories(50)
    client.get("/")
    memory.forget_all("answers")
    # when the home page is drawn again
    trips = RedisRoundTrips(monkeypatch)
    reply = client.get("/")
    # then
    assert reply.status_code == 200
    assert len(reply.context["categories"]) == 50
    # the leaders, their names from Redis's copy (forgotten with the answers), and the active version
    # should its second have run out
    assert trips.count <= 3


def test_home_shows_a_hundred_categories_a_page(client):
    # given 150 categories
    _many_categories(150)
    # when
    first = client.get("/")
    second = client.get("/?page=2")
    past = client.get("/?page=3")
    # then
    assert [c["slug"] for c in first.context["categories"]][:2] == ["c000", "c001"]
    assert len(first.context["categories"]) == 100
    assert [c["slug"] for c in second.context["categories"]] == [f"c{i:03}" for i in range(100, 150)]
    assert past.status_code == 404
    assert first.context["overall"]["items"] == second.context["overall"]["items"]
    assert 'rel="next"' in first.content.decode() and "Page 2 of 2" in second.content.decode()


# --- a category's best sellers ---------------------------------------------------------


def test_the_page_says_how_long_ago_the_board_was_exact(client, shop):
    """Its own shop, ticked just before the page is read."""
    reply = client.get("/c/toys/")

    assert reply.context["freshness"]["as_of"] == shop.now
    assert re.search(
        r"Updated <time datetime=\"[^\"]+\"[^>]*>(just now|\d+ s ago)</time>", reply.content.decode()
    )


def test_age_reads_in_seconds_minutes_hours_and_days():
    now = NOW
    assert age_text(now, now) == "just now"
    assert age_text(now + dt.timedelta(seconds=4), now) == "just now"  # a clock a little behind
    assert age_text(now - dt.timedelta(seconds=3), now) == "3 s ago"
    assert age_text(now - dt.timedelta(seconds=125), now) == "2 min ago"
    assert age_text(now - dt.timedelta(hours=5, minutes=59), now) == "5 h ago"
    assert age_text(now - dt.timedelta(days=3), now) == "3 d ago"
    assert age_text(None, now) is None


# --- a product ------------------------------------------------------------------------


def test_daily_units_add_up_the_hourly_buckets_of_each_utc_day():
    # given sales of one product over several days, in two categories, one returned in part
    _catalogue({"toys": "Toys", "gifts": "Gifts"}, {"k": ("Kite", 500, ["toys"])})
    shop = Shop(now=NOW)  # 2 March, 12:00 UTC
    shop.send(
        shop.sale("k", categories=["toys", "gifts"], qty=3),  # 2 Mar: counted once, not per category
        shop.sale("k", qty=2, ago=dt.timedelta(hours=11, minutes=59)),  # 2 Mar 00:01
        shop.sale("k", qty=4, ago=dt.timedelta(hours=12, minutes=1)),  # 1 Mar 23:59
        shop.sale("k", qty=6, ago=dt.timedelta(days=5), event_id="old"),  # 25 Feb
        shop.sale("k", qty=9, ago=dt.timedelta(days=29, hours=12)),  # 1 Feb 00:00, the first day shown
        shop.sale("k", qty=8, ago=dt.timedelta(days=29, hours=12, seconds=1)),  # 31 Jan: too early
    )
    shop.send(shop.sale("k", qty=-1, returnOf="old"))
    shop.tick()
    # when
    daily = daily_units("k", days=30, until=NOW)
    # then
    days = {start.date(): units for start, units in daily.periods}
    assert len(days) == 30
    assert min(days) == dt.date(2026, 2, 1) and max(days) == dt.date(2026, 3, 2)
    assert days[dt.date(2026, 3, 2)] == 5
    assert days[dt.date(2026, 3, 1)] == 4
    assert days[dt.date(2026, 2, 25)] == 5
    assert days[dt.date(2026, 2, 1)] == 9
    assert sum(days.values()) == 23


def test_the_chart_is_inline_svg_with_its_numbers_for_screen_readers(client):
    _catalogue({"toys": "Toys"}, {"k": ("Kite", 500, ["toys"])})
    shop = Shop(now=NOW)
    shop.send(shop.sale("k", qty=3), shop.sale("k", qty=12, ago=dt.timedelta(days=2)))
    shop.tick()

    reply = client.get("/p/k/?window=30d")

    html = reply.content.decode()
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert 'role="img"' in svg and 'aria-labelledby="chart-svg-title chart-svg-desc"' in svg
    assert '<title id="chart-svg-title">Units sold per day, 1 Feb to 2 Mar 2026</title>' in svg
    assert "15 units in 30 days; the best day was 28 Feb with 12." in svg
    assert svg.count("<rect") == 30
    assert "<title>Sat 28 Feb: 12 units</title>" in svg
    assert '<time datetime="2026-03-02">Mon 2 Mar 2026</time></th><td class="num">3</td>' in html
    assert "<script" not in html  # drawn on the server, no chart library


def test_chart_bars_scale_to_the_best_day():
    days = [(dt.date(2026, 3, d), u) for d, u in ((1, 0), (2, 5), (3, 10))]

    drawn = bar_chart(days, width=300, height=100)

    assert [b.height for b in drawn.bars] == ["0", "46", "92"]
    assert drawn.peak == 10 and drawn.total == 15 and drawn.best.units == 10
    assert bar_chart([(dt.date(2026, 3, 1), 0)], width=300, height=100).bars[0].height == "0"


def test_product_page_queries_do_not_grow_with_its_categories(client):
    # given a product in one category and one in eight, both selling everywhere they belong
    slugs = [f"c{i}" for i in range(8)]
    _catalogue(
        {s: s.upper() for s in slugs},
        {"one": ("One", 100, ["c0"]), "many": ("Many", 100, slugs), "other": ("Other", 100, ["c0"])},
    )
    shop = Shop(now=NOW)
    shop.send(
        shop.sale("one", categories=["c0"], qty=2),
        shop.sale("many", categories=slugs, qty=3),
        shop.sale("other", categories=["c0"], qty=1),
    )
    shop.tick()
    client.get("/")  # the category names, read once for a few seconds
    selectors.categories_tree()  # the tree that counts, read once per version
    client.get("/p/other/")  # the hours snapshotted, read once per hour

    counts = {}
    for product_id in ("one", "many"):
        with CaptureQueriesContext(connection) as queries:
            reply = client.get(f"/p/{product_id}/")
        assert reply.status_code == 200
        counts[product_id] = len(queries)
    # then
    assert len(client.get("/p/many/").context["badges"]) == 9
    assert counts["one"] == counts["many"] <= 7


def test_a_product_page_shows_its_first_categories_and_says_there_are_more(client):
    """Its ranks, their climbs and the views' and wishes' badges are read for the first
    PRODUCT_CATEGORIES_READ categories (with their ancestors), whatever the product's count."""
    most = selectors.PRODUCT_CATEGORIES_READ
    slugs = [f"w{i:03}" for i in range(most + 5)]
    _catalogue({s: s.upper() for s in slugs}, {"wide": ("Wide", 100, slugs)})
    shop = Shop(now=NOW)
    shop.send(*[shop.sale("wide", categories=slugs[i : i + 20]) for i in range(0, len(slugs), 20)])
    shop.tick()

    reply = client.get("/p/wide/")

    assert reply.status_code == 200
    assert [b["category"] for b in reply.context["badges"]] == ["all", *slugs[:most]]
    assert f"Filed under more than {most} categories" in reply.content.decode()


# --- when Redis is away ----------------------------------------------------------------


def test_with_redis_stopped_pages_show_the_last_known_rankings_with_a_note(client, own_redis):
    # given pages read once while Redis was up
    _catalogue({"toys": "Toys"}, {"p1": ("Yo-yo", 100, ["toys"]), "p2": ("Kite", 100, ["toys"])})
    shop = Shop(now=NOW)
    shop.send(shop.sale("p1", qty=2), shop.sale("p2", qty=1))
    shop.tick()
    urls = ["/", "/c/toys/", "/p/p2/"]
    for url in urls:
        fresh = client.get(url)
        assert fresh.status_code == 200 and "may be out of date" not in fresh.content.decode()
    # when Redis stops
    own_redis.kill()
    own_redis.wait()
    time.sleep(answers.FRESH_SECONDS + 0.2)
    # then each page serves what it last knew, saying so, with the instant it was exact
    for url in urls:
        reply = client.get(url)
        html = reply.content.decode()
        assert reply.status_code == 200, url
        assert reply.context["freshness"]["stale"] is True
        assert "These rankings may be out of date</strong> (as of" in html, url
        assert "2 Mar 2026, 12:00:00 UTC" in html
    assert _rows(client.get("/c/toys/")) == [(1, "p1"), (2, "p2")]


def test_with_redis_stopped_and_nothing_known_pages_answer_503(client, own_redis):
    _catalogue({"toys": "Toys"}, {"p1": ("Yo-yo", 100, ["toys"])})
    Shop(now=NOW).tick()
    own_redis.kill()
    own_redis.wait()

    for url in ("/", "/c/toys/", "/p/p1/"):
        reply = client.get(url)
        assert reply.status_code == 503, url
        assert reply["Retry-After"] == "5"
        assert "Rankings are unavailable for a moment" in reply.content.decode()


# --- pages of one shop, built once for the tests that read it ------------------------------


@pytest.mark.django_db
class TestPagesOfOneSmallShop:
    """Pages read from the small shop, built once for the class: each test finds the database and
    Redis as the build left them, whatever the previous test wrote."""

    @pytest.fixture
    def shop(self, small_shop_once):
        return small_shop_once.restored()

    def test_home_shows_the_overall_top_ten_and_each_categorys_first_three(self, client, shop):
        reply = client.get("/")

        assert reply.status_code == 200
        overall = reply.context["overall"]
        assert [r.item.product_id for r in overall["items"]] == ["p1", "p0", "p2", "p3"]
        categories = {c["slug"]: c for c in reply.context["categories"]}
        assert [c["name"] for c in reply.context["categories"]] == ["Gifts", "Toys"]
        assert [r.item.product_id for r in categories["toys"]["items"]] == ["p1", "p0", "p2"]
        assert [r.item.product_id for r in categories["gifts"]["items"]] == ["p0"]
        html = reply.content.decode()
        assert '<a href="/c/toys/">Toys</a>' in html
        assert '<a href="/p/p1/">Yo-yo</a>' in html

    def test_boards_top_many_answers_like_board_top(self, shop):
        many = selectors.boards_top_many(limits={"toys": 2, "gifts": 3}, window="7d", metric="revenue")
        memory.forget_all("answers")

        for category, limit in (("toys", 2), ("gifts", 3)):
            one = selectors.board_top(category=category, window="7d", metric="revenue", limit=limit, offset=0)
            assert many[category] == one

    def test_boards_top_many_refuses_an_unknown_category(self, shop):
        with pytest.raises(selectors.NotFound):
            selectors.boards_top_many(limits={"nope": 3}, window="7d", metric="units")

    def test_pages_carry_cache_control_and_an_etag_and_answer_304(self, client, shop, monkeypatch):
        # one instant for both requests: the page says how long ago its board was exact, to the second
        instant = timezone.now()
        monkeypatch.setattr(timezone, "now", lambda: instant)
        first = client.get("/c/toys/")

        assert "max-age=2" in first["Cache-Control"]
        again = client.get("/c/toys/", HTTP_IF_NONE_MATCH=first["ETag"])
        assert again.status_code == 304

    def test_category_lists_rank_name_units_and_revenue_in_rank_order(self, client, shop):
        reply = client.get("/c/toys/")

        assert reply.status_code == 200
        assert [
            (r.item.rank, r.item.name, r.item.units, str(r.item.revenue)) for r in reply.context["items"]
        ] == [
            (1, "Yo-yo", 7, "3.01"),
            (2, "Kite", 5, "12.50"),
            (3, "Puzzle", 5, "99.99"),
            (4, "Robot", 1, "2.50"),
        ]
        html = reply.content.decode()
        assert '<th scope="col" class="num">Revenue</th>' in html
        assert '<a href="/p/p2/">Puzzle</a>' in html
        assert "99.99" in html

    def test_window_and_metric_switch_by_plain_links_marking_the_current_one(self, client, shop):
        reply = client.get("/c/toys/?window=30d&metric=revenue")

        assert [(r.item.rank, r.item.product_id) for r in reply.context["items"]][:2] == [
            (1, "p2"),
            (2, "p0"),
        ]
        html = reply.content.decode()
        assert '<a href="/c/toys/?window=30d" aria-current="page">' not in html
        assert '<a href="/c/toys/?window=30d&amp;metric=revenue" aria-current="page">30 days</a>' in html
        assert '<a href="/c/toys/?metric=revenue">7 days</a>' in html
        assert '<a href="/c/toys/?window=30d">Units sold</a>' in html
        assert '<nav aria-label="Time window">' in html and '<nav aria-label="Rank by">' in html

    @pytest.mark.parametrize(
        "query",
        [
            "window=2d",
            "window=",
            "metric=likes",
            "page=0",
            "page=-1",
            "page=abc",
            "page=1.5",
            "page=%D9%A3",  # an Arabic-Indic digit: int() would take it, the page does not
            "page=",
        ],
    )
    def test_a_bad_window_metric_or_page_is_a_400_page(self, client, shop, query):
        reply = client.get(f"/c/toys/?{query}")

        assert reply.status_code == 400
        assert "<h1>This page cannot show that</h1>" in reply.content.decode()

    @pytest.mark.parametrize(
        "url", ["/c/nope/", "/c/toys/?page=2", "/c/toys/?page=99999999999999999999999", "/p/nope/", "/x/"]
    )
    def test_an_unknown_category_product_or_page_past_the_end_is_a_404_page(self, client, shop, url):
        reply = client.get(url)

        assert reply.status_code == 404
        assert "<h1>Not found</h1>" in reply.content.decode()

    @pytest.mark.parametrize(
        "url",
        [
            "/c/toys/?highlight=%3Cscript%3Ealert(1)%3C/script%3E",
            "/c/toys/?page=1&page=2",
            "/c/toys/?window=7d&window=x",
            "/c/all/?metric=revenue&window=1h",
            "/p/p0/?window=1h&metric=revenue",
            "/p/a%00b/",
            "/p/" + "x" * 300 + "/",
            "/c/toys/?window=" + "x" * 5000,
        ],
    )
    def test_odd_input_never_gives_a_server_error(self, client, shop, url):
        reply = client.get(url)

        assert reply.status_code in (200, 400, 404)
        assert b"<script>alert" not in reply.content

    def test_an_empty_board_is_a_page_saying_so_not_an_error(self, client, shop):
        reply = client.get("/c/gifts/?window=1h")  # the sales are in the current minute: gifts has Kite

        assert reply.status_code == 200
        empty = client.get("/c/toys/?window=1h&page=1")
        assert empty.status_code == 200
        Category.objects.create(slug="garden", name="Garden")
        memory.forget_all("categories")
        garden = client.get("/c/garden/")
        assert garden.status_code == 200
        assert "No sales in this window." in garden.content.decode()

    def test_product_shows_name_price_and_a_badge_per_category(self, client, shop):
        reply = client.get("/p/p0/")

        assert reply.status_code == 200
        html = reply.content.decode()
        assert "<h1>Kite</h1>" in html
        assert "Price <strong>2.50</strong>" in html
        badges = {b["category"]: b for b in reply.context["badges"]}
        assert set(badges) == {"all", "toys", "gifts"}
        assert (badges["toys"]["rank"], badges["gifts"]["rank"], badges["all"]["rank"]) == (2, 1, 2)
        assert (
            '<a class="badge" href="/c/toys/?page=1&amp;highlight=p0#product-p0"><strong>#2</strong> in Toys</a>'
            in html
        )
        assert "<strong>#1</strong> in Gifts" in html

    def test_a_badge_keeps_the_window_and_metric(self, client, shop):
        reply = client.get("/p/p2/?window=30d&metric=revenue")

        badge = next(b for b in reply.context["badges"] if b["category"] == "toys")
        assert badge["rank"] == 1
        assert badge["url"] == "/c/toys/?window=30d&metric=revenue&page=1&highlight=p2#product-p2"

    def test_a_product_without_sales_in_the_window_is_unranked_not_an_error(self, client, shop):
        Product.objects.create(product_id="p9", name="Dusty", price_cents=100).categories.set(
            Category.objects.filter(slug="toys")
        )

        reply = client.get("/p/p9/")

        assert reply.status_code == 200
        assert reply.context["badges"] == [] and reply.context["nearby"] is None
        assert "Not ranked anywhere in this window" in reply.content.decode()

    def test_a_product_in_no_category_has_a_page(self, client, shop):
        Product.objects.create(product_id="loner", name="Loner", price_cents=100)

        reply = client.get("/p/loner/")

        assert reply.status_code == 200
        assert "Loner" in reply.content.decode()


@pytest.mark.django_db
class TestPagesOfOneBigShop:
    """Pages read from the big shop, built once for the class: each test finds the database and
    Redis as the build left them."""

    @pytest.fixture
    def big_shop(self, big_shop_once):
        return big_shop_once.restored()

    def test_pages_of_fifty_with_previous_and_next(self, client, big_shop):
        first = client.get("/c/toys/")
        second = client.get("/c/toys/?page=2")
        third = client.get("/c/toys/?page=3")

        assert _rows(first)[0] == (1, "t119") and _rows(first)[-1] == (50, "t70")
        assert _rows(second)[0] == (51, "t69") and _rows(second)[-1] == (100, "t20")
        assert _rows(third) == [(101 + i, f"t{19 - i}") for i in range(20)]
        assert first.context["pages"]["previous"] is None
        assert first.context["pages"]["next"] == "/c/toys/?page=2"
        assert second.context["pages"]["previous"] == "/c/toys/"
        assert second.context["pages"]["next"] == "/c/toys/?page=3"
        assert third.context["pages"]["next"] is None
        html = second.content.decode()
        assert 'rel="next"' in html and 'rel="prev"' in html and "Page 2 of 3" in html

    def test_highlight_marks_the_row_of_the_product(self, client, big_shop):
        reply = client.get("/c/toys/?page=2&highlight=t60")

        html = reply.content.decode()
        assert '<tr id="product-t60" class="highlight" aria-current="true">' in html
        assert html.count('class="highlight"') == 1

    def test_a_category_page_costs_at_most_five_queries(
        self, client, big_shop, django_assert_max_num_queries
    ):
        """Names of the category and of its products, the snapshot its rank arrows compare with, the
        tree that counts (once per version) and the first categories under it (one index walk)."""
        with django_assert_max_num_queries(5):
            reply = client.get("/c/toys/?page=2&highlight=t60")
        assert len(reply.context["items"]) == 50

    def test_a_badge_links_to_the_page_holding_the_rank_with_the_row_highlighted(self, client, big_shop):
        """t59 is #61 of 120 in toys: page 2 of the best sellers, its row marked."""
        product = client.get("/p/t59/")
        badge = next(b for b in product.context["badges"] if b["category"] == "toys")
        assert badge["rank"] == 61
        assert badge["url"] == "/c/toys/?page=2&highlight=t59#product-t59"

        board = client.get(badge["url"].split("#")[0])
        highlighted = [r for r in board.context["items"] if r.highlighted]
        assert [(r.item.rank, r.item.product_id) for r in highlighted] == [(61, "t59")]

    def test_a_deep_rank_also_reads_as_a_share_of_the_board(self, client, big_shop):
        """Rank 12 of 120 is "top 10%"; a top-ten rank needs no share; past half a share says nothing."""
        deep = client.get("/p/t108/")  # rank 12
        shallow = client.get("/p/t115/")  # rank 5
        low = client.get("/p/t10/")  # rank 110

        assert [b["top"] for b in deep.context["badges"]] == ["10%", "10%"]
        assert "top 10% · of 120" in deep.content.decode()
        assert [b["top"] for b in shallow.context["badges"]] == [None, None]
        assert [b["top"] for b in low.context["badges"]] == [None, None]

    def test_product_shows_the_products_just_above_and_below(self, client, big_shop):
        reply = client.get("/p/t59/")

        nearby = reply.context["nearby"]
        assert nearby["name"] == "Toys"
        assert [(r.item.rank, r.item.product_id, r.highlighted) for r in nearby["items"]] == [
            (59, "t61", False),
            (60, "t60", False),
            (61, "t59", True),
            (62, "t58", False),
            (63, "t57", False),
        ]
        html = reply.content.decode()
        assert '<a href="/p/t60/">Toy number 60</a>' in html
        assert 'aria-current="page"' in html

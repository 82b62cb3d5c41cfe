"""seed_demo: a catalogue and synthetic sales of the demo's shape (hot category, skew, returns), small."""

import datetime as dt
from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command
from django.db.models import Q

from catalogue.models import Category, Product
from rankings.models import Sale
from rankings.operations.demo import DemoShape, demo_catalogue, demo_events, demo_seed
from tests.conftest import built_once, utc

pytestmark = pytest.mark.django_db

NOW = utc(2026, 10, 11, 10, 0)
SMALL = DemoShape(sales=6000, days=14, categories=10, products=500)


def _seed():
    return demo_seed(shape=SMALL, seed=7, now=NOW)


@pytest.fixture(scope="class")
def seeded(django_db_setup, django_db_blocker, redis_client):
    """The demo seeded once for the class, rolled back after its last test (see built_once)."""
    with built_once(_seed, django_db_blocker, redis_client) as once:
        yield once.result


class TestTheSeededDemo:
    def test_the_catalogue_has_the_requested_categories_and_products(self, seeded):
        assert sorted(Category.objects.values_list("slug", flat=True)) == sorted(f"cat{i}" for i in range(10))
        assert Category.objects.get(slug="cat0").name == "Toys & Games"
        assert Product.objects.count() == 500
        assert not Category.objects.filter(is_placeholder=True).exists()
        assert not Product.objects.filter(Q(is_placeholder=True) | Q(price_cents__lte=0)).exists()
        p0 = Product.objects.get(product_id="p0")
        assert p0.name.endswith(" 0")
        assert sorted(p0.categories.values_list("slug", flat=True))[0] == "cat0"

    def test_every_sale_is_stored_with_about_one_in_a_hundred_returned(self, seeded):
        assert seeded.result.rejected == []
        assert Sale.objects.filter(qty__gt=0).count() == 6000
        assert 20 <= Sale.objects.filter(qty__lt=0).count() <= 110
        assert seeded.result.accepted == Sale.objects.count()

    def test_about_forty_percent_of_sales_are_in_the_hot_category(self, seeded):
        sales = Sale.objects.filter(qty__gt=0)

        share = sales.filter(categories__contains=["cat0"]).count() / sales.count()

        assert share == pytest.approx(0.40, abs=0.03)

    def test_about_twenty_percent_of_sales_are_in_two_categories(self, seeded):
        sales = Sale.objects.filter(qty__gt=0)

        share = sales.filter(categories__len=2).count() / sales.count()

        assert share == pytest.approx(0.20, abs=0.03)

    def test_popularity_is_skewed_within_a_category(self, seeded):
        """A few products sell a lot, most sell little: the favourite outsells the median product by far."""
        units = Counter()
        for product_id, qty in Sale.objects.filter(qty__gt=0, categories__0="cat0").values_list(
            "product_id", "qty"
        ):
            units[product_id] += qty

        ranked = [u for _, u in units.most_common()]
        assert units.most_common(1)[0][0] == "p0"
        assert ranked[0] > 10 * ranked[len(ranked) // 2]

    def test_sales_span_the_requested_days_and_none_is_in_the_future(self, seeded):
        first, last = Sale.objects.order_by("ts").first().ts, Sale.objects.order_by("ts").last().ts

        assert first >= utc(2026, 9, 27, 10, 0)
        assert last <= NOW
        assert (last - first).days >= 13

    def test_sales_count_in_their_products_catalogue_categories(self, seeded):
        catalogue = {
            p.product_id: {c.slug for c in p.categories.all()}
            for p in Product.objects.prefetch_related("categories")
        }

        for product_id, categories in Sale.objects.values_list("product_id", "categories"):
            assert set(categories) <= catalogue[product_id]

    def test_seeding_again_with_the_same_seed_and_now_adds_nothing(self, seeded):
        count = Sale.objects.count()

        again = demo_seed(shape=SMALL, seed=7, now=NOW)

        assert (again.result.accepted, again.result.duplicates) == (0, count)
        assert Sale.objects.count() == count


def test_the_same_seed_and_now_give_the_same_events():
    catalogue = demo_catalogue(shape=SMALL, seed=3)

    first = list(demo_events(shape=SMALL, seed=3, now=NOW, catalogue=catalogue))
    again = list(demo_events(shape=SMALL, seed=3, now=NOW, catalogue=demo_catalogue(shape=SMALL, seed=3)))
    other = list(demo_events(shape=SMALL, seed=4, now=NOW, catalogue=catalogue))

    assert first == again
    assert first != other


def test_the_command_scales_the_demo_and_prints_a_summary():
    out = StringIO()

    call_command(
        "seed_demo",
        "--sales=300",
        "--categories=3",
        "--products=30",
        "--days=2",
        "--seed=1",
        "--no-progress",
        stdout=out,
    )

    assert Category.objects.count() == 3
    assert Product.objects.count() == 30
    assert Sale.objects.filter(qty__gt=0).count() == 300
    assert out.getvalue().startswith("catalogue: 3 categories, 30 products; ")


def test_a_now_ahead_of_the_clock_does_not_store_sales_in_the_future():
    """The demo's sales are validated like any others: the server clock bounds them, not --now."""
    ahead = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)

    report = demo_seed(shape=DemoShape(sales=400, days=2, categories=3, products=30), seed=2, now=ahead)

    assert report.result.rejected
    assert {r["error"] for r in report.result.rejected} == {"ts is more than 5 minutes in the future"}
    assert not Sale.objects.filter(ts__gt=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)).exists()

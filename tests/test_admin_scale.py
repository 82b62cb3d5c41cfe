"""The admin at scale: every list and change page reads a bounded number of rows and renders a page
of bounded size, however many categories, products and sales there are (no whole-table select,
no full count, no per-page load of the catalogue)."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from catalogue.admin_lists import CappedCountPaginator
from catalogue.models import Category, Product
from rankings.engine.partitions import sale_partitions_ensure

pytestmark = pytest.mark.django_db

CATEGORIES = 30_000
PRODUCTS = 12_000
SALES = 12_000
CAP = 1_000  # the lists' count cap in these tests: far below the tables, to show it is what bounds them
PAGE_BYTES = 200_000
STATEMENTS = 15


@pytest.fixture
def big_shop(monkeypatch):
    """30,000 categories (1 in 10 under another), 12,000 products each in a category, 12,000 sales,
    all by a few statements; analysed, as autovacuum would have done."""
    monkeypatch.setattr(CappedCountPaginator, "cap", CAP)
    ts = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
    sale_partitions_ensure([ts])
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO catalogue_category (slug, name, is_placeholder, has_sales)"
            " SELECT 'c-' || i, 'Category ' || i, false, false FROM generate_series(1, %s) AS i",
            [CATEGORIES],
        )
        cursor.execute(
            "UPDATE catalogue_category c SET parent_id = p.id FROM catalogue_category p"
            " WHERE c.slug LIKE 'c-%%0' AND p.slug = 'c-' || (substr(c.slug, 3)::int %% 10 + 1)",
            [],
        )
        cursor.execute(
            "INSERT INTO catalogue_product (product_id, name, price_cents, is_placeholder)"
            " SELECT 'p-' || i, 'Product ' || i, 100, false FROM generate_series(1, %s) AS i",
            [PRODUCTS],
        )
        cursor.execute(
            "INSERT INTO catalogue_product_categories (product_id, category_id)"
            " SELECT p.id, c.id FROM catalogue_product p JOIN catalogue_category c"
            " ON c.slug = 'c-' || (substr(p.product_id, 3)::int %% 50 + 1)",
            [],
        )
        cursor.execute(
            "INSERT INTO rankings_sale (event_id, ts, product_id, categories, qty, amount_cents,"
            " counted_at, received_at, digest)"
            " SELECT 's-' || i, %s + i * interval '1 second', 'p-' || (i %% 100 + 1), ARRAY['c-1'], 1, 100,"
            " %s + i * interval '1 second', %s, 'x' FROM generate_series(1, %s) AS i",
            [ts, ts, ts, SALES],
        )
        cursor.execute("ANALYZE")
    return {
        "category": Category.objects.get(slug="c-20"),
        "product": Product.objects.get(product_id="p-7"),
    }


def _rows_read() -> int:
    """Rows this transaction has read from every table so far."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)"
            " FROM pg_stat_xact_user_tables"
        )
        return cursor.fetchone()[0]


def _measured(client, url, data=None, post=False):
    before = _rows_read()
    with CaptureQueriesContext(connection) as queries:
        reply = client.post(url, data) if post else client.get(url, data)
    return reply, _rows_read() - before, len(queries)


def _assert_bounded(reply, rows, statements, *, rows_at_most):
    assert reply.status_code in (200, 302), reply.status_code
    assert len(reply.content) < PAGE_BYTES, len(reply.content)
    assert rows <= rows_at_most, rows
    assert statements <= STATEMENTS, statements


@pytest.mark.parametrize(
    "page",
    [
        "admin:catalogue_category_changelist",
        "admin:catalogue_product_changelist",
        "admin:rankings_sale_changelist",
    ],
)
def test_a_list_counts_no_further_than_its_cap_and_says_so(admin_client, big_shop, page):
    reply, rows, statements = _measured(admin_client, reverse(page))
    _assert_bounded(reply, rows, statements, rows_at_most=CAP + 1_500)
    assert f"more than {CAP:,}" in reply.content.decode()


def test_a_page_past_the_cap_does_not_exist(admin_client, big_shop):
    reply = admin_client.get(reverse("admin:catalogue_product_changelist"), {"p": 10_000})
    assert reply.status_code == 302  # Django's answer to a page out of range: the list, with ?e=1


@pytest.mark.parametrize("kind", ["category", "product"])
def test_a_change_page_offers_a_search_not_every_category(admin_client, big_shop, kind):
    url = reverse(f"admin:catalogue_{kind}_change", args=[big_shop[kind].pk])
    reply, rows, statements = _measured(admin_client, url)
    _assert_bounded(reply, rows, statements, rows_at_most=500)
    assert "admin-autocomplete" in reply.content.decode()


def test_choosing_a_parent_reads_the_ancestors_not_the_catalogue(admin_client, big_shop):
    parent = Category.objects.get(slug="c-30")  # under c-1
    reply, rows, statements = _measured(
        admin_client,
        reverse("admin:catalogue_category_add"),
        {"slug": "new-one", "name": "New one", "parent": parent.pk},
        post=True,
    )
    _assert_bounded(reply, rows, statements, rows_at_most=500)
    assert Category.objects.get(slug="new-one").parent == parent


def test_the_autocomplete_answers_a_page_of_categories(admin_client, big_shop):
    url = reverse("admin:autocomplete")
    params = {"app_label": "catalogue", "model_name": "product", "field_name": "categories", "term": ""}
    reply, rows, statements = _measured(admin_client, url, params)
    _assert_bounded(reply, rows, statements, rows_at_most=CAP + 1_500)
    assert len(reply.json()["results"]) == 20 and reply.json()["pagination"]["more"]


def test_the_product_list_filters_by_category_given_in_the_url(admin_client, big_shop):
    reply = admin_client.get(reverse("admin:catalogue_product_changelist"), {"category": "c-2"})
    found = {p.product_id for p in reply.context["cl"].result_list}
    assert found and all(int(pid[2:]) % 50 + 1 == 2 for pid in found)


def test_the_versions_list_shows_tree_sizes_without_loading_the_trees(admin_client):
    """A version's tree names every category with a parent (tens of MB at a million): the list of
    versions counts its entries in the database and never fetches one."""
    from rankings.models import RankingVersion

    tree = {f"c-{i}": "c-0" for i in range(1, 5_001)}
    for number, state in ((1, "retired"), (2, "active")):
        RankingVersion.objects.create(number=number, state=state, shards=1, tree=tree)
    with CaptureQueriesContext(connection) as queries:
        reply = admin_client.get(reverse("admin:rankings_rankingversion_changelist"))
    listed = [q["sql"] for q in queries if '"rankings_rankingversion"."state"' in q["sql"]]
    assert listed and not any('"rankings_rankingversion"."tree"' in sql for sql in listed), listed
    assert "5000 under a parent" in reply.content.decode()


def test_the_versions_page_lists_the_first_pending_moves_and_counts_the_rest(admin_client):
    """An import that moves thousands of categories leaves a versions page of bounded size."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO catalogue_category (slug, name, is_placeholder, has_sales)"
            " SELECT 'c-' || i, 'Category ' || i, false, false FROM generate_series(0, 2000) AS i"
        )
        cursor.execute(
            "UPDATE catalogue_category SET parent_id = (SELECT id FROM catalogue_category WHERE slug = 'c-0')"
            " WHERE slug <> 'c-0'"
        )
    reply = admin_client.get(reverse("admin:rankings_rankingversion_changelist"))
    page = reply.content.decode()
    assert "… and 1900 more" in page
    assert len(reply.content) < PAGE_BYTES, len(reply.content)

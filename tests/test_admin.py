"""The admin: the catalogue is editable, raw sales are read-only for everyone."""

import pytest
from django.db import connection
from django.urls import reverse

from catalogue.models import Category, Product
from rankings.ingest.sales import sales_ingest
from rankings.models import Sale, SaleId

pytestmark = pytest.mark.django_db


@pytest.fixture
def sales():
    """Two sales of a catalogue product and a return, plus a sale of an unknown product."""
    toys = Category.objects.create(slug="toys", name="Toys")
    Product.objects.create(product_id="p1", name="Kite", price_cents=1250).categories.add(toys)
    events = [
        {"id": "ord-1-line-1", "ts": "2026-03-02T10:00:00Z", "productId": "p1", "qty": 2},
        {"id": "ord-2-line-1", "ts": "2026-03-03T10:00:00Z", "productId": "p1", "qty": 1, "amount": "9.00"},
        {"id": "ord-3-line-1", "ts": "2026-03-04T10:00:00Z", "productId": "p1", "qty": -1, "returnOf": "ord-1-line-1"},
        {"id": "ord-4-line-1", "ts": "2026-03-04T11:00:00Z", "productId": "mystery", "categories": ["new-cat"], "qty": 1},
    ]  # fmt: skip
    result = sales_ingest(events=events, source="test")
    assert result.accepted == 4
    return {sale.event_id: sale for sale in Sale.objects.all()}


def sale_url(view, *args):
    return reverse(f"admin:rankings_sale_{view}", args=args)


# --- sales: read-only ------------------------------------------------------------------------


def test_the_sale_list_renders_with_products_and_amounts(admin_client, sales):
    reply = admin_client.get(sale_url("changelist"))

    assert reply.status_code == 200
    page = reply.content.decode()
    for event_id in sales:
        assert event_id in page
    assert "Kite" in page
    assert "-12.50" in page  # the refund of a return, shown as money going back


def test_the_sale_list_does_not_query_per_row(admin_client, sales, django_assert_max_num_queries):
    with django_assert_max_num_queries(12):
        admin_client.get(sale_url("changelist"))


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("ord-2-line-1", {"ord-2-line-1"}),
        ("ord-", {"ord-1-line-1", "ord-2-line-1", "ord-3-line-1", "ord-4-line-1"}),
        ("mystery", {"ord-4-line-1"}),
        ("p1", {"ord-1-line-1", "ord-2-line-1", "ord-3-line-1"}),
        ("nothing", set()),
    ],
)
def test_sales_are_found_by_event_id_and_product_id(admin_client, sales, query, found):
    reply = admin_client.get(sale_url("changelist"), {"q": query})

    assert {sale.event_id for sale in reply.context["cl"].result_list} == found


def test_sales_are_filtered_by_the_day_they_count_in(admin_client, sales):
    """A return counts in its original's day: it is listed there, not on the day it was sent."""
    day = {"counted_at__year": 2026, "counted_at__month": 3}
    on_the_3rd = admin_client.get(sale_url("changelist"), {**day, "counted_at__day": 3})
    on_the_2nd = admin_client.get(sale_url("changelist"), {**day, "counted_at__day": 2})

    assert [sale.event_id for sale in on_the_3rd.context["cl"].result_list] == ["ord-2-line-1"]
    assert {sale.event_id for sale in on_the_2nd.context["cl"].result_list} == {
        "ord-1-line-1",
        "ord-3-line-1",
    }


def test_the_sale_list_is_newest_first_by_the_instant_each_sale_counts_in(admin_client, sales):
    reply = admin_client.get(sale_url("changelist"))

    listed = [sale.event_id for sale in reply.context["cl"].result_list]
    assert listed == ["ord-4-line-1", "ord-2-line-1", "ord-3-line-1", "ord-1-line-1"]


def _plan(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_a_search_by_an_event_ids_beginning_reads_the_ids_primary_key(sales):
    """The ids' table keeps one index, its key, for every lookup: by id, and by an id's beginning."""
    plan = _plan(SaleId.objects.filter(event_id__startswith="ord-").values("sale_id"))

    assert f"{SaleId._meta.db_table}_pkey" in plan
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass", [SaleId._meta.db_table])
        assert cursor.fetchone()[0] == 1


def test_the_sale_lists_order_and_day_filter_read_an_index_ingest_keeps_anyway(sales):
    """The sales table is indexed by the instant a sale counts in (the rebuild's windows need it), not
    also by its ts: each index costs every sale ingested."""
    plan = _plan(Sale.objects.filter(counted_at__date="2026-03-02").order_by("-counted_at", "-id")[:100])

    assert "counted_at" in plan and "Seq Scan" not in plan
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass"
            " AND %s = ANY (SELECT attname FROM pg_attribute WHERE attrelid = indrelid AND attnum = ANY (indkey))",
            [Sale._meta.db_table, "ts"],
        )
        assert cursor.fetchone()[0] == 0


def test_returns_can_be_listed_apart(admin_client, sales):
    reply = admin_client.get(sale_url("changelist"), {"kind": "return"})

    assert [sale.event_id for sale in reply.context["cl"].result_list] == ["ord-3-line-1"]


def test_a_sale_can_be_viewed_but_its_page_has_no_save_button(admin_client, sales):
    reply = admin_client.get(sale_url("change", sales["ord-1-line-1"].pk))

    assert reply.status_code == 200
    page = reply.content.decode()
    assert "ord-1-line-1" in page
    assert 'name="_save"' not in page
    assert "Delete" not in page


def test_a_sale_cannot_be_changed_even_by_a_superuser(admin_client, sales):
    # given
    sale = sales["ord-2-line-1"]

    # when the change form is posted anyway
    reply = admin_client.post(
        sale_url("change", sale.pk),
        {"event_id": "ord-2-line-1", "qty": 50, "amount_cents": 1, "product": "p1", "_save": "Save"},
    )

    # then
    assert reply.status_code == 403
    sale.refresh_from_db()
    assert (sale.qty, sale.amount_cents) == (1, 900)


def test_a_sale_cannot_be_deleted_even_by_a_superuser(admin_client, sales):
    sale = sales["ord-2-line-1"]

    page = admin_client.get(sale_url("delete", sale.pk))
    confirmed = admin_client.post(sale_url("delete", sale.pk), {"post": "yes"})

    assert (page.status_code, confirmed.status_code) == (403, 403)
    assert Sale.objects.filter(pk=sale.pk).exists()


def test_sales_cannot_be_deleted_in_bulk(admin_client, sales):
    # when the list's delete action is posted for every sale
    reply = admin_client.post(
        sale_url("changelist"),
        {"action": "delete_selected", "_selected_action": [s.pk for s in sales.values()], "post": "yes"},
    )

    # then there is no such action and nothing is deleted
    assert reply.status_code in (200, 302)
    assert Sale.objects.count() == 4


def test_a_sale_cannot_be_added_by_hand(admin_client, sales):
    assert admin_client.get(sale_url("add")).status_code == 403


def test_the_ingest_log_is_listed_read_only(admin_client, sales):
    reply = admin_client.get(reverse("admin:rankings_ingestlog_changelist"))

    assert reply.status_code == 200
    assert admin_client.get(reverse("admin:rankings_ingestlog_add")).status_code == 403


# --- catalogue -------------------------------------------------------------------------------


def test_the_category_and_product_lists_render(admin_client, sales):
    categories = admin_client.get(reverse("admin:catalogue_category_changelist"))
    products = admin_client.get(reverse("admin:catalogue_product_changelist"))

    assert (categories.status_code, products.status_code) == (200, 200)
    assert "Toys" in categories.content.decode()
    assert "Kite" in products.content.decode()


def test_placeholders_are_marked_and_can_be_listed_alone(admin_client, sales):
    """Products and categories created from sale events need completing; the admin shows which."""
    products = admin_client.get(reverse("admin:catalogue_product_changelist"), {"placeholder": "yes"})
    categories = admin_client.get(reverse("admin:catalogue_category_changelist"), {"placeholder": "yes"})

    assert [p.product_id for p in products.context["cl"].result_list] == ["mystery"]
    assert [c.slug for c in categories.context["cl"].result_list] == ["new-cat"]
    assert "needs completing" in products.content.decode()
    complete = admin_client.get(reverse("admin:catalogue_product_changelist"), {"placeholder": "no"})
    assert [p.product_id for p in complete.context["cl"].result_list] == ["p1"]


def test_the_product_list_does_not_query_per_row(admin_client, django_assert_max_num_queries):
    toys = Category.objects.create(slug="toys", name="Toys")
    for i in range(30):
        Product.objects.create(product_id=f"p{i}", name=f"Product {i}").categories.add(toys)

    with django_assert_max_num_queries(12):
        admin_client.get(reverse("admin:catalogue_product_changelist"))


def test_a_placeholder_product_is_completed_with_its_categories(admin_client, sales):
    # given the placeholder created for an unknown product
    product = Product.objects.get(product_id="mystery")
    toys = Category.objects.get(slug="toys")
    page = admin_client.get(reverse("admin:catalogue_product_change", args=[product.pk]))
    assert "admin-autocomplete" in page.content.decode()  # categories are picked by searching them

    # when an editor names it, prices it, files it under toys and unticks the placeholder box
    reply = admin_client.post(
        reverse("admin:catalogue_product_change", args=[product.pk]),
        {"name": "Mystery Box", "price_cents": 1999, "categories": [toys.pk], "_save": "Save"},
    )

    # then
    assert reply.status_code == 302
    product.refresh_from_db()
    assert (product.name, product.price_cents, product.is_placeholder) == ("Mystery Box", 1999, False)
    assert list(product.categories.values_list("slug", flat=True)) == ["toys"]
    assert product.product_id == "mystery"


def test_a_category_cannot_take_the_reserved_slug_all(admin_client):
    reply = admin_client.post(reverse("admin:catalogue_category_add"), {"slug": "all", "name": "Everything"})

    assert reply.status_code == 200
    assert "reserved" in reply.content.decode()
    assert not Category.objects.filter(slug="all").exists()


def test_a_new_category_can_be_added(admin_client):
    reply = admin_client.post(reverse("admin:catalogue_category_add"), {"slug": "garden", "name": "Garden"})

    assert reply.status_code == 302
    assert not Category.objects.get(slug="garden").has_sales


def _searchable_admins():
    from django.contrib import admin

    return sorted(
        f"{model._meta.app_label}/{model._meta.model_name}"
        for model, model_admin in admin.site._registry.items()
        if model_admin.search_fields
    )


@pytest.mark.parametrize("path", _searchable_admins())
@pytest.mark.parametrize("query", ["%00", "a%00b"])
def test_every_admin_search_refuses_a_nul_character_without_a_500(admin_client, path, query):
    """PostgreSQL refuses NUL in text: the search is refused with a message, not a 500."""
    reply = admin_client.get(f"/admin/{path}/?q={query}")

    assert reply.status_code == 200
    assert "Null characters are not allowed." in [str(m) for m in reply.context["messages"]]


def _autocomplete_fields():
    from django.contrib import admin

    return sorted(
        (model._meta.label_lower, field)
        for model, model_admin in admin.site._registry.items()
        for field in model_admin.autocomplete_fields
    )


@pytest.mark.parametrize("model, field", _autocomplete_fields())
@pytest.mark.parametrize("term", ["%00", "a%00b"])
def test_every_autocomplete_refuses_a_nul_character_without_a_500(admin_client, model, field, term):
    """The autocomplete boxes hand their term to the related admin's search as typed."""
    app_label, model_name = model.split(".")
    reply = admin_client.get(
        f"/admin/autocomplete/?term={term}&app_label={app_label}&model_name={model_name}&field_name={field}"
    )

    assert reply.status_code == 200
    assert reply.json()["results"] == []

"""Redis's copy of the product names (rankings/engine/store/names.py): written after every edit
commits, mended by a walk over the catalogue, read by the reads that name products at random."""

import datetime as dt

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from catalogue.models import Category, Product
from rankings.engine import store
from rankings.operations import names_copy
from rankings.serving import memory

from .rankings_helpers import Shop
from .test_catalogue_api import PRODUCTS, _client, _push, _user_with

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shop_api(django_user_model):
    return _client(_user_with(django_user_model, "shop", "change_product", "change_category"))


def _catalogue_queries(queries) -> list[str]:
    return [q["sql"] for q in queries if "catalogue_product" in q["sql"]]


def _held(*product_ids: str) -> dict:
    return store.names_held(product_ids)


def _neighbours(api, product_id: str) -> list[tuple[str, str]]:
    memory.forget_all()  # no name, no answer remembered: the read asks Redis or the catalogue
    reply = api.get(f"/v1/products/{product_id}/neighbors?category=toys&n=2")
    assert reply.status_code == 200, reply.content
    return [(item["productId"], item["name"]) for item in reply.json()["items"]]


def test_names_pushed_through_the_api_are_read_from_redis_without_asking_the_catalogue(shop_api, api):
    # given products pushed by a shop's catalogue sync, sold and ticked
    _push(
        shop_api, PRODUCTS, [{"id": f"p{i}", "name": f"Kite {i}", "categories": ["toys"]} for i in range(5)]
    )
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    shop.send(*(shop.sale(f"p{i}", categories=["toys"], qty=i + 1) for i in range(5)))
    shop.tick()
    assert _held("p0", "p4") == {"p0": "Kite 0", "p4": "Kite 4"}

    # when a product's neighbours are read by a process that remembers no name
    with CaptureQueriesContext(connection) as queries:
        items = _neighbours(api, "p2")
    # then their names came from Redis: the catalogue was not asked
    assert items == [("p4", "Kite 4"), ("p3", "Kite 3"), ("p2", "Kite 2"), ("p1", "Kite 1"), ("p0", "Kite 0")]
    assert _catalogue_queries(queries) == []

    # and a name pushed again is the one read next
    _push(shop_api, PRODUCTS, [{"id": "p3", "name": "Kite, blue"}])
    assert ("p3", "Kite, blue") in _neighbours(api, "p2")


def test_names_redis_lacks_are_read_from_the_catalogue(api):
    toys = Category.objects.create(slug="toys", name="Toys")
    Product.objects.bulk_create(
        [Product(product_id=f"p{i}", name=f"Drum {i}", price_cents=100) for i in range(3)]
    )
    for product in Product.objects.all():
        product.categories.set([toys])
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    shop.send(*(shop.sale(f"p{i}", qty=i + 1) for i in range(3)))
    shop.tick()
    assert _held("p0", "p1", "p2") == {"p0": None, "p1": None, "p2": None}  # a bulk path writes none

    with CaptureQueriesContext(connection) as queries:
        items = _neighbours(api, "p1")

    assert items == [("p2", "Drum 2"), ("p1", "Drum 1"), ("p0", "Drum 0")]
    assert len(_catalogue_queries(queries)) == 1


def test_a_product_saved_or_deleted_through_the_orm_is_copied_or_forgotten():
    product = Product.objects.create(product_id="p1", name="Kite", price_cents=100)
    assert _held("p1") == {"p1": "Kite"}
    product.name = "Kite, red"
    product.save()
    assert _held("p1") == {"p1": "Kite, red"}
    product.delete()
    assert _held("p1") == {"p1": None}


def test_a_name_saved_in_a_transaction_that_rolls_back_is_not_copied():
    product = Product.objects.create(product_id="p1", name="Kite", price_cents=100)
    with pytest.raises(RuntimeError), transaction.atomic():
        product.name = "Kite, red"
        product.save()
        raise RuntimeError("rolled back")
    assert _held("p1") == {"p1": "Kite"}


def test_the_walk_copies_what_bulk_paths_made_mends_stale_names_and_prunes_deleted_products():
    Product.objects.bulk_create(
        [Product(product_id=f"p{i}", name=f"Drum {i}", price_cents=100) for i in range(5)]
    )
    store.names_write(
        {"p1": "an old name", "gone": "a deleted product's"}
    )  # Redis missed an edit and a delete

    total = names_copy.names_copy()

    assert _held("p0", "p1", "p4", "gone") == {"p0": "Drum 0", "p1": "Drum 1", "p4": "Drum 4", "gone": None}
    assert (total.products, total.mended, total.pruned, total.buckets) == (5, 5, 1, store.NAMES_BUCKETS)


def test_the_walk_keeps_a_name_an_edit_wrote_between_its_two_reads():
    Product.objects.create(product_id="p1", name="Kite", price_cents=100)
    store.names_write({"p2": "Drum"})
    # the walk reads Redis, then the catalogue (the old name); an edit commits and writes in between
    held = _held("p1", "p2")
    store.names_write({"p1": "Kite, red"})

    mended = store.names_mend(held, {"p1": "Kite", "p2": "Drum, loud"})

    # the edit's name stays; where Redis still held what the walk read, the walk's name is written
    assert _held("p1", "p2") == {"p1": "Kite, red", "p2": "Drum, loud"}
    assert mended == 1


def test_each_step_of_the_walk_reads_a_bounded_number_of_products_and_buckets(monkeypatch):
    Product.objects.bulk_create(
        [Product(product_id=f"p{i:02}", name=f"Drum {i}", price_cents=100) for i in range(25)]
    )
    store.names_walk_set(product="", bucket=0)
    steps = []
    while not steps or not steps[-1].products_wrapped:
        steps.append(names_copy.names_step(products=10, buckets=1000))

    # three steps of at most ten products each, and a thousand buckets each, from where the last stopped
    assert [(s.products, s.buckets) for s in steps] == [(10, 1000), (10, 1000), (5, 1000)]
    assert store.names_walk_read() == ("", 3000)
    assert _held("p00", "p24") == {"p00": "Drum 0", "p24": "Drum 24"}


def test_the_command_copies_every_name(capsys):
    Product.objects.bulk_create(
        [Product(product_id=f"p{i}", name=f"Drum {i}", price_cents=100) for i in range(3)]
    )

    call_command("names_copy")

    assert "3 products read, 3 names written" in capsys.readouterr().out
    assert _held("p0", "p2") == {"p0": "Drum 0", "p2": "Drum 2"}

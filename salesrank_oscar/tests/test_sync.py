"""salesrank's catalogue follows the shop's: `salesrank_sync` pushes it whole, and what Oscar's
dashboard saves goes through the outbox."""

import io
import json
from decimal import Decimal as D

import pytest
from django.core.management import call_command
from oscar.core.loading import get_model

from salesrank_oscar.models import Kind, OutboxEntry, State
from tests import processes

from .pages import form_fields
from .proxy import Proxy
from .shop_side import order_placed

pytestmark = pytest.mark.django_db


def test_salesrank_sync_pushes_the_category_tree_and_every_product(wired, catalogue):
    # given
    toys, board_games, books = (catalogue[name].slug for name in ("toys", "board_games", "books"))
    chess, atlas = catalogue["chess"], catalogue["atlas"]
    # when
    out = io.StringIO()
    call_command("salesrank_sync", stdout=out)
    # then
    assert out.getvalue() == "created 5, updated 0, rejected 0\n"
    assert wired.categories(toys, board_games, books) == {
        toys: ("Toys", None, False),
        board_games: ("Board games", toys, False),
        books: ("Books", None, False),
    }
    assert wired.products(str(chess.pk), str(atlas.pk)) == {
        str(chess.pk): ("Chess set", 2500, chess.date_created, [board_games], False),
        str(atlas.pk): ("Atlas", 1250, atlas.date_created, sorted([books, toys]), False),
    }


def test_what_the_dashboard_saves_is_pushed_through_the_outbox_and_shows_on_the_boards(
    wired, catalogue, client
):
    # given: the chess set sold (and on the boards under its first title)
    chess = catalogue["chess"]
    order_placed((chess, 1))
    call_command("salesrank_send", stdout=io.StringIO())
    staff = get_model("auth", "User").objects.create_superuser("editor", "editor@example.com", "x")
    client.force_login(staff)
    # when: an editor renames it and files it under a new category, in Oscar's dashboard
    page = client.get(f"/dashboard/catalogue/products/{chess.pk}/")
    fields = form_fields(page.text, "create_update_product_form")
    fields["title"] = ["Chess set, tournament size"]
    new = form_fields(
        client.get("/dashboard/catalogue/categories/create/").text, "create_update_category_form"
    )
    new["name"], new["treebeard_position"] = ["Strategy"], ["first-child"]  # at the top of the tree
    created = client.post("/dashboard/catalogue/categories/create/", new)
    assert created.status_code == 302, (new, created.context["form"].errors if created.context else None)
    strategy = get_model("catalogue", "Category").objects.get(name="Strategy")
    fields["productcategory_set-0-category"] = [str(strategy.pk)]
    saved = client.post(f"/dashboard/catalogue/products/{chess.pk}/", fields)
    assert saved.status_code == 302, saved.text[:2000]
    # then: the outbox sends both, and salesrank's boards show the new name
    noted = set(OutboxEntry.objects.filter(state=State.PENDING).values_list("kind", "key"))
    assert {(Kind.PRODUCT, str(chess.pk)), (Kind.CATEGORY, str(strategy.pk))} <= noted
    call_command("salesrank_send", stdout=io.StringIO())
    assert wired.categories(strategy.slug) == {strategy.slug: ("Strategy", None, False)}
    name, price, _, categories, _ = wired.products(str(chess.pk))[str(chess.pk)]
    assert (name, price, categories) == ("Chess set, tournament size", 2500, [strategy.slug])
    processes.wait_until(
        lambda: (
            [
                item["name"]
                for item in wired.get("/v1/categories/all/top", window="1d", limit=100).json()["items"]
                if item["productId"] == str(chess.pk)
            ]
            == ["Chess set, tournament size"]
        ),
        timeout=10,
        what="the new name on the board",
    )


def test_a_product_whose_price_changes_is_pushed_again(wired, catalogue):
    # given
    chess = catalogue["chess"]
    call_command("salesrank_sync", stdout=io.StringIO())
    OutboxEntry.objects.all().delete()
    # when
    record = chess.stockrecords.get()
    record.price = D("27.50")
    record.save()
    call_command("salesrank_send", stdout=io.StringIO())
    # then
    assert wired.products(str(chess.pk))[str(chess.pk)][1] == 2750


def test_a_sync_pushes_the_catalogue_a_batch_at_a_time(wired, catalogue, settings):
    # given
    settings.SALESRANK_BATCH_SIZE = 2
    watched = Proxy(wired.url)
    settings.SALESRANK_URL = watched.url
    # when
    try:
        call_command("salesrank_sync", stdout=io.StringIO())
    finally:
        watched.close()
    # then: three categories (parents first) in two requests, two products in one
    sent = [
        (path, [item.get("slug") or item.get("id") for item in json.loads(body)[path.rsplit("/", 1)[1]]])
        for path, body, _, _ in watched.posts
    ]
    toys, board_games, books = (catalogue[name].slug for name in ("toys", "board_games", "books"))
    assert sent == [
        ("/v1/catalogue/categories", [toys, board_games]),
        ("/v1/catalogue/categories", [books]),
        ("/v1/catalogue/products", [str(catalogue["chess"].pk), str(catalogue["atlas"].pk)]),
    ]

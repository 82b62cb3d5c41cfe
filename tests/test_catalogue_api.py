"""POST /v1/catalogue/products and /v1/catalogue/categories: a shop keeps names, prices, categories
and its category tree in step, in bulk, each bad item rejected by its index (docs/api.md)."""

import datetime as dt
import http.client
import json

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from catalogue.models import Category, Product
from rankings.engine.tree import tree_pending
from rankings.operations import backfill
from rankings.operations.tokens import token_create

from . import processes
from .rankings_helpers import Shop

PRODUCTS = "/v1/catalogue/products"
CATEGORIES = "/v1/catalogue/categories"
# How long a test waits for a pushed name to show: far less than the minute a process may otherwise
# keep a name, so that a name seen only once that memory lapses fails the test.
NAME_SHOWN_SECONDS = 10  # seconds


def _client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=user)}")
    return client


def _user_with(django_user_model, username: str, *codenames: str):
    user = django_user_model.objects.create_user(username)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="catalogue", codename__in=codenames)
    )
    return user


@pytest.fixture
def shop_api(db, django_user_model):
    """A client with a token of the shop's catalogue sync: it may change products and categories."""
    return _client(_user_with(django_user_model, "shop", "change_product", "change_category"))


def _push(client, path: str, items: list) -> dict:
    key = "products" if path == PRODUCTS else "categories"
    # json.dumps escapes what is not ASCII, a lone surrogate among it, as a shop's client may send it
    reply = client.post(path, json.dumps({key: items}), content_type="application/json")
    assert reply.status_code == 200, reply.content
    return reply.json()


def _links(product_id: str) -> list[str]:
    return sorted(Product.objects.get(product_id=product_id).categories.values_list("slug", flat=True))


def _parents() -> dict[str, str | None]:
    return dict(Category.objects.values_list("slug", "parent__slug"))


# --- products: created, updated, placeholders completed -----------------------------------------


@pytest.mark.django_db
def test_new_products_are_created_and_known_ones_updated(shop_api):
    # given a product the shop pushed before
    Category.objects.create(slug="toys", name="Toys")
    Product.objects.create(product_id="p1", name="Old name", price_cents=100)
    # when the shop pushes it again with a new name and price, and two new products
    reply = _push(
        shop_api,
        PRODUCTS,
        [
            {"id": "p1", "name": "Kite", "price": "12.50", "categories": ["toys"], "releasedAt": None},
            {
                "id": "p2",
                "name": "Yo-yo",
                "price": 3,
                "categories": ["toys"],
                "releasedAt": "2026-03-01T09:00:00Z",
            },
            {"id": "p3", "name": "Puzzle", "price": "0.99", "categories": [], "releasedAt": None},
        ],
    )
    # then the reply counts each, and the catalogue holds what was pushed
    assert reply == {"created": 2, "updated": 1, "rejected": []}
    stored = {p.product_id: p for p in Product.objects.all()}
    assert [
        (stored[p].name, stored[p].price_cents, stored[p].is_placeholder) for p in ("p1", "p2", "p3")
    ] == [
        ("Kite", 1250, False),
        ("Yo-yo", 300, False),
        ("Puzzle", 99, False),
    ]
    assert stored["p2"].released_at == dt.datetime(2026, 3, 1, 9, tzinfo=dt.UTC)
    assert stored["p1"].released_at is None
    assert (_links("p1"), _links("p2"), _links("p3")) == (["toys"], ["toys"], [])


@pytest.mark.django_db
def test_a_placeholder_becomes_a_full_product_and_keeps_what_the_push_leaves_out(shop_api):
    """A sale of an unknown product makes a placeholder filed under its first event's categories; a
    push of its name and price completes it, and what the push leaves out stays as it was."""
    # given a placeholder made by a sale
    shop = Shop()
    shop.send(shop.sale("p9", categories=["toys", "gifts"], qty=2))
    assert Product.objects.get(product_id="p9").is_placeholder
    # when its name and price are pushed
    reply = _push(shop_api, PRODUCTS, [{"id": "p9", "name": "Wooden train", "price": "24.00"}])
    # then it is a full product, still filed where its first sale put it
    assert reply == {"created": 0, "updated": 1, "rejected": []}
    product = Product.objects.get(product_id="p9")
    assert (product.name, product.price_cents, product.is_placeholder, product.released_at) == (
        "Wooden train",
        2400,
        False,
        None,
    )
    assert _links("p9") == ["gifts", "toys"]
    # and a push of its categories alone, or of a release, changes those only
    _push(
        shop_api, PRODUCTS, [{"id": "p9", "name": "Wooden train", "releasedAt": "2026-01-05T00:00:00+01:00"}]
    )
    product.refresh_from_db()
    assert (product.price_cents, product.released_at) == (2400, dt.datetime(2026, 1, 4, 23, tzinfo=dt.UTC))
    assert _links("p9") == ["gifts", "toys"]
    _push(shop_api, PRODUCTS, [{"id": "p9", "name": "Wooden train", "releasedAt": None, "price": None}])
    product.refresh_from_db()
    assert (product.price_cents, product.released_at) == (2400, None)


@pytest.mark.django_db
def test_pushed_categories_replace_the_products_catalogue_categories(shop_api):
    """The catalogue's categories of a product are what the shop last pushed (the ones a sale without
    categories counts in, and its badges); the categories its stored sales counted in stay theirs."""
    # given a product filed under toys and gifts by its first sale
    shop = Shop()
    shop.send(shop.sale("p1", categories=["toys", "gifts"], qty=1))
    # when the shop files it under games and a category the catalogue does not have yet
    reply = _push(
        shop_api, PRODUCTS, [{"id": "p1", "name": "Kite", "categories": ["games", "toys", "games"]}]
    )
    # then those are its categories; the new one is a placeholder until the shop pushes its name
    assert reply == {"created": 0, "updated": 1, "rejected": []}
    assert _links("p1") == ["games", "toys"]
    games = Category.objects.get(slug="games")
    assert (games.name, games.is_placeholder, games.has_sales) == ("games", True, False)
    # and a sale without categories now counts in them
    shop.send(shop.sale("p1", categories=[], qty=1))
    shop.tick()
    assert shop.top("games") == [("p1", 1)]
    assert shop.top("gifts") == [("p1", 1)]  # the first sale stays where it counted
    # and an empty list files it under none
    _push(shop_api, PRODUCTS, [{"id": "p1", "name": "Kite", "categories": []}])
    assert _links("p1") == []


@pytest.mark.django_db
def test_a_request_adds_at_most_max_batch_new_categories_and_rejects_the_products_past_them(
    shop_api, settings
):
    settings.RANKINGS = {**settings.RANKINGS, "MAX_EVENT_CATEGORIES": 2, "MAX_BATCH_NEW_CATEGORIES": 3}
    Category.objects.create(slug="known", name="Known")
    reply = _push(
        shop_api,
        PRODUCTS,
        [
            {"id": "a", "name": "A", "categories": ["n1", "n2"]},
            {"id": "b", "name": "B", "categories": ["n3", "n4"]},
            {"id": "c", "name": "C", "categories": ["known", "n1"]},
            {"id": "d", "name": "D", "categories": ["n3"]},
        ],
    )
    assert reply["created"] == 3
    assert reply["rejected"] == [
        {
            "index": 1,
            "error": "categories: this batch names more than 3 categories the catalogue does not have;"
            " send this product again in another batch",
        }
    ]
    assert sorted(Category.objects.values_list("slug", flat=True)) == ["known", "n1", "n2", "n3"]
    assert (_links("a"), _links("c"), _links("d")) == (["n1", "n2"], ["known", "n1"], ["n3"])


# --- products: rejections and limits ----------------------------------------------------------------


BAD_PRODUCTS = [
    pytest.param("not an object", "product must be a JSON object", id="not-an-object"),
    pytest.param({"name": "Kite"}, "id is required", id="no-id"),
    pytest.param(
        {"id": "a b", "name": "Kite"}, "id must be 1 to 64 characters of A-Z a-z 0-9 . _ : -", id="id"
    ),
    pytest.param({"id": "..", "name": "Kite"}, "id may not be '.' or '..': no URL can name it", id="dots"),
    pytest.param({"id": "p1"}, "name is required", id="no-name"),
    pytest.param({"id": "p1", "name": "  "}, "name: a name of 1 to 200 characters is required", id="blank"),
    pytest.param(
        {"id": "p1", "name": "K" * 201}, "name: a name of 1 to 200 characters is required", id="long"
    ),
    pytest.param(
        {"id": "p1", "name": "Kite\u202e"},
        "name: a name may not hold control or bidirectional formatting characters",
        id="bidi",
    ),
    pytest.param({"id": "p1", "name": "Ki\x00te"}, "name: a name may not hold control", id="nul"),
    pytest.param(
        {"id": "p1", "name": "Ki\ud800te"}, "name: a name must be valid Unicode text", id="surrogate"
    ),
    pytest.param({"id": "p1", "name": 7}, "name must be a string", id="name-type"),
    pytest.param({"id": "p1", "name": "Kite", "price": "-1"}, "price may not be negative", id="negative"),
    pytest.param(
        {"id": "p1", "name": "Kite", "price": "1.999"}, "price may have at most 2 decimal", id="places"
    ),
    pytest.param(
        {"id": "p1", "name": "Kite", "price": "1e9"}, "price must be written with the digits", id="exp"
    ),
    pytest.param({"id": "p1", "name": "Kite", "price": 10**12}, "price may have at most 12 digits", id="big"),
    pytest.param(
        {"id": "p1", "name": "Kite", "categories": [f"c{i}" for i in range(21)]},
        "categories must be a list of at most 20 slugs",
        id="categories",
    ),
    pytest.param(
        {"id": "p1", "name": "Kite", "categories": ["all"]},
        "categories: 'all' is reserved for the board of every sale",
        id="all",
    ),
    pytest.param(
        {"id": "p1", "name": "Kite", "categories": ["a b"]}, "categories: 'a b' is not a slug", id="slug"
    ),
    pytest.param(
        {"id": "p1", "name": "Kite", "releasedAt": "2026-03-01T09:00:00"},
        "releasedAt has no UTC offset; add Z or +00:00",
        id="naive",
    ),
    pytest.param(
        {"id": "p1", "name": "Kite", "releasedAt": "soon"},
        "releasedAt must be epoch seconds or an ISO-8601 time with a UTC offset",
        id="when",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("item", "reason"), BAD_PRODUCTS)
def test_a_bad_product_is_rejected_by_its_index_and_the_others_are_stored(shop_api, item, reason):
    reply = _push(shop_api, PRODUCTS, [{"id": "ok1", "name": "First"}, item, {"id": "ok2", "name": "Second"}])

    assert reply["created"] == 2 and reply["updated"] == 0
    [rejected] = reply["rejected"]
    assert rejected["index"] == 1 and rejected["error"].startswith(reason), rejected
    assert sorted(Product.objects.values_list("product_id", flat=True)) == ["ok1", "ok2"]


@pytest.mark.django_db
def test_a_product_given_twice_in_one_request_is_rejected_the_second_time(shop_api):
    reply = _push(shop_api, PRODUCTS, [{"id": "p1", "name": "Kite"}, {"id": "p1", "name": "Other"}])

    assert reply == {
        "created": 1,
        "updated": 0,
        "rejected": [{"index": 1, "error": "'p1' is already given at index 0"}],
    }
    assert Product.objects.get(product_id="p1").name == "Kite"


@pytest.mark.django_db
@pytest.mark.parametrize("path", [PRODUCTS, CATEGORIES])
@pytest.mark.parametrize(
    "body",
    [b"[]", b'{"products": {}, "categories": {}}', b'{"items": []}', b"{", b'"products"'],
    ids=["list", "object", "other-key", "not-json", "string"],
)
def test_a_body_that_is_not_a_list_of_items_is_400(shop_api, path, body):
    reply = shop_api.post(path, body, content_type="application/json")

    assert reply.status_code == 400
    assert set(reply.json()) == {"error"}
    assert not Product.objects.exists() and not Category.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("path", [PRODUCTS, CATEGORIES])
def test_more_than_5000_items_are_refused_whole_with_413(shop_api, path):
    key = "products" if path == PRODUCTS else "categories"
    items = [{"id": f"p{i}", "slug": f"c{i}", "name": "N", "parent": None} for i in range(5001)]

    reply = shop_api.post(path, {key: items}, format="json")

    assert reply.status_code == 413
    assert reply.json() == {"error": f"at most 5000 {key} per batch; this one has 5001"}
    assert not Product.objects.exists() and not Category.objects.exists()


# --- permissions ------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("path", [PRODUCTS, CATEGORIES])
def test_without_a_valid_token_a_push_is_401(api, path):
    body = {
        "products": [{"id": "p1", "name": "Kite"}],
        "categories": [{"slug": "toys", "name": "Toys", "parent": None}],
    }
    assert api.post(path, body, format="json").status_code == 401
    api.credentials(HTTP_AUTHORIZATION="Token not-a-key")
    reply = api.post(path, body, format="json")
    assert (reply.status_code, reply.json()) == (401, {"error": "Invalid token."})
    assert not Product.objects.exists() and not Category.objects.exists()


@pytest.mark.django_db
def test_each_push_needs_its_own_permission(django_user_model):
    """Products need catalogue.change_product, the tree catalogue.change_category; a sales token
    may do neither."""
    products_only = _client(_user_with(django_user_model, "products", "change_product"))
    categories_only = _client(_user_with(django_user_model, "categories", "change_category"))
    seller = django_user_model.objects.create_user("seller")
    seller.user_permissions.add(
        Permission.objects.get(codename="add_sale", content_type__app_label="rankings")
    )
    sales_only = _client(seller)
    product = {"products": [{"id": "p1", "name": "Kite"}]}
    category = {"categories": [{"slug": "toys", "name": "Toys", "parent": None}]}

    assert products_only.post(CATEGORIES, category, format="json").status_code == 403
    assert categories_only.post(PRODUCTS, product, format="json").status_code == 403
    assert sales_only.post(PRODUCTS, product, format="json").status_code == 403
    assert sales_only.post(CATEGORIES, category, format="json").status_code == 403
    assert not Product.objects.exists() and not Category.objects.exists()
    assert products_only.post(PRODUCTS, product, format="json").status_code == 200
    assert categories_only.post(CATEGORIES, category, format="json").status_code == 200


# --- categories: the tree, exactly as import_categories ---------------------------------------------


@pytest.mark.django_db
def test_categories_are_created_completed_renamed_and_moved(shop_api):
    # given a placeholder made by a sale and a category an editor made
    Category.objects.create(slug="toys", name="toys", is_placeholder=True)
    Category.objects.create(slug="board-games", name="Board games")
    Category.objects.create(slug="garden", name="Garden")
    # when the shop pushes its tree, children before their parents
    reply = _push(
        shop_api,
        CATEGORIES,
        [
            {"slug": "strategy", "name": "Strategy games", "parent": "board-games"},
            {"slug": "board-games", "name": "Board games", "parent": "toys"},
            {"slug": "toys", "name": "Toys", "parent": None},
            {"slug": "garden", "name": "Garden and outdoors", "parent": None},
        ],
    )
    # then
    assert reply == {"created": 1, "updated": 3, "rejected": []}
    assert _parents() == {"toys": None, "board-games": "toys", "strategy": "board-games", "garden": None}
    names = dict(Category.objects.values_list("slug", "name"))
    assert (names["toys"], names["garden"]) == ("Toys", "Garden and outdoors")
    assert not Category.objects.filter(is_placeholder=True).exists()


def _chain(prefix: str, levels: int) -> list[dict]:
    return [
        {"slug": f"{prefix}{i}", "name": f"{prefix} {i}", "parent": f"{prefix}{i - 1}" if i else None}
        for i in range(levels)
    ]


BAD_CATEGORIES = [
    pytest.param({"slug": "a b", "name": "X", "parent": None}, "slug 'a b' is not a valid slug", id="slug"),
    pytest.param(
        {"slug": "x" * 51, "name": "X", "parent": None}, "slug is longer than 50 characters", id="long"
    ),
    pytest.param(
        {"slug": "all", "name": "X", "parent": None}, "slug: 'all' is reserved and not in the tree", id="all"
    ),
    pytest.param(
        {"slug": "x", "name": "", "parent": None},
        "name: a name of 1 to 200 characters is required",
        id="name",
    ),
    pytest.param(
        {"slug": "x", "name": "X\x07", "parent": None}, "name: a name may not hold control", id="control"
    ),
    pytest.param(
        {"slug": "x", "name": "X"},
        "parent is required (null for a category at the top of the tree)",
        id="no-parent",
    ),
    pytest.param(
        {"slug": "x", "name": "X", "parent": "all"},
        "parent: 'all' is reserved and not in the tree",
        id="under-all",
    ),
    pytest.param(
        {"slug": "x", "name": "X", "parent": "nope"},
        "parent 'nope' is neither in this request's accepted categories nor in the catalogue",
        id="unknown-parent",
    ),
    pytest.param(
        {"slug": "x", "name": "X", "parent": "d5"},
        "'x' cannot be placed under 'd5': the tree would be 7 levels deep, at most 6 are allowed",
        id="seventh-level",
    ),
    pytest.param(
        {"slug": "d0", "name": "D", "parent": "d5"},
        "'d0' cannot be placed under 'd5': that makes a cycle (d0 › d5 › d4 › d3 › d2 › d1 › d0)",
        id="cycle",
    ),
    pytest.param(
        {"slug": "t0", "name": "T", "parent": "d3"},
        "'t0' cannot be placed under 'd3': the tree would be 7 levels deep, at most 6 are allowed",
        id="subtree-too-deep",
    ),
    pytest.param(
        {"slug": "ok1", "name": "Again", "parent": None}, "'ok1' is already given at index 0", id="twice"
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("item", "reason"), BAD_CATEGORIES)
def test_a_bad_category_is_rejected_by_its_index_and_the_others_are_stored(shop_api, item, reason):
    # given a chain six levels deep and a three-level subtree apart
    _push(shop_api, CATEGORIES, _chain("d", 6) + _chain("t", 3))
    before = _parents()
    # when
    reply = _push(
        shop_api,
        CATEGORIES,
        [
            {"slug": "ok1", "name": "First", "parent": None},
            item,
            {"slug": "ok2", "name": "Second", "parent": "ok1"},
        ],
    )
    # then
    [rejected] = reply["rejected"]
    assert rejected["index"] == 1 and rejected["error"].startswith(reason), rejected
    assert (reply["created"], reply["updated"]) == (2, 0)
    assert _parents() == {**before, "ok1": None, "ok2": "ok1"}


@pytest.mark.django_db
def test_a_category_under_a_rejected_one_is_rejected_and_so_are_moves_that_together_make_a_cycle(shop_api):
    """A child whose parent is only in the request and was rejected is rejected with it; two moves
    that each fit alone but together make a cycle are both rejected, and the tree stays as it was."""
    _push(shop_api, CATEGORIES, _chain("d", 4) + _chain("t", 2))
    reply = _push(
        shop_api,
        CATEGORIES,
        [
            {"slug": "bad", "name": "Bad\x07", "parent": None},
            {"slug": "child", "name": "Child", "parent": "bad"},
            {"slug": "t0", "name": "T", "parent": "d2"},
            {"slug": "d1", "name": "D", "parent": "t1"},
            {"slug": "fine", "name": "Fine", "parent": "d3"},
        ],
    )
    assert [r["index"] for r in reply["rejected"]] == [0, 1, 2, 3]
    assert reply["rejected"][1]["error"] == (
        "parent 'bad' is neither in this request's accepted categories nor in the catalogue"
    )
    assert "that makes a cycle" in reply["rejected"][2]["error"]
    assert "that makes a cycle" in reply["rejected"][3]["error"]
    assert (reply["created"], reply["updated"]) == (1, 0)
    parents = _parents()
    assert (parents["t0"], parents["d1"], parents["fine"]) == (None, "d0", "d3")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("via", ["request", "import_categories"])
def test_tree_edits_are_pending_until_a_rebuild_whichever_way_they_come(via, tmp_path, django_user_model):
    """The catalogue API writes the tree exactly as import_categories does: the catalogue changes at
    once, the boards count by the active version's tree until a rebuild with the new one is switched to."""
    # given toys › board-games counting, garden apart, and a sale in board-games
    Category.objects.create(slug="garden", name="Garden")
    toys = Category.objects.create(slug="toys", name="Toys")
    Category.objects.create(slug="board-games", name="Board games", parent=toys)
    backfill.version_build(activate=True)
    shop = Shop()
    shop.send(shop.sale("p1", categories=["board-games"], qty=3))
    shop.tick()
    rows = [("board-games", "Board games", "garden"), ("strategy", "Strategy", "board-games")]
    # when board-games moves under garden and a new category comes under it
    if via == "request":
        client = _client(_user_with(django_user_model, "shop", "change_category"))
        reply = _push(client, CATEGORIES, [{"slug": s, "name": n, "parent": p} for s, n, p in rows])
        assert reply == {"created": 1, "updated": 1, "rejected": []}
    else:
        tree = tmp_path / "tree.csv"
        tree.write_text("".join(f"{s},{n},{p}\n" for s, n, p in rows))
        call_command("import_categories", str(tree))
    # then the catalogue has the new tree, the move is pending, and the boards still count the old one
    assert _parents() == {"garden": None, "toys": None, "board-games": "garden", "strategy": "board-games"}
    pending = tree_pending()
    assert pending.moved == [("board-games", "toys", "garden"), ("strategy", None, "board-games")]
    shop.advance(seconds=10)
    shop.tick()
    assert (shop.top("toys"), shop.top("garden")) == ([("p1", 3)], [])
    # until a rebuild with the new tree is switched to
    backfill.version_build(activate=True)
    assert not tree_pending().pending
    assert (shop.top("toys"), shop.top("garden")) == ([], [("p1", 3)])
    shop.assert_exact()


# --- bounded: statements do not grow with the items -------------------------------------------------


def _products(count: int) -> list[dict]:
    """`count` products, every other one known already, each in 20 categories (a few new ones)."""
    return [
        {
            "id": f"p{i}",
            "name": f"Product {i}",
            "price": f"{i % 1000}.{i % 100:02d}",
            "categories": [f"c{(i + k) % 900}" for k in range(20)],
            "releasedAt": "2026-03-01T00:00:00Z" if i % 3 else None,
        }
        for i in range(count)
    ]


@pytest.mark.django_db
def test_a_push_of_5000_products_costs_the_statements_of_a_push_of_10(
    shop_api, django_assert_max_num_queries
):
    """One lookup of the products, one of the categories, one insert of the new categories, one upsert
    of the products, one statement for their links: the same for 5,000 products as for 10."""
    Category.objects.bulk_create([Category(slug=f"c{i}", name=f"C{i}") for i in range(0, 900, 2)])
    Product.objects.bulk_create([Product(product_id=f"p{i}", name="old") for i in range(0, 5000, 2)])
    shop_api.post(PRODUCTS, {"products": []}, format="json")  # the token's first use, recorded once an hour
    with CaptureQueriesContext(connection) as small:
        assert _push(shop_api, PRODUCTS, _products(10)) == {"created": 5, "updated": 5, "rejected": []}

    with django_assert_max_num_queries(len(small)):
        reply = _push(shop_api, PRODUCTS, _products(5000))

    assert reply == {"created": 2495, "updated": 2505, "rejected": []}
    assert Product.objects.filter(is_placeholder=False).count() == 5000
    assert Product.categories.through.objects.count() == 100_000
    assert len(_links("p4999")) == 20


def _tree(count: int) -> list[dict]:
    """`count` categories in chains six levels deep."""
    return [
        {"slug": f"k{i}", "name": f"Category {i}", "parent": f"k{i - 1}" if i % 6 else None}
        for i in range(count)
    ]


@pytest.mark.django_db
def test_a_push_of_5000_categories_costs_the_statements_of_a_push_of_10(
    shop_api, django_assert_max_num_queries
):
    """The lock, the named categories and their ancestors (a statement per level), the levels below
    the moved ones, one insert, one rename, one detach and one attach per level: the same for 5,000
    categories as for 10."""
    # given half of them known, flat, so that the push moves them
    Category.objects.bulk_create([Category(slug=f"k{i}", name="old") for i in range(0, 5000, 2)])
    shop_api.post(CATEGORIES, {"categories": []}, format="json")
    with CaptureQueriesContext(connection) as small:
        reply = _push(shop_api, CATEGORIES, _tree(10))
    assert reply["rejected"] == []

    with django_assert_max_num_queries(len(small)):
        reply = _push(shop_api, CATEGORIES, _tree(5000))

    assert reply == {"created": 2495, "updated": 2505, "rejected": []}
    assert Category.objects.filter(parent__isnull=False).count() == 5000 - 834  # all but the chains' tops
    assert Category.objects.get(slug="k4997").parent.slug == "k4996"


# --- names shown within a minute in every process -----------------------------------------------------


def _board_names(reply) -> list[str]:
    return [item["name"] for item in json.loads(reply)["items"]]


@pytest.mark.django_db
def test_a_pushed_name_shows_on_the_board_and_the_category_page(
    shop_api, client, django_capture_on_commit_callbacks
):
    # given a board and a page read, with the placeholder's name remembered
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    shop.send(shop.sale("p1", categories=["toys"], qty=2))
    shop.tick()
    assert _board_names(client.get("/v1/categories/toys/top").content) == ["p1"]
    assert "Wooden train" not in client.get("/c/toys/").content.decode()
    # when the shop pushes the product's name and the category's
    with django_capture_on_commit_callbacks(execute=True):
        _push(shop_api, PRODUCTS, [{"id": "p1", "name": "Wooden train"}])
        _push(shop_api, CATEGORIES, [{"slug": "toys", "name": "Toys and games", "parent": None}])
    # then both show on the board, the page and the list of categories within seconds
    processes.wait_until(
        lambda: _board_names(client.get("/v1/categories/toys/top").content) == ["Wooden train"],
        timeout=NAME_SHOWN_SECONDS,
        what="the pushed name on the board",
    )
    page = client.get("/c/toys/").content.decode()
    assert "Wooden train" in page and "Toys and games" in page
    listed = client.get("/v1/categories").json()["items"]
    assert {"slug": "toys", "name": "Toys and games"}.items() <= next(
        c for c in listed if c["slug"] == "toys"
    ).items()


def _get(address: str, path: str) -> bytes:
    conn = http.client.HTTPConnection(address, timeout=10)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        assert reply.status == 200, reply.status
        return reply.read()
    finally:
        conn.close()


@pytest.mark.django_db(transaction=True)
def test_a_pushed_name_reaches_another_process_that_remembered_the_old_one(tmp_path, django_user_model):
    """A web process that read a board remembers its names for up to a minute; a push makes every
    process forget them, so the new name shows there within seconds."""
    # given a board, read by another process (gunicorn), which now remembers the placeholder's name
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    shop.send(shop.sale("p1", categories=["toys"], qty=2))
    shop.tick()
    web = processes.web(tmp_path, processes.django_env(), workers=1)
    try:
        assert _board_names(_get(web.address, "/v1/categories/toys/top")) == ["p1"]
        # when the shop pushes the product's name through this process
        client = _client(_user_with(django_user_model, "shop", "change_product"))
        assert _push(client, PRODUCTS, [{"id": "p1", "name": "Wooden train"}])["updated"] == 1
        # then the other process shows it on the board and the page within seconds
        processes.wait_until(
            lambda: _board_names(_get(web.address, "/v1/categories/toys/top")) == ["Wooden train"],
            timeout=NAME_SHOWN_SECONDS,
            what="the pushed name on the other process's board",
            watch=[web],
        )
        assert "Wooden train" in _get(web.address, "/c/toys/").decode()
    finally:
        web.stop()

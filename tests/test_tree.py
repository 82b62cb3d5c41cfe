"""The category tree: a sale counts once in its categories and in every ancestor, with the tree of
the active version; a tree edit goes live through a rebuild and switch, whole, and a switch back
restores the old tree with its boards. Cycles and depths past six are refused everywhere."""

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction

from catalogue.models import Category
from rankings.engine.shards import active
from rankings.engine.tree import (
    Tree,
    active_tree,
    categories_expand,
    tree_affected,
    tree_pending,
    version_tree,
)
from rankings.operations import backfill
from rankings.serving import memory

from .rankings_helpers import Shop
from .test_reshard import PausedIngest, _sales

pytestmark = pytest.mark.django_db(transaction=True)


def _chain(n: int, prefix: str = "d") -> list[Category]:
    """n categories, each under the previous one: a tree n levels deep."""
    chain: list[Category] = []
    for i in range(n):
        chain.append(
            Category.objects.create(slug=f"{prefix}{i}", name=f"{prefix}{i}", parent=(chain or [None])[-1])
        )
    return chain


def _toys() -> None:
    toys = Category.objects.create(slug="toys", name="Toys")
    games = Category.objects.create(slug="board-games", name="Board games", parent=toys)
    Category.objects.create(slug="strategy", name="Strategy games", parent=games)
    Category.objects.create(slug="garden", name="Garden")


# --- refused: cycles and depth 7 ------------------------------------------------------------------


def test_the_model_refuses_a_cycle_with_a_clear_error():
    a, b, c = _chain(3)
    a.parent = c
    with pytest.raises(ValidationError, match=r"cycle \(d0 › d2 › d1 › d0\)"):
        a.full_clean()


def test_the_model_refuses_a_seventh_level():
    chain = _chain(6)
    seventh = Category(slug="d6", name="d6", parent=chain[-1])
    with pytest.raises(ValidationError, match="7 levels deep, at most 6 are allowed"):
        seventh.full_clean()
    chain[-1].full_clean()  # six levels are fine


def test_the_model_counts_the_levels_below_a_moved_category():
    """Moving a three-level subtree under a four-level chain makes seven levels: refused."""
    deep = _chain(4, "a")
    top, *_ = _chain(3, "b")
    top.parent = deep[-1]
    with pytest.raises(ValidationError, match="7 levels deep"):
        top.full_clean()


def test_the_database_refuses_a_cycle_whatever_writes_it():
    a, b, c = _chain(3)
    with pytest.raises(IntegrityError, match="that makes a cycle"), transaction.atomic():
        Category.objects.filter(pk=a.pk).update(parent=c)
    with pytest.raises(IntegrityError, match="that makes a cycle"), transaction.atomic():
        Category.objects.filter(pk=a.pk).update(parent=a)


def test_the_database_refuses_a_seventh_level_whatever_writes_it():
    chain = _chain(6)
    with pytest.raises(IntegrityError, match="7 levels deep, at most 6 are allowed"), transaction.atomic():
        Category.objects.create(slug="d6", name="d6", parent=chain[-1])
    top, *_ = _chain(2, "b")
    with pytest.raises(IntegrityError, match="levels deep"), transaction.atomic():
        Category.objects.filter(pk=top.pk).update(parent=chain[-1])


def test_the_admin_refuses_a_cycle_and_a_seventh_level(admin_client):
    chain = _chain(6)
    url = f"/admin/catalogue/category/{chain[0].pk}/change/"
    reply = admin_client.post(url, {"slug": "d0", "name": "d0", "parent": chain[5].pk})
    assert reply.status_code == 200
    assert "that makes a cycle" in reply.content.decode()
    reply = admin_client.post(
        "/admin/catalogue/category/add/", {"slug": "d6", "name": "d6", "parent": chain[5].pk}
    )
    assert reply.status_code == 200
    assert "7 levels deep, at most 6 are allowed" in reply.content.decode()
    assert Category.objects.get(slug="d0").parent is None
    assert not Category.objects.filter(slug="d6").exists()


def test_the_admin_lists_each_category_with_its_place_in_the_tree(admin_client):
    _toys()
    page = admin_client.get("/admin/catalogue/category/").content.decode()
    assert "toys › board-games › strategy" in page


def test_import_categories_refuses_a_cycle_or_a_seventh_level_and_writes_nothing(tmp_path):
    cycle = tmp_path / "cycle.csv"
    cycle.write_text("slug,name,parent\na,A,c\nb,B,a\nc,C,b\n")
    with pytest.raises(CommandError, match="line 2: .*that makes a cycle"):
        call_command("import_categories", str(cycle))
    deep = tmp_path / "deep.csv"
    deep.write_text("".join(f"l{i},Level {i},{f'l{i - 1}' if i else ''}\n" for i in range(7)))
    with pytest.raises(CommandError, match="7 levels deep, at most 6 are allowed"):
        call_command("import_categories", str(deep))
    assert not Category.objects.exists()


def test_import_categories_creates_and_moves_and_the_moves_are_pending(tmp_path, capsys):
    # given a flat catalogue
    Category.objects.create(slug="toys", name="toys", is_placeholder=True)
    Category.objects.create(slug="board-games", name="Board games")
    tree = tmp_path / "tree.csv"
    # children before their parents, a placeholder completed, a new category
    tree.write_text("strategy,Strategy games,board-games\nboard-games,Board games,toys\ntoys,Toys,\n")
    # when imported
    call_command("import_categories", str(tree))
    # then the catalogue holds the tree, and the move is pending until a rebuild and switch
    out = capsys.readouterr().out
    assert "1 categories created, 1 updated, 0 unchanged; 1 moved in the tree (pending" in out
    parents = dict(Category.objects.values_list("slug", "parent__slug"))
    assert parents == {"toys": None, "board-games": "toys", "strategy": "board-games"}
    assert not Category.objects.get(slug="toys").is_placeholder
    change = tree_pending()
    assert change.moved == [("board-games", None, "toys"), ("strategy", None, "board-games")]
    assert change.affected == ["board-games", "toys"]
    backfill.version_build(activate=True)
    assert not tree_pending().pending


# --- counting ---------------------------------------------------------------------------------------


def test_expanding_categories_adds_every_ancestor_once():
    tree = Tree({"strategy": "board-games", "board-games": "toys", "dolls": "toys"})
    assert tree.expand(["strategy", "toys"]) == ("strategy", "toys", "board-games")
    assert tree.expand(["dolls", "board-games"]) == ("dolls", "board-games", "toys")
    assert tree.expand(["garden"]) == ("garden",)
    assert categories_expand(["x"], tree=tree) == ("x",)


def test_the_categories_affected_by_a_move_are_those_whose_descendants_change():
    old = Tree({"strategy": "board-games", "board-games": "toys"})
    new = Tree({"strategy": "board-games", "board-games": "games"})
    # board-games keeps its descendants: its boards count the same sales under both trees
    assert tree_affected(old, new) == {"toys", "games"}
    assert tree_affected(old, old) == set()


def test_the_affected_categories_are_found_by_walking_up_from_the_moves_only():
    """At a million categories the versions page compares the trees on every load: finding the
    affected boards walks up from the moved categories, not from every category of both trees."""

    class CountingTree(Tree):
        walks = 0

        def ancestors(self, slug):
            CountingTree.walks += 1
            return super().ancestors(slug)

    parents = {f"c{i}": f"p{i % 100}" for i in range(100_000)} | {f"p{i}": "root" for i in range(100)}
    old = CountingTree(parents)
    new = CountingTree({**parents, "c7": "p8"})
    assert tree_affected(old, new) == {"p7", "p8"}
    assert CountingTree.walks <= 2


def test_a_sale_counts_once_in_each_ancestor_even_when_it_names_one():
    # given toys › board-games › strategy, frozen into the active version
    _toys()
    backfill.version_build(activate=True)
    shop = Shop()
    # when a sale names strategy and toys, and another board-games alone
    shop.send(
        shop.sale("p1", categories=["strategy", "toys"], qty=2),
        shop.sale("p2", categories=["board-games"], qty=1),
        shop.sale("p3", categories=["garden"], qty=5),
    )
    shop.tick()
    # then each counts once at every level above it, and nowhere else
    assert shop.top("strategy") == [("p1", 2)]
    assert shop.top("board-games") == [("p1", 2), ("p2", 1)]
    assert shop.top("toys") == [("p1", 2), ("p2", 1)]
    assert shop.top("garden") == [("p3", 5)]
    assert shop.top("all") == [("p3", 5), ("p1", 2), ("p2", 1)]
    shop.assert_exact()


def test_a_placeholder_category_counts_at_once_without_a_parent():
    _toys()
    backfill.version_build(activate=True)
    shop = Shop()
    shop.send(shop.sale("p1", categories=["new-thing", "strategy"], qty=1))
    shop.tick()
    assert Category.objects.get(slug="new-thing").parent is None
    assert shop.top("new-thing") == [("p1", 1)]
    assert shop.top("toys") == [("p1", 1)]
    assert not tree_pending().pending
    shop.assert_exact()


# --- going live ---------------------------------------------------------------------------------------


def _boards(shop: Shop) -> dict[str, list]:
    return {slug: shop.top(slug) for slug in ("toys", "board-games", "strategy", "garden", "all")}


def test_a_tree_edit_during_ingestion_counts_only_once_switched_to_and_a_switch_back_restores(monkeypatch):
    """Before the switch every board follows the old tree, after it the new one, exactly; switching
    back restores the old tree with its boards. A sale queued under the old tree while the switch
    runs is counted again under the new one."""
    # given toys › board-games › strategy, live, with sales ticked
    _toys()
    backfill.version_build(activate=True)
    old_version = active().number
    shop = Shop()
    shop.send(
        shop.sale("p1", categories=["strategy"], qty=3),
        shop.sale("p2", categories=["board-games", "toys"], qty=2),
        shop.sale("p3", categories=["garden"], qty=1),
    )
    shop.tick()
    before = _boards(shop)
    assert before["toys"] == [("p1", 3), ("p2", 2)]
    # when an editor moves board-games (with strategy) under garden, and sales keep coming
    games = Category.objects.get(slug="board-games")
    games.parent = Category.objects.get(slug="garden")
    games.full_clean()
    games.save()
    assert tree_pending().affected == ["garden", "toys"]
    shop.send(shop.sale("p4", categories=["strategy"], qty=4))
    shop.advance(seconds=10)
    shop.tick()
    # then nothing changes before the switch: the old tree still counts, exactly
    assert shop.top("toys") == [("p4", 4), ("p1", 3), ("p2", 2)]
    assert shop.top("garden") == [("p3", 1)]
    shop.assert_exact()
    # when a version is built with the new tree and switched to while an ingest queued under the old one
    version = backfill.version_build()
    assert active_tree().parents == {"strategy": "board-games", "board-games": "toys"}
    ingest = PausedIngest(monkeypatch, shop, _sales(shop, "late"))  # sells p0…p11 once each
    ingest.switch_meanwhile(version.number)
    # then every board follows the new tree, exactly, the late sales included once ticked
    assert active_tree().parents == {"strategy": "board-games", "board-games": "garden"}
    shop.assert_exact()
    assert shop.top("toys") == [("p2", 2)]  # p2 named toys itself
    assert shop.top("garden")[:3] == [("p4", 4), ("p1", 3), ("p2", 2)]
    shop.advance(seconds=10)
    shop.tick()
    shop.assert_exact()
    after = _boards(shop)
    # when switched back, then the old tree counts again, with its boards caught up, exactly
    backfill.version_switch(number=old_version)
    assert active_tree().parents == {"strategy": "board-games", "board-games": "toys"}
    shop.assert_exact()
    assert shop.top("toys")[:3] == [("p4", 4), ("p1", 3), ("p2", 2)]
    assert shop.top("garden")[0] == ("p3", 1)
    # and forward again: the new tree's boards as they were
    backfill.version_switch(number=version.number)
    shop.assert_exact()
    assert _boards(shop) == after


def test_a_tree_edit_and_a_reshard_go_live_together():
    from rankings.engine.shards import Layout, active

    _toys()
    backfill.version_build(activate=True)
    shop = Shop()
    shop.send(
        *[
            shop.sale(f"p{i}", categories=[["strategy"], ["garden"], ["toys"]][i % 3], qty=1 + i)
            for i in range(9)
        ]
    )
    shop.tick()
    Category.objects.filter(slug="strategy").update(parent=Category.objects.get(slug="garden"))
    version = backfill.version_build(layout=Layout(8), activate=True)
    assert (active().number, active().layout) == (version.number, Layout(8))
    shop.assert_exact()
    assert shop.top("garden") == [("p7", 8), ("p6", 7), ("p4", 5), ("p3", 4), ("p1", 2), ("p0", 1)]
    shop.advance(seconds=10)
    shop.send(shop.sale("p9", categories=["strategy"], qty=1))
    shop.tick()
    shop.assert_exact()


def test_the_versions_page_shows_the_pending_tree_and_offers_to_go_live(admin_client):
    _toys()
    backfill.version_build(activate=True)
    Category.objects.filter(slug="strategy").update(parent=Category.objects.get(slug="garden"))
    page = admin_client.get("/admin/rankings/rankingversion/").content.decode()
    assert "The category tree has pending edits" in page
    assert "<td>strategy</td><td>board-games</td><td>garden</td>" in page
    assert "Boards affected: those of 3 categories (board-games, garden, toys)" in page
    assert "Rebuild with this tree and switch" in page


# --- reads and pages ------------------------------------------------------------------------------------


def _shop_with_tree() -> Shop:
    """toys › board-games › strategy and garden, live; p1 a strategy game, p2 a board game."""
    from catalogue.models import Product

    _toys()
    backfill.version_build(activate=True)
    for product_id, name, slug in (
        ("p1", "Go", "strategy"),
        ("p2", "Ludo", "board-games"),
        ("p3", "Rake", "garden"),
    ):
        Product.objects.create(product_id=product_id, name=name, price_cents=100).categories.set(
            [Category.objects.get(slug=slug)]
        )
    shop = Shop()
    shop.send(
        shop.sale("p1", categories=[], qty=3),
        shop.sale("p2", categories=[], qty=5),
        shop.sale("p3", categories=[]),
    )
    shop.tick()
    return shop


def test_the_category_list_carries_parent_and_path(api):
    _shop_with_tree()
    items = {item["slug"]: item for item in api.get("/v1/categories").json()["items"]}
    assert (items["all"]["parent"], items["all"]["path"]) == (None, ["all"])
    assert (items["toys"]["parent"], items["toys"]["path"]) == (None, ["toys"])
    assert (items["strategy"]["parent"], items["strategy"]["path"]) == (
        "board-games",
        ["toys", "board-games", "strategy"],
    )


def test_the_category_list_follows_the_tree_that_counts_not_a_pending_edit(api):
    """A move waits for its rebuild and switch: until then the list shows the tree the boards count with."""

    _shop_with_tree()
    Category.objects.filter(slug="strategy").update(parent=Category.objects.get(slug="garden"))
    memory.forget_all("categories")
    items = {item["slug"]: item for item in api.get("/v1/categories").json()["items"]}
    assert items["strategy"]["parent"] == "board-games"
    backfill.version_build(activate=True)
    memory.forget_all("categories")
    items = {item["slug"]: item for item in api.get("/v1/categories").json()["items"]}
    assert items["strategy"]["path"] == ["garden", "strategy"]


def test_the_category_page_shows_breadcrumbs_and_sub_categories_with_their_leaders(client):
    _shop_with_tree()
    page = client.get("/c/board-games/")
    html = page.content.decode()
    assert [c["name"] for c in page.context["crumbs"]] == ["Toys"]
    assert '<a href="/c/toys/">Toys</a>' in html
    assert [(s["name"], s["leader"].item.name) for s in page.context["subcategories"]] == [
        ("Strategy games", "Go")
    ]
    # the board of board-games counts the strategy game too
    assert [row.item.name for row in page.context["items"]] == ["Ludo", "Go"]
    deep = client.get("/c/strategy/")
    assert [c["name"] for c in deep.context["crumbs"]] == ["Toys", "Board games"]
    assert deep.context["subcategories"] == []


def test_the_product_page_shows_a_badge_at_every_level(client):
    _shop_with_tree()
    badges = [(b["category"], b["rank"]) for b in client.get("/p/p1/").context["badges"]]
    assert badges == [("all", 2), ("strategy", 1), ("board-games", 2), ("toys", 2)]


def test_the_home_page_shows_the_top_level(client):
    _shop_with_tree()
    cards = client.get("/").context["categories"]
    assert [c["slug"] for c in cards] == ["garden", "toys"]


def test_the_compare_page_says_which_boards_a_tree_switch_counts_again(admin_client):
    _toys()
    backfill.version_build(activate=True)
    Category.objects.filter(slug="strategy").update(parent=Category.objects.get(slug="garden"))
    version = backfill.version_build()
    page = admin_client.get(f"/admin/rankings/rankingversion/{version.number}/compare/").content.decode()
    assert "strategy under garden (now board-games)" in page
    assert "The boards of board-games, garden, toys are counted again" in page


def test_a_version_made_after_its_tree_was_asked_for_counts_with_its_own():
    """A version's tree is read once a process, but a number without a row is asked again: a
    rebuild's row may be made after something asked for it."""
    from rankings.models import RankingVersion

    # given a number asked for before its version exists
    assert version_tree(7) == Tree({})
    # when the version is made with a tree
    RankingVersion.objects.create(
        number=7, state=RankingVersion.State.BUILDING, shards=1, tree={"cars": "toys"}
    )
    # then its tree is the one it counts with
    assert version_tree(7).expand(["cars"]) == ("cars", "toys")


def test_a_number_made_again_with_another_tree_counts_with_the_new_one():
    """A restore to an earlier point forgets the versions made after it, and the next rebuild takes
    one of their numbers again: the tree read for the old one is not the new one's."""
    from rankings.models import RankingVersion

    # given version 7 counted with a tree
    RankingVersion.objects.create(
        number=7, state=RankingVersion.State.BUILDING, shards=1, tree={"cars": "toys"}
    )
    assert version_tree(7).expand(["cars"]) == ("cars", "toys")
    # when the database forgets it and a rebuild makes 7 again with another tree
    RankingVersion.objects.filter(number=7).delete()
    RankingVersion.objects.create(
        number=7, state=RankingVersion.State.BUILDING, shards=1, tree={"cars": "vehicles"}
    )
    # then the new tree is the one it counts with
    assert version_tree(7).expand(["cars"]) == ("cars", "vehicles")

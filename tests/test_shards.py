"""Who owns a board's shard, and which boards a sale counts in: never the catalogue, never a setting alone.

The shard count belongs to the active version (stored in PostgreSQL, mirrored
in Redis for readers); the work queue carries the categories each shard counts
a sale in, so the tick never looks the catalogue up; categories with sales are
never deleted.
"""

import threading
import time
import zlib

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.db import connection, transaction
from django.db.models import ProtectedError
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from catalogue.models import Category
from rankings.engine import store
from rankings.engine.shards import ShardCountMismatch
from rankings.models import PendingSale, RankingVersion, Sale
from rankings.operations import backfill
from rankings.serving import memory, selectors

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db

# Categories of which some fall in another shard when the count goes from 4 to 8.
CATEGORIES = ["toys", "books", "garden", "games", "music", "tools"]
MISMATCH = "RANKINGS_SHARDS=8 but the active version 1 has 4 shards; change the count with a rebuild"


def _shards(settings, count: int) -> None:
    # A new dict: the settings fixture restores attributes, not changes inside them.
    settings.RANKINGS = {**settings.RANKINGS, "SHARDS": count}


def _moved(slug: str) -> bool:
    return zlib.crc32(slug.encode()) % 4 != zlib.crc32(slug.encode()) % 8


def _sell_in_every_category(shop: Shop, tag: str) -> None:
    shop.send(
        *[
            shop.sale(
                f"p{i % 3}", categories=[slug, CATEGORIES[(i + 1) % len(CATEGORIES)]], event_id=f"{tag}-{i}"
            )
            for i, slug in enumerate(CATEGORIES)
        ]
    )


def _delete_behind_the_guards_back(slug: str) -> None:
    """What an operator could do in psql: no signal, no admin, only the row going."""
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM catalogue_product_categories WHERE category_id IN "
            "(SELECT id FROM catalogue_category WHERE slug = %s)",
            [slug],
        )
        cursor.execute("DELETE FROM catalogue_category WHERE slug = %s", [slug])


# --- point 7: a deleted category ------------------------------------------------------------


def test_the_tick_counts_the_pending_sales_of_a_deleted_category():
    """The queue row names the categories the sale counts in: a category gone from the
    catalogue still gets its pending sales, and the recompute agrees with Redis."""
    # given a board with one counted sale and two pending ones
    shop = Shop()
    shop.send(shop.sale("p1", categories=["toys"]))
    shop.tick()
    shop.send(shop.sale("p1", categories=["toys"]), shop.sale("p2", categories=["toys", "books"]))
    # when the category disappears from the catalogue before the tick
    _delete_behind_the_guards_back("toys")
    shop.tick()
    # then the tick counted both, and the engines agree
    assert shop.top("toys") == [("p1", 2), ("p2", 1)]
    assert shop.top("books") == [("p2", 1)]
    shop.assert_exact()


def test_a_category_with_sales_cannot_be_deleted_through_the_orm():
    """Sales name categories by slug, forever: deleting one would orphan its boards."""
    shop = Shop()
    shop.send(shop.sale("p1", categories=["toys"]))

    # (each in a savepoint: a refused delete, like a violated constraint, breaks its transaction)
    with pytest.raises(ProtectedError, match="has sales and cannot be deleted"), transaction.atomic():
        Category.objects.get(slug="toys").delete()
    with pytest.raises(ProtectedError, match="has sales and cannot be deleted"), transaction.atomic():
        Category.objects.filter(slug="toys").delete()

    assert Category.objects.filter(slug="toys").exists()


def test_a_category_named_only_by_a_sale_is_protected_too():
    """A catalogue category that a sale names (not a placeholder) is marked when the sale arrives."""
    Category.objects.create(slug="toys", name="Toys")
    shop = Shop()
    shop.send(shop.sale("p1", categories=["toys"]))

    with pytest.raises(ProtectedError), transaction.atomic():
        Category.objects.get(slug="toys").delete()


def test_a_category_without_sales_can_be_deleted():
    Category.objects.create(slug="toys", name="Toys")

    Category.objects.get(slug="toys").delete()

    assert not Category.objects.filter(slug="toys").exists()


def test_the_admin_refuses_to_delete_a_category_with_sales(admin_client):
    # given
    shop = Shop()
    shop.send(shop.sale("p1", categories=["toys"]))
    url = reverse("admin:catalogue_category_delete", args=[Category.objects.get(slug="toys").pk])
    # when
    page = admin_client.get(url)
    posted = admin_client.post(url, {"post": "yes"})
    # then
    assert page.status_code == 200
    assert "a category that has sales cannot be deleted" in page.content.decode()
    assert posted.status_code == 200
    assert Category.objects.filter(slug="toys").exists()


def test_the_admins_bulk_delete_refuses_categories_with_sales(admin_client):
    # given one category with sales and one without
    shop = Shop()
    shop.send(shop.sale("p1", categories=["toys"]))
    Category.objects.create(slug="spare", name="Spare")
    ids = list(Category.objects.values_list("pk", flat=True))
    # when both are deleted at once
    reply = admin_client.post(
        reverse("admin:catalogue_category_changelist"),
        {"action": "delete_selected", "_selected_action": ids, "post": "yes"},
    )
    # then nothing is deleted, and the page says why
    assert reply.status_code == 200
    assert "a category that has sales cannot be deleted" in reply.content.decode()
    assert Category.objects.count() == 2


# --- point 8: the shard count belongs to the active version --------------------------------


def test_a_fresh_install_records_the_setting_as_the_active_versions_shard_count(settings):
    _shards(settings, 3)

    Shop().send(Shop().sale("p1"))

    version = RankingVersion.objects.get(number=1)
    assert (version.state, version.shards) == (RankingVersion.State.ACTIVE, 3)


def test_a_changed_shard_setting_stops_the_tick_and_loses_no_sale(settings):
    """Ingested with 4 shards, ticked with the setting at 8: refused, nothing claimed; back at 4, exact."""
    # given sales counted with 4 shards, and more pending
    _shards(settings, 4)
    shop = Shop()
    _sell_in_every_category(shop, "a")
    shop.tick()
    _sell_in_every_category(shop, "b")
    pending = sorted(PendingSale.objects.values_list("shard", "sale_id"))
    # when the setting changes
    _shards(settings, 8)
    # then the tick refuses with the reason, and the queue is untouched
    with pytest.raises(ShardCountMismatch, match=MISMATCH):
        shop.tick()
    with pytest.raises(CommandError, match=MISMATCH):
        call_command("rankings_tick", "--now", shop.now.isoformat())
    assert sorted(PendingSale.objects.values_list("shard", "sale_id")) == pending
    # and when it is restored, every sale is on its boards
    _shards(settings, 4)
    shop.tick()
    assert not PendingSale.objects.exists()
    for slug in CATEGORIES:
        assert sum(score for _, score in shop.top(slug)) == 4
    assert sum(score for _, score in shop.top("all")) == 2 * len(CATEGORIES)
    shop.assert_exact()


def test_ingest_refuses_with_503_while_the_shard_setting_disagrees(settings, ingest_api):
    # given a version built with 4 shards
    _shards(settings, 4)
    shop = Shop()
    shop.send(shop.sale("p1"))
    # when the setting changes and a batch arrives
    _shards(settings, 8)
    reply = ingest_api.post("/v1/sales", {"events": [shop.sale("p2")]}, format="json")
    # then it is refused whole, with the reason
    assert reply.status_code == 503
    assert reply.json() == {"error": MISMATCH}
    assert Sale.objects.count() == 1


def test_manage_py_check_reports_a_shard_setting_that_disagrees(settings):
    _shards(settings, 4)
    Shop().send(Shop().sale("p1"))
    call_command("check")  # agrees: nothing to report

    _shards(settings, 8)
    with pytest.raises(SystemCheckError, match=MISMATCH):
        call_command("check")


def test_readers_find_each_board_by_the_active_versions_shard_count(settings):
    """A reader whose setting disagrees still reads the boards where the version keeps them."""
    assert any(_moved(slug) for slug in CATEGORIES)
    _shards(settings, 4)
    shop = Shop()
    _sell_in_every_category(shop, "a")
    shop.tick()

    _shards(settings, 8)
    memory.forget_all()
    for slug in CATEGORIES:
        board = selectors.board_top(category=slug, window="7d", metric="units", limit=10, offset=0)
        assert sum(item.units for item in board.items) == 2, slug


@pytest.mark.django_db(transaction=True)
def test_a_rebuild_keeps_the_active_versions_shard_count(settings):
    # given a version of 4 shards, and a setting that says 8
    _shards(settings, 4)
    shop = Shop()
    _sell_in_every_category(shop, "a")
    shop.tick()
    _shards(settings, 8)
    # when a rebuild is switched to
    version = backfill.version_build(activate=True)
    # then it has the 4 shards of the version it replaced, and serves the same boards
    assert version.shards == 4
    assert store.served_version(fresh=True) == version.number
    _shards(settings, 4)
    shop.assert_exact()


def test_readers_take_the_shard_count_from_redis_without_asking_postgresql(settings):
    # given boards ticked with 4 shards, and a reader that has not yet seen the count
    _shards(settings, 4)
    shop = Shop()
    _sell_in_every_category(shop, "a")
    shop.tick()
    selectors.board_top(category="toys", window="7d", metric="units", limit=10, offset=0)
    store.reset_clients()
    memory.forget_all("answers")
    # when it reads a board
    with CaptureQueriesContext(connection) as queries:
        board = selectors.board_top(category="books", window="7d", metric="units", limit=10, offset=0)
    # then the count came from Redis
    assert sum(item.units for item in board.items) == 2
    assert not [q for q in queries.captured_queries if "rankings_rankingversion" in q["sql"]]


def test_readers_fall_back_to_postgresql_when_redis_lost_the_count(settings, redis_client):
    # given boards ticked with 4 shards, then the count's key lost
    _shards(settings, 4)
    shop = Shop()
    _sell_in_every_category(shop, "a")
    shop.tick()
    redis_client.delete(store.shards_key(1))
    store.reset_clients()
    _shards(settings, 8)
    # when a board is read, then it is found by the count PostgreSQL records
    for slug in CATEGORIES:
        board = selectors.board_top(category=slug, window="7d", metric="units", limit=10, offset=0)
        assert sum(item.units for item in board.items) == 2, slug


def test_a_board_is_unavailable_rather_than_misplaced_when_no_count_is_known(redis_client):
    # given a tick's boards, then the count lost in Redis and unknown to PostgreSQL
    shop = Shop()
    shop.send(shop.sale("p1"))
    shop.tick()
    redis_client.delete(store.shards_key(1))
    store.reset_clients()
    RankingVersion.objects.all().delete()
    # when read, then the board is reported unavailable, not read from a guessed shard
    with pytest.raises(selectors.Unavailable):
        selectors.board_top(category="toys", window="7d", metric="units", limit=10, offset=0)


@pytest.mark.django_db(transaction=True)
def test_a_category_deleted_while_its_first_sale_is_stored_comes_back_marked():
    """A delete that goes first (the category had no sales yet) cannot leave a sale naming
    a category that is gone: ingest waits for it, then creates the category again."""
    # given a category without sales, being deleted in another transaction that has not committed
    Category.objects.create(slug="toys", name="Toys")
    deleting, errors = threading.Event(), []

    def delete_then_commit_later():
        try:
            with transaction.atomic():
                Category.objects.filter(slug="toys").delete()
                deleting.set()
                time.sleep(0.5)  # the ingest below is waiting on the row meanwhile
        except Exception as error:  # reported below, in the test's thread
            errors.append(error)
            deleting.set()
        finally:
            connection.close()

    other = threading.Thread(target=delete_then_commit_later)
    other.start()
    deleting.wait(5)
    # when its first sale is stored
    shop = Shop()
    shop.send(shop.sale("p1", categories=["toys"]))
    other.join()
    # then the category exists again, marked, and keeps its sales from now on
    assert not errors
    toys = Category.objects.get(slug="toys")
    assert (toys.is_placeholder, toys.has_sales) == (True, True)

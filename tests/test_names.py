"""Redis's copy of the product names (rankings/engine/store/names.py): mended from the catalogue after
a push, after every edit the catalogue's triggers list, and by a walk over every product; read by the
reads that name products at random."""

import datetime as dt

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalogue.models import Category, Product
from rankings.engine import names_copy, store
from rankings.engine.shards import ALL, active, layout_plan, version_layout
from rankings.engine.store import names as names_store
from rankings.engine.store.names import bucket_of, names_key
from rankings.models import NameChange, RankingVersion
from rankings.operations.backfill import version_build
from rankings.serving import catalogue_reads, memory

from .rankings_helpers import Shop
from .redis_round_trips import RedisRoundTrips
from .test_catalogue_api import PRODUCTS, _client, _push, _user_with

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shop_api(django_user_model):
    return _client(_user_with(django_user_model, "shop", "change_product", "change_category"))


def _catalogue_queries(queries) -> list[str]:
    return [q["sql"] for q in queries if "catalogue_product" in q["sql"]]


def _held(*product_ids: str) -> dict:
    """What Redis's shared copy holds of each product, None for nothing."""
    head = store.names_head()
    return {p: name for (_, p), name in store.names_held([(head, p) for p in product_ids]).items()}


def _plant(redis_client, names: dict) -> None:
    """Names written into Redis's copy behind the catalogue's back (an edit it missed)."""
    for product_id, name in names.items():
        redis_client.hset(names_key(bucket_of(product_id)), product_id, name)


def _listed() -> list[str]:
    return sorted(NameChange.objects.values_list("product_id", flat=True))


def _neighbours(api, product_id: str, category: str = "toys") -> list[tuple[str, str]]:
    memory.forget_all()  # no name, no answer remembered: the read asks Redis or the catalogue
    reply = api.get(f"/v1/products/{product_id}/neighbors?category={category}&n=2")
    assert reply.status_code == 200, reply.content
    return [(item["productId"], item["name"]) for item in reply.json()["items"]]


def _drums(count: int, first: int = 0) -> None:
    Product.objects.bulk_create(
        [
            Product(product_id=f"p{i:02}", name=f"Drum {i}", price_cents=100)
            for i in range(first, first + count)
        ]
    )


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

    # and a name pushed again is the one read next, with no walk or copy of changes run
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


def test_a_read_finds_each_name_in_the_bucket_its_writers_put_it_in(redis_client, api):
    """On one server a board's script finds its members' buckets itself (lua/names_of.lua): the
    bucket it computes must be the one rankings.engine.store.names gave each name."""
    # given 101 ranked products of ids of every length, whose names only Redis's copy holds
    ids = [f"p{i}-{'x' * (i % 40)}" for i in range(101)]
    toys = Category.objects.create(slug="toys", name="Toys")
    Product.objects.bulk_create([Product(product_id=pid, name="Drum", price_cents=100) for pid in ids])
    for product in Product.objects.all():
        product.categories.set([toys])
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    shop.send(*(shop.sale(pid, qty=i + 1) for i, pid in enumerate(ids)))
    shop.tick()
    _plant(redis_client, {pid: f"Kite {pid}" for pid in ids})

    # when the neighbours of the middle one are read
    memory.forget_all()
    with CaptureQueriesContext(connection) as queries:
        reply = api.get(f"/v1/products/{ids[50]}/neighbors?category=toys&n=50")

    # then every name is the copy's: none was missed and read from the catalogue
    assert reply.status_code == 200, reply.content
    assert sorted(item["name"] for item in reply.json()["items"]) == sorted(f"Kite {pid}" for pid in ids)
    assert _catalogue_queries(queries) == []


def test_with_redis_unreachable_names_are_read_from_the_catalogue(monkeypatch):
    _drums(2)

    def unreachable(*args, **kwargs):
        raise store.Unreachable("Redis does not answer")

    monkeypatch.setattr(store, "names_read", unreachable)
    memory.forget_all()
    assert catalogue_reads.product_names(["p00", "p01"]) == {"p00": "Drum 0", "p01": "Drum 1"}


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda: Product.objects.get(product_id="p01").save(), id="a save of the same name"),
        pytest.param(lambda: Product.objects.filter(product_id="p01").update(price_cents=5), id="a price"),
    ],
)
def test_an_edit_that_leaves_every_name_as_it_was_lists_nothing(edit):
    _drums(2)
    edit()
    assert _listed() == []


def test_every_edit_of_a_name_whoever_makes_it_is_copied_within_a_run_of_the_changes_copy(redis_client):
    # given names in Redis's copy, as the walk wrote them
    _drums(4)
    names_copy.names_copy()
    # when names are edited by a save (the admin), by a bulk update, by plain SQL, and a product deleted
    product = Product.objects.get(product_id="p00")
    product.name = "Drum, red"
    product.save()
    Product.objects.filter(product_id="p01").update(name="Drum, blue")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE catalogue_product SET name = 'Drum, green' WHERE product_id = 'p02'")
    Product.objects.filter(product_id="p03").delete()
    # then each is listed, in its own transaction, and one run copies them all
    assert _listed() == ["p00", "p01", "p02", "p03"]
    assert names_copy.names_changes_copy() == 4
    assert _held("p00", "p01", "p02", "p03") == {
        "p00": "Drum, red",
        "p01": "Drum, blue",
        "p02": "Drum, green",
        "p03": None,
    }
    assert _listed() == []


def test_a_product_given_another_id_lists_both_ids(redis_client):
    _drums(1)
    names_copy.names_copy()
    Product.objects.filter(product_id="p00").update(product_id="q00")
    assert _listed() == ["p00", "q00"]
    names_copy.names_changes_copy()
    assert _held("p00", "q00") == {"p00": None, "q00": "Drum 0"}


def test_a_push_lists_the_products_it_renamed_only(shop_api):
    _push(shop_api, PRODUCTS, [{"id": "p1", "name": "Kite"}, {"id": "p2", "name": "Drum"}])
    assert _listed() == []  # new products: the push copied their names itself
    _push(shop_api, PRODUCTS, [{"id": "p1", "name": "Kite"}, {"id": "p2", "name": "Drum, red"}])
    assert _listed() == ["p2"]


def test_an_edit_still_open_while_the_changes_are_copied_is_copied_by_a_later_run():
    """A product listed by an earlier edit and edited again in a transaction still open: a run
    meanwhile passes it over, and the edit is copied once it commits, never taken and lost."""
    _drums(1)
    Product.objects.filter(product_id="p00").update(name="Drum, red")  # listed, not copied yet
    editor = psycopg.connect(**_conninfo(), autocommit=False)
    try:
        editor.execute("UPDATE catalogue_product SET name = 'Drum, blue' WHERE product_id = 'p00'")
        assert names_copy.names_changes_copy() == 0  # the row the edit holds is passed over
        editor.commit()
    finally:
        editor.close()
    assert _listed() == ["p00"]
    names_copy.names_changes_copy()
    assert _held("p00") == {"p00": "Drum, blue"}


def _conninfo() -> dict:
    db = connection.settings_dict
    return {
        "dbname": db["NAME"],
        "user": db["USER"],
        "host": db["HOST"] or None,
        "port": db["PORT"] or None,
        "password": db["PASSWORD"] or None,
    }


def test_a_name_redis_changed_while_the_changes_were_copied_is_kept_and_listed_again(
    redis_client, monkeypatch
):
    _drums(2)
    Product.objects.filter(product_id__in=["p00", "p01"]).update(name="Drum, red")
    real = store.names_held

    def then_a_newer_write(ids):
        held = real(ids)
        _plant(redis_client, {"p00": "Drum, newer"})  # written between the run's two reads
        return held

    monkeypatch.setattr(store, "names_held", then_a_newer_write)
    changed = names_copy.names_changes_copy()

    assert changed == 1
    assert _held("p00", "p01") == {"p00": "Drum, newer", "p01": "Drum, red"}
    assert _listed() == ["p00"]  # judged again at the next run
    monkeypatch.undo()
    names_copy.names_changes_copy()
    assert _held("p00") == {"p00": "Drum, red"} and _listed() == []


def test_the_walk_copies_what_bulk_paths_made_mends_stale_names_and_prunes_deleted_products(redis_client):
    _drums(5)
    _plant(redis_client, {"p01": "an old name", "gone": "a deleted product's"})  # Redis missed two edits

    total = names_copy.names_copy()

    assert _held("p00", "p01", "p04", "gone") == {
        "p00": "Drum 0",
        "p01": "Drum 1",
        "p04": "Drum 4",
        "gone": None,
    }
    assert (total.products, total.mended, total.pruned, total.buckets) == (5, 5, 1, store.NAMES_BUCKETS)


def test_the_walk_keeps_a_name_written_between_its_two_reads(redis_client, monkeypatch):
    _drums(2)
    _plant(redis_client, {"p00": "an old name"})
    real = store.names_held

    def then_a_push(ids):
        held = real(ids)
        _plant(redis_client, {"p00": "Drum, pushed"})  # a push's, written after its commit
        return held

    monkeypatch.setattr(store, "names_held", then_a_push)
    names_copy.names_walk(after="", bucket=0, products=10, buckets=0)

    assert _held("p00", "p01") == {"p00": "Drum, pushed", "p01": "Drum 1"}


def test_each_step_of_the_walk_reads_a_bounded_number_of_products_and_buckets():
    _drums(25)
    steps = [names_copy.names_walk(after="", bucket=0, products=10, buckets=1000)]
    while not steps[-1].products_wrapped:
        step = steps[-1]
        steps.append(names_copy.names_walk(after=step.after, bucket=step.bucket, products=10, buckets=1000))

    # three steps of at most ten products each, and a thousand buckets each, from where the last stopped
    assert [(s.products, s.buckets, s.after, s.bucket) for s in steps] == [
        (10, 1000, "p09", 1000),
        (10, 1000, "p19", 2000),
        (5, 1000, "", 3000),
    ]
    assert _held("p00", "p24") == {"p00": "Drum 0", "p24": "Drum 24"}


def test_the_beat_steps_go_on_where_they_stopped_and_the_command_walks_everything(capsys):
    _drums(3)
    store.names_walk_set(product="p01", bucket=7)  # where the beat's steps stand

    call_command("names_copy")

    assert "3 products read, 3 names written" in capsys.readouterr().out
    assert _held("p00", "p02") == {"p00": "Drum 0", "p02": "Drum 2"}
    assert store.names_walk_read() == ("p01", 7)  # the command walked on its own
    step = names_copy.names_step()
    assert (step.products, step.after, step.bucket) == (1, "", 7 + names_copy.PRUNE_BUCKETS)
    assert store.names_walk_read() == ("", 7 + names_copy.PRUNE_BUCKETS)


# --- a split board's parts keep their members' names -------------------------------------------


def _split_all(parts: int = 3) -> int:
    """`all` split `parts` ways by a rebuild switched to, as an operator splits it; the version."""
    return version_build(layout=layout_plan(active().layout, split={ALL: parts}), activate=True).number


def _part_heads(version: int, product_ids) -> dict[str, str]:
    """The head of the copy of each product's part of `all` in `version`."""
    layout = version_layout(version)
    return {p: store.part_names_head(version, layout.shard_of(layout.board_of(ALL, p))) for p in product_ids}


def _part_held(version: int, *product_ids: str) -> dict:
    """What each product's part of `all` in `version` holds of its name, None for nothing."""
    heads = _part_heads(version, product_ids)
    return {p: name for (_, p), name in store.names_held([(heads[p], p) for p in product_ids]).items()}


def _plant_part(redis_client, version: int, names: dict, *, part_of: str | None = None) -> None:
    """Names written into the copy of a product's part (of `part_of`'s part) behind the writers' back."""
    for product_id, name in names.items():
        head = _part_heads(version, [part_of or product_id])[part_of or product_id]
        redis_client.hset(names_key(bucket_of(product_id), head), product_id, name)


def _kites(shop_api, count: int) -> list[str]:
    """`count` products pushed by a shop's catalogue sync, sold and ticked; their ids."""
    ids = [f"p{i:02}" for i in range(count)]
    _push(
        shop_api,
        PRODUCTS,
        [{"id": p, "name": f"Kite {i}", "categories": ["toys"]} for i, p in enumerate(ids)],
    )
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    shop.send(*(shop.sale(p, categories=["toys"], qty=i + 1) for i, p in enumerate(ids)))
    shop.tick()
    return ids


def test_a_split_boards_neighbours_are_named_by_the_calls_that_read_its_parts(
    shop_api, api, redis_client, monkeypatch
):
    # given twelve products pushed and sold, then `all` split 3 ways by a rebuild
    ids = _kites(shop_api, 12)
    version = _split_all()
    assert len(set(_part_heads(version, ids).values())) == 3
    # then the rebuild copied each name into the part that holds its product
    assert _part_held(version, *ids) == {p: f"Kite {i}" for i, p in enumerate(ids)}

    # and one name marked in its part's copy, to tell which copy a read names it from
    _plant_part(redis_client, version, {"p08": "Kite 8, from its part"})

    # when a product's neighbours in `all` are read by a process that remembers no name
    _neighbours(api, "p06", ALL)  # each script known to every node
    counted = RedisRoundTrips(monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        items = _neighbours(api, "p06", ALL)
    # then the calls that read the parts named the rows, on a Redis Cluster from the parts' own
    # copies (on one server, from the shared one): no round trip more than a split rank's (one on
    # one server, two on a cluster), and no catalogue query
    eighth = "Kite 8, from its part" if store.clustered() else "Kite 8"
    assert items == [("p08", eighth), *((f"p{i:02}", f"Kite {i}") for i in (7, 6, 5, 4))]
    assert _catalogue_queries(queries) == []
    assert counted.count == (2 if store.clustered() else 1)


def test_a_split_board_whose_parts_lack_a_name_names_its_rows_from_the_shared_copy(
    shop_api, api, redis_client
):
    # given a split board one of whose parts lacks the name of a row a read keeps (a Redis that lost
    # it, until the walk passes)
    _kites(shop_api, 12)
    version = _split_all()
    head = _part_heads(version, ["p05"])["p05"]
    redis_client.hdel(names_key(bucket_of("p05"), head), "p05")
    assert _part_held(version, "p05", "p06") == {"p05": None, "p06": "Kite 6"}

    # when a product's neighbours are read
    with CaptureQueriesContext(connection) as queries:
        items = _neighbours(api, "p06", ALL)
    # then the names came from the shared copy: the catalogue was not asked
    assert items == [(f"p{i:02}", f"Kite {i}") for i in (8, 7, 6, 5, 4)]
    assert _catalogue_queries(queries) == []


def test_every_writer_of_the_names_mends_the_parts_copies_too(shop_api, redis_client):
    ids = _kites(shop_api, 6)
    _push(shop_api, PRODUCTS, [{"id": "p90", "name": "Kite 90"}])  # never sold: it may be deleted
    version = _split_all()

    # a push, once it commits
    _push(shop_api, PRODUCTS, [{"id": "p05", "name": "Kite, blue"}])
    assert _part_held(version, "p05") == {"p05": "Kite, blue"}
    # an edit by any other writer, at the next run of the changes' copy
    Product.objects.filter(product_id="p04").update(name="Kite, red")
    Product.objects.filter(product_id="p90").delete()
    names_copy.names_changes_copy()
    assert _part_held(version, "p90", "p04") == {"p90": None, "p04": "Kite, red"}
    # the walk: a stale name mended, and a name of a product the catalogue lacks pruned, in a part
    _plant_part(redis_client, version, {"p02": "an old name", "gone": "a deleted product's"})
    total = names_copy.names_copy()
    assert _part_held(version, "p02", "gone") == {"p02": "Kite 2", "gone": None}
    assert (total.pruned, total.mended) == (1, 1)
    assert _part_held(version, *ids[:3]) == {"p00": "Kite 0", "p01": "Kite 1", "p02": "Kite 2"}


def test_the_parts_of_every_kept_version_and_every_split_category_are_mended(shop_api):
    # given `all` and `toys` split by a rebuild, then by another: the first version retired, kept
    _kites(shop_api, 6)
    versions = [
        version_build(layout=layout_plan(active().layout, split={ALL: 3, "toys": 2}), activate=True).number
        for _ in range(2)
    ]
    assert RankingVersion.objects.get(number=versions[0]).state == RankingVersion.State.RETIRED

    # when a name is pushed
    _push(shop_api, PRODUCTS, [{"id": "p03", "name": "Kite, green"}])

    # then each version's part of each split category holds it
    for version in versions:
        layout = version_layout(version)
        heads = [
            store.part_names_head(version, layout.shard_of(layout.board_of(category, "p03")))
            for category in (ALL, "toys")
        ]
        assert len(set(heads)) == 2
        assert store.names_held([(head, "p03") for head in heads]) == {
            (head, "p03"): "Kite, green" for head in heads
        }


def test_a_name_a_part_changed_while_the_changes_were_copied_is_kept_and_listed_again(
    shop_api, redis_client, monkeypatch
):
    _kites(shop_api, 2)
    version = _split_all()
    Product.objects.filter(product_id__in=["p00", "p01"]).update(name="Kite, red")
    real = store.names_held

    def then_a_newer_write(copies):
        held = real(copies)
        _plant_part(redis_client, version, {"p00": "Kite, newer"})  # written between the run's two reads
        return held

    monkeypatch.setattr(store, "names_held", then_a_newer_write)
    names_copy.names_changes_copy()

    assert _part_held(version, "p00", "p01") == {"p00": "Kite, newer", "p01": "Kite, red"}
    assert _held("p00") == {"p00": "Kite, red"}
    assert _listed() == ["p00"]  # judged again at the next run, in every copy
    monkeypatch.undo()
    names_copy.names_changes_copy()
    assert _part_held(version, "p00") == {"p00": "Kite, red"} and _listed() == []


def test_a_rebuilds_fill_writes_a_part_in_a_call_whatever_buckets_its_names_fall_in(monkeypatch):
    # given 200 products, their names in nearly as many buckets, and `all` split 3 ways by a rebuild
    _drums(200)
    ids = [f"p{i:02}" for i in range(200)]
    assert len({bucket_of(p) for p in ids}) > 190
    version = _split_all()
    assert _part_held(version, "p00", "p199") == {"p00": "Drum 0", "p199": "Drum 199"}

    # when the fill runs again, every command it sends Redis counted
    sent = []
    real = names_store.scripts_run

    def counted(calls, *, commands=(), client=None):
        sent.append(len(calls) + len(commands))
        return real(calls, commands=commands, client=client)

    monkeypatch.setattr(names_store, "scripts_run", counted)
    written = names_copy.names_parts_fill(version)

    # then each part's names were read in one command and mended in one call, on a Redis Cluster
    # too, whose calls reach one slot: every bucket of a part's copy shares the part's
    assert written == 0
    assert sum(sent) <= 2 * 3


def test_a_versions_parts_names_go_with_the_version(shop_api):
    _kites(shop_api, 4)
    version = _split_all()
    assert store.version_delete(version)
    assert _part_held(version, "p00", "p03") == {"p00": None, "p03": None}

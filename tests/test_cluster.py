"""The boards on a Redis Cluster (run with --redis-cluster): a shard's keys share one slot, the
shards spread over the primaries, scans and checks reach every primary, cross-shard reads are
exact, and a switch publishes its shard count before the pointer that names its version."""

import pytest
from redis.cluster import RedisCluster

from rankings.engine import store
from rankings.engine.shards import ALL, Layout, active, shard_count, shard_of
from rankings.operations.backfill import version_build, version_switch
from rankings.serving import memory, selectors

from .rankings_helpers import Shop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster]

CATEGORIES = [f"c{i}" for i in range(12)]


@pytest.fixture
def cluster(redis_client):
    assert store.clustered() and isinstance(store.patient(), RedisCluster)
    return redis_client


def _shop_with_sales() -> Shop:
    shop = Shop()
    shop.send(
        *[shop.sale(f"p{i}", categories=[CATEGORIES[i % 12], CATEGORIES[(i + 5) % 12]]) for i in range(60)]
    )
    shop.tick()
    return shop


def _keys(client) -> list[str]:
    return [k.decode() for k in client.scan_iter(f"{store.prefix()}:v*", count=1000)]


def test_a_shard_keeps_its_keys_in_one_slot_and_the_shards_spread_over_the_primaries(cluster):
    _shop_with_sales()
    slots_by_shard: dict[int, set[int]] = {}
    for key in _keys(cluster):
        if "{s" in key:
            shard = int(key.split("{s", 1)[1].split("}", 1)[0])
            slots_by_shard.setdefault(shard, set()).add(cluster.keyslot(key))
    assert sorted(slots_by_shard) == list(range(shard_count()))
    assert all(len(slots) == 1 for slots in slots_by_shard.values()), slots_by_shard
    nodes = {cluster.get_node_from_key(f"{store.shard_tag(1, s)}:state").name for s in slots_by_shard}
    assert len(nodes) >= 2, "the premise: the shards lie on more than one primary"


def test_scans_count_and_delete_on_every_primary(cluster):
    _shop_with_sales()
    boards = [k for k in _keys(cluster) if ":b:" in k]
    summary = store.boards_summary(1)
    assert sum(entry["boards"] for entry in summary.values()) == len(boards)
    assert sum(entry["members"] for entry in summary.values()) == sum(cluster.zcard(k) for k in boards)
    assert set(store.memory_by_window(1)) == set(summary)
    assert store.keyspace_survey()[0] == {1}
    # when the version is deleted, then no key of it is left on any node
    held = len(_keys(cluster))
    assert store.version_delete(1) == held
    assert _keys(cluster) == []


def test_a_product_ranks_in_categories_of_several_shards_as_the_recompute_says(cluster):
    shop = _shop_with_sales()
    shop.assert_exact()
    shards = {shard_of(c, active().layout) for c in ("c0", "c5", ALL)}
    assert len(shards) >= 2, "the premise: the product's boards lie on several shards"
    found = store.members_ranks(
        version=1,
        window="7d",
        metric="units",
        product_id="p0",
        boards=[(shard_of(c, Layout(4)), c) for c in ("c0", "c5", ALL)],
    )
    for category, rank in zip(("c0", "c5", ALL), found, strict=True):
        board = shop.top(category)
        assert board[rank.rank] == ("p0", rank.score) and rank.total == len(board)
    heads = selectors.boards_top_many(limits=dict.fromkeys(CATEGORIES, 3), window="7d", metric="units")
    for category, answer in heads.items():
        assert [(i.product_id, i.units) for i in answer.items] == shop.top(category)[:3]


def test_a_switch_on_the_cluster_is_exact_and_publishes_the_layout_before_the_pointer(cluster):
    shop = _shop_with_sales()
    built = version_build()
    version_switch(number=built.number)
    assert store.served_version(fresh=True) == built.number
    assert store.shard_layout_get(built.number) == (shard_count(), ())
    shop.advance(minutes=5)
    shop.send(shop.sale("p1", categories=["c1"], qty=4))
    shop.tick()
    shop.assert_exact()
    # a block that fails after the count leaves the pointer where it was
    with pytest.raises(ZeroDivisionError), store.pipeline() as pipe:
        store.shard_layout_set(99, 4, pipe=pipe)
        raise ZeroDivisionError
    assert store.served_version(fresh=True) == built.number


def test_a_primary_that_may_evict_stops_the_tick(cluster, redis_cluster_session):
    primary = next(n for n in cluster.get_primaries())
    client = cluster.get_redis_connection(primary)
    client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        store.reset_clients()
        with pytest.raises(store.UnsafeEvictionPolicy):
            store.eviction_policy_check()
    finally:
        client.config_set("maxmemory-policy", "noeviction")
        store.reset_clients()


def test_a_split_board_spreads_its_parts_over_the_primaries_and_reads_exactly(cluster, settings):
    """`all` kept as 3 parts: they lie on several primaries, and every read merged from them equals
    the recompute of the board as one; a rebuild and switch un-splits it on the cluster."""
    from rankings.engine.recompute import boards_recompute
    from rankings.serving.thresholds import board_thresholds

    settings.RANKINGS = {**settings.RANKINGS, "SPLIT": "all:3"}
    shop = _shop_with_sales()
    shop.assert_exact()
    layout = active().layout
    assert layout.split == {ALL: 3}
    nodes = {cluster.get_node_from_key(f"{store.shard_tag(1, s)}:state").name for s in layout.shards_of(ALL)}
    assert len(nodes) >= 2, "the premise: the parts lie on more than one primary"
    boards = boards_recompute(shard=0, layout=Layout(1), now=shop.now.timestamp())
    whole = boards[("7d", "units", ALL)]
    top = selectors.board_top(category=ALL, window="7d", metric="units", limit=100, offset=0)
    assert [(i.product_id, i.units) for i in top.items] == whole and top.total == len(whole)
    deep = selectors.board_top(category=ALL, window="7d", metric="units", limit=20, offset=45)
    assert [(i.product_id, i.units) for i in deep.items] == whole[45:65]
    for place, (product_id, _) in enumerate(whole):
        rank = selectors.product_rank(product_id=product_id, category=ALL, window="7d", metric="units")
        assert (rank.rank, rank.total) == (place + 1, len(whole))
    around = selectors.product_neighbors(
        product_id=whole[30][0], category=ALL, window="7d", metric="units", n=3
    )
    assert [i.product_id for i in around.items] == [pid for pid, _ in whole[27:34]]
    ranks = selectors.product_ranks(product_id="p0", window="7d", metric="units")
    assert {r.category: r.total for r in ranks.ranks} == {
        c: len(boards[("7d", "units", c)]) for c in ("c0", "c5")
    }
    assert board_thresholds(category=ALL, window="7d", metric="units").total == len(whole)
    # when it is un-split by a rebuild and switch, the board is the same, whole
    settings.RANKINGS = {**settings.RANKINGS, "SPLIT": ""}
    built = version_build(layout=Layout(4), activate=True)
    assert store.served_version(fresh=True) == built.number
    shop.assert_exact()
    memory.forget_all()
    again = selectors.board_top(category=ALL, window="7d", metric="units", limit=100, offset=0)
    assert again.items == top.items


def _moved_replies(cluster) -> int:
    """The MOVED replies every primary has sent since it started."""
    stats = [node.redis_connection.info("errorstats") for node in cluster.get_primaries()]
    return sum(found.get("errorstat_MOVED", {}).get("count", 0) for found in stats)


def _slot_move(cluster, slot: int, source: str, target: str) -> None:
    """Move a slot, with its keys, from one primary to another (by name), as a resharding does."""
    source, target = (cluster.get_node(node_name=name).redis_connection for name in (source, target))
    source_id, target_id = source.execute_command("CLUSTER MYID"), target.execute_command("CLUSTER MYID")
    target.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
    source.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
    address = target.connection_pool.connection_kwargs
    while keys := source.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
        source.execute_command("MIGRATE", address["host"], address["port"], "", 0, 5000, "KEYS", *keys)
    for node in cluster.get_primaries():
        node.redis_connection.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)


def test_a_split_board_read_follows_a_part_whose_slot_moved_to_another_primary(
    cluster, settings, monkeypatch, request
):
    """A split board's parts are read on their nodes in one round trip, the client going by the slots
    it knows; when a part's slot has moved (a resharding), the node's MOVED sends the read through
    the cluster's own pipeline, which learns where the slot went: every read stays exact."""
    from rankings.engine.recompute import boards_recompute
    from rankings.serving import board_reader

    monkeypatch.setattr(board_reader, "BOARD_COPY_AFTER", 10**9)  # every read asks the nodes
    settings.RANKINGS = {**settings.RANKINGS, "SPLIT": "all:3"}
    shop = _shop_with_sales()
    whole = boards_recompute(shard=0, layout=Layout(1), now=shop.now.timestamp())[("7d", "units", ALL)]
    last = whole[-1][0]  # ranked last: every other part is read for what it ranks before it
    selectors.product_rank(product_id=last, category=ALL, window="7d", metric="units")
    layout = active().layout
    own = layout.board_of(ALL, last)
    other = next(part for part in layout.boards_of(ALL) if part != own)
    moved = _moved_replies(cluster)
    key = f"{store.shard_tag(1, layout.shard_of(other))}:state"
    home = cluster.get_node_from_key(key).name
    away = next(node.name for node in cluster.get_primaries() if node.name != home)
    _slot_move(cluster, cluster.keyslot(key), home, away)
    # Back where the session's other tests (and clients) know it.
    request.addfinalizer(lambda: _slot_move(cluster, cluster.keyslot(key), away, home))
    # Its own part is where the client knows it; the moved part is read with the others.
    memory.forget_all("answers")
    rank = selectors.product_rank(product_id=last, category=ALL, window="7d", metric="units")
    assert (rank.rank, rank.total) == (len(whole), len(whole))
    assert _moved_replies(cluster) > moved, "the premise: the part was asked where it was"
    for place, (product_id, _) in enumerate(whole):
        memory.forget_all("answers")
        rank = selectors.product_rank(product_id=product_id, category=ALL, window="7d", metric="units")
        assert (rank.rank, rank.total) == (place + 1, len(whole))
    around = selectors.product_neighbors(
        product_id=whole[30][0], category=ALL, window="7d", metric="units", n=3
    )
    assert [i.product_id for i in around.items] == [pid for pid, _ in whole[27:34]]
    shop.assert_exact()


@pytest.mark.parametrize("failure", ["ConnectionError", "TimeoutError"])
def test_a_read_of_the_parts_whose_node_connection_fails_goes_through_the_cluster_client(
    cluster, settings, monkeypatch, failure
):
    """A connection to a part's node that fails or does not answer in time (a node restarting, a
    host that died while its replica took over) is closed, and the parts are read again through
    the cluster client's own pipeline, which reconnects or learns the new layout: the answer is
    the same."""
    import redis

    settings.RANKINGS = {**settings.RANKINGS, "SPLIT": "all:3"}
    _shop_with_sales()
    layout = active().layout
    parts = [(layout.shard_of(part), part) for part in layout.boards_of(ALL)]
    read = lambda: store.parts_before(  # noqa: E731
        version=1, window="7d", metric="units", parts=parts, score=1, product_id="p0"
    )
    before = read()
    pool = (
        store.fast()
        .get_node_from_key(f"{store.shard_tag(1, parts[0][0])}:state")
        .redis_connection.connection_pool
    )
    connect, failed = pool.get_connection, []

    def broken(*args, **kwargs):
        if not failed:  # once: the cluster client's pipeline connects as usual
            failed.append(True)
            raise getattr(redis, failure)("the node did not answer")
        return connect(*args, **kwargs)

    monkeypatch.setattr(pool, "get_connection", broken)
    assert read() == before
    assert failed, "the premise: the part's node was asked on a connection of its own"


def test_the_metrics_and_the_readiness_reach_every_primary(cluster, redis_cluster_session):
    """Each primary's memory is shown with its own limit, and the boards' age and readiness read the
    shards wherever their slots are."""
    from django.utils import timezone
    from rest_framework.test import APIClient

    shop = Shop(now=timezone.now().replace(microsecond=0))
    shop.send(*[shop.sale(f"p{i}", categories=[CATEGORIES[i % 12]]) for i in range(24)])
    shop.tick()
    primaries = {f"{node.host}:{node.port}" for node in store.patient().get_primaries()}

    memory_used = store.memory_used()
    assert {node.node for node in memory_used} == primaries
    assert all(node.used > 0 for node in memory_used)
    memory.forget_all("status")
    assert APIClient().get("/readyz").json() == {"checks": {"postgres": "ok", "redis": "ok", "boards": "ok"}}
    text = APIClient().get("/metrics").content.decode()
    assert "salesrank_boards_age_seconds " in text and "salesrank_boards_age_seconds +Inf" not in text

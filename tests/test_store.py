"""The store is the only Redis boundary: it raises only its own exceptions, sends each Lua
script once, and lets a caller send several of its writes as one transaction."""

import socket

import pytest

from rankings.engine import store

# The public functions that need no Redis (key names, clients, the policy's verdict), and the
# check that answers nothing when Redis is down: the tick's own calls meet that.
WITHOUT_REDIS = {
    "fast",
    "patient",
    "reset_clients",
    "clustered",
    "pipeline",
    "prefix",
    "active_key",
    "gen_key",
    "shards_key",
    "shard_sources",
    "shard_tag",
    "state_key",
    "board_key",
    "blob_key",
    "wake_key",
    "names_head",
    "part_names_head",
    "eviction_policy_safe",
    "eviction_policy_check",
    "names_stamp",  # what the last read of the active version brought
}

BOARD = {"version": 1, "shard": 0, "window": "7d", "metric": "units", "category": "toys"}
KEY = store.board_key(1, 0, "7d", "units", "toys")

CALLS = {
    "eviction_policy": lambda: store.eviction_policy(),
    "served_version": lambda: store.served_version(fresh=True),
    "active_set": lambda: store.active_set(2, 1),
    "active_ensure": lambda: store.active_ensure(2, 1),
    "names_changed": lambda: store.names_changed(),
    "ping": lambda: store.ping(),
    "memory_used": lambda: store.memory_used(),
    "shards_as_of": lambda: store.shards_as_of(version=1, shards=[0, 1]),
    "shard_layout_set": lambda: store.shard_layout_set(1, 4),
    "shard_layout_get": lambda: store.shard_layout_get(1),
    "generation": lambda: store.generation(1),
    "generation_get": lambda: store.generation_get(1),
    "batch_apply": lambda: store.batch_apply(
        version=1, shard=0, seq=1, as_of=1.0, gen="g", changes=[store.Change("7d", "units", "toys", "p1", 1)]
    ),
    "batch_apply_routed": lambda: store.batch_apply_routed(
        version=1,
        shard=0,
        source=2,
        seq=1,
        as_of=1.0,
        gen="g",
        changes=[store.Change("7d", "units", "toys", "p1", 1)],
    ),
    "shard_sources_set": lambda: store.shard_sources_set(
        version=1, shard=0, gen="g", sources={2: 1}, replace=True
    ),
    "shard_touch": lambda: store.shard_touch(version=1, shard=0, seq=1, as_of=1.0, gen="g"),
    "shard_replace": lambda: store.shard_replace(
        version=1, shard=0, seq=1, as_of=1.0, gen="g", boards={("7d", "units", "toys"): {"p1": 1}}
    ),
    "boards_swap": lambda: store.boards_swap(store.BoardsLoad(1), shard=0, seq=1, as_of=1.0, gen="g"),
    "shard_board_keys": lambda: store.shard_board_keys(1, 0),
    "board_read_all": lambda: store.board_read_all(KEY),
    "shard_state": lambda: store.shard_state(1, 0),
    "shard_open": lambda: store.shard_open(1, 0),
    "version_delete": lambda: store.version_delete(1),
    "keyspace_survey": lambda: store.keyspace_survey(),
    "keys_delete": lambda: store.keys_delete([KEY]),
    "board_slice": lambda: store.board_slice(**BOARD, start=0, stop=9),
    "wake_claim": lambda: store.wake_claim(0, ttl=1),
    "wake_release": lambda: store.wake_release(0),
    "board_copy": lambda: store.board_copy(**BOARD, most=10),
    "member_rank": lambda: store.member_rank(**BOARD, product_id="p1"),
    "members_on_board": lambda: store.members_on_board(**BOARD, members=["p1"]),
    "members_ranks": lambda: store.members_ranks(
        version=1, window="7d", metric="units", product_id="p1", boards=[(0, "toys")]
    ),
    "members_scores": lambda: store.members_scores(version=1, lookups=[(0, "7d", "units", "toys", ["p1"])]),
    "shard_as_of": lambda: store.shard_as_of(version=1, shard=0),
    "board_heads": lambda: store.board_heads(version=1, boards=[(0, "7d", "units", "toys", 10)]),
    "boards_summary": lambda: store.boards_summary(1),
    "head_read": lambda: store.head_read(1, 0, "7d", "units", "toys"),
    "boards_spot_read": lambda: store.boards_spot_read(1, 0, [("7d", "units", "toys")], 10),
    "boards_heads": lambda: store.boards_heads(1, 0, 10),
    "memory_by_window": lambda: store.memory_by_window(1),
    "shard_stamp": lambda: store.shard_stamp(version=1, shard=0),
    "ordered_before": lambda: store.ordered_before(**BOARD, score=3, product_id="p1"),
    "board_thresholds": lambda: store.board_thresholds(**BOARD, ranks=[1], edges=[1, 2]),
    "parts_before": lambda: store.parts_before(
        version=1, window="7d", metric="units", parts=[(0, "all#0"), (1, "all#1")], score=3, product_id="p1"
    ),
    "parts_ranges": lambda: store.parts_ranges(
        version=1, window="7d", metric="units", ranges=[(0, "all#0", 0, 9)]
    ),
    "parts_rows": lambda: store.parts_rows(
        version=1, window="7d", metric="units", ranges=[(0, "all#0", 0, 9), (1, "all#1", 0, 9)]
    ),
    "member_around": lambda: store.member_around(**BOARD, product_id="p1", n=2),
    "parts_around": lambda: store.parts_around(
        version=1,
        window="7d",
        metric="units",
        parts=[(0, "all#0"), (1, "all#1")],
        score=3,
        product_id="p1",
        n=2,
    ),
    "split_around": lambda: store.split_around(
        version=1,
        window="7d",
        metric="units",
        parts=[(0, "all#0"), (1, "all#1")],
        own=0,
        product_id="p1",
        n=2,
    ),
    "names_read": lambda: store.names_read(["p1", "p2"]),
    "names_held": lambda: store.names_held([(store.names_head(), "p1")]),
    "names_mend": lambda: store.names_mend({(store.names_head(), "p1"): None}, {"p1": "Kite"}),
    "buckets_held": lambda: store.buckets_held(range(0, 4), [store.names_head()]),
    "names_walk_read": lambda: store.names_walk_read(),
    "names_walk_set": lambda: store.names_walk_set(product="p1", bucket=3),
    "parts_histogram": lambda: store.parts_histogram(
        version=1, window="7d", metric="units", parts=[(0, "all#0")], edges=[1, 2]
    ),
}


def _public_functions() -> set[str]:
    return {
        name
        for name, value in vars(store).items()
        if callable(value)
        and not name.startswith("_")
        and not isinstance(value, type)
        and getattr(value, "__module__", "").startswith(f"{store.__name__}.")
    }


@pytest.fixture(params=[False, True], ids=["server", "cluster"])
def redis_down(settings, request):
    """REDIS_URL names a port where nothing listens, as a server's and as a cluster node's."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.REDIS_URL, settings.REDIS_CLUSTER = f"redis://127.0.0.1:{port}/0", request.param
    store.reset_clients()
    yield
    store.reset_clients()


def test_every_public_function_that_talks_to_redis_is_checked_below():
    """A function added to the store is either listed as needing no Redis or called by the test below."""
    assert _public_functions() - WITHOUT_REDIS == set(CALLS)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_with_redis_down_a_store_function_raises_unreachable(redis_down, name):
    """Given a Redis that does not answer, every store function raises Unreachable, never a redis error."""
    with pytest.raises(store.Unreachable):
        CALLS[name]()


def test_with_redis_down_a_pipeline_raises_unreachable(redis_down):
    with pytest.raises(store.Unreachable), store.pipeline() as pipe:
        store.shard_layout_set(1, 4, pipe=pipe)


def test_an_error_answered_by_redis_is_refused_not_unreachable(redis_client):
    # given a key of another type where a board's state is expected
    redis_client.set(store.state_key(1, 0), "not a hash")
    # when a store function reads it, then Redis's answer comes back as the store's Refused
    with pytest.raises(store.Refused, match="WRONGTYPE"):
        store.shard_state(1, 0)


def test_scripts_are_loaded_once_and_called_by_their_sha(own_redis):
    """Given a Redis of the test's own, batches are applied with EVALSHA, never by sending the script."""
    r = store.patient()
    r.config_resetstat()
    for seq in (1, 2):
        change = store.Change("7d", "units", "toys", "p1", seq)
        store.batch_apply(version=1, shard=0, seq=seq, as_of=float(seq), gen="g", changes=[change])
    stats = r.info("commandstats")
    assert "cmdstat_eval" not in stats
    assert stats["cmdstat_evalsha"]["calls"] >= 2
    # and a Redis that forgot its scripts (a restart) is sent the script again
    r.script_flush()
    change = store.Change("7d", "units", "toys", "p1", 3)
    assert store.batch_apply(version=1, shard=0, seq=3, as_of=3.0, gen="g", changes=[change]) == 1
    assert store.board_read_all(KEY) == [("p1", 6)]


@pytest.mark.single_redis
def test_writes_given_a_pipeline_are_sent_together_when_its_block_ends(redis_client):
    # given the shard count and the pointer of a version written through one pipeline
    with store.pipeline() as pipe:
        store.shard_layout_set(7, 3, pipe=pipe)
        store.active_set(7, 5, pipe=pipe)
        # then nothing is written while the block runs
        assert redis_client.get(store.shards_key(7)) is None
        assert redis_client.exists(store.active_key()) == 0
    # and both are, once it ends
    assert store.shard_layout_get(7) == (3, ())
    assert store.served_version(fresh=True) == 7


@pytest.mark.single_redis
def test_a_pipeline_whose_block_raises_writes_nothing(redis_client):
    with pytest.raises(ZeroDivisionError), store.pipeline() as pipe:
        store.shard_layout_set(8, 3, pipe=pipe)
        raise ZeroDivisionError
    assert redis_client.get(store.shards_key(8)) is None

"""Redis losing its last writes (a failover to a replica that had not received them, a restart from
an older snapshot): the shard's batch seq goes back, readers stop passing its boards off as fresh,
and the next tick rebuilds the shard from the PostgreSQL buckets, exactly.

The loss is made deterministic here: every key of the run is dumped after one tick and restored
after the next, which is what a replica one batch behind holds once it takes over.
"""

import logging

import pytest

from rankings.engine import store
from rankings.engine.shards import active, shard_of
from rankings.models import ShardState
from rankings.serving import answers, memory, selectors

from .rankings_helpers import Shop, run_keys

pytestmark = pytest.mark.django_db(transaction=True)


def _snapshot(redis_client) -> dict[bytes, bytes]:
    return {key: redis_client.dump(key) for key in run_keys(redis_client)}


def _restore(redis_client, snapshot: dict[bytes, bytes]) -> None:
    """Redis as it was when the snapshot was taken: later keys gone, earlier ones back as they were."""
    redis_client.delete(*run_keys(redis_client))
    for key, value in snapshot.items():
        redis_client.restore(key, 0, value)


def _top() -> selectors.Board:
    # as if FRESH_SECONDS had passed: the next read asks Redis, and the last known answers stay
    with answers._answers_lock:
        for key, (made, answer) in list(answers._answers.items()):
            answers._answers[key] = (made - answers.FRESH_SECONDS, answer)
    return selectors.board_top(category="toys", window="7d", metric="units", limit=10, offset=0)


def test_a_shard_that_lost_its_last_batch_is_served_stale_then_rebuilt_by_the_next_tick(redis_client, caplog):
    shop = Shop()
    shop.send(shop.sale("a", qty=2), shop.sale("b", qty=1))
    shop.tick()
    snapshot = _snapshot(redis_client)
    shop.advance(minutes=1)
    shop.send(shop.sale("b", qty=5))
    shop.tick()
    newest = _top()
    assert [(i.product_id, i.units) for i in newest.items] == [("b", 6), ("a", 2)] and not newest.stale
    shard = shard_of("toys", active().layout)
    recorded = ShardState.objects.get(shard=shard).seq
    # when Redis goes back to the state before the last tick
    _restore(redis_client, snapshot)
    held = int(store.shard_state(store.served_version(), shard)["seq"])
    assert held < recorded, "the premise: Redis holds an earlier batch than PostgreSQL recorded"
    # then a reader that saw the newer boards serves them marked stale, not the older ones as fresh
    meanwhile = _top()
    assert meanwhile.stale and meanwhile.items == newest.items and meanwhile.as_of == newest.as_of
    # and the next tick, with no new sale and the same clock, finds the gap and rebuilds the shard
    with caplog.at_level(logging.WARNING, logger="rankings.engine.batches"):
        report = shop.tick()
    assert report.rebuilt_shards >= 1
    assert any("lost its last writes" in r.getMessage() for r in caplog.records)
    assert int(store.shard_state(store.served_version(), shard)["seq"]) == recorded
    shop.assert_exact()
    after = _top()
    assert not after.stale and after.items == newest.items


def test_a_reader_that_never_saw_the_lost_batch_serves_the_earlier_boards_with_their_own_as_of(redis_client):
    """Boards and seq went back together: what such a reader serves is exact as of the instant it says."""
    shop = Shop()
    shop.send(shop.sale("a", qty=2))
    shop.tick()
    earlier = _top()
    snapshot = _snapshot(redis_client)
    shop.advance(minutes=1)
    shop.send(shop.sale("a", qty=5))
    shop.tick()
    _restore(redis_client, snapshot)
    store.reset_clients()  # a process that has read nothing yet
    memory.forget_all()
    served = _top()
    assert not served.stale and served.as_of == earlier.as_of and served.items == earlier.items

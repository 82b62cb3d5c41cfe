"""A Redis Cluster primary killed (SIGKILL) mid-stream; its replica takes over without the last writes.

Real gunicorn, Celery worker and beat on a Redis Cluster of the test's own (three primaries, three
replicas). Redis replication is asynchronous: a replica may lack the primary's last writes when
it takes over. To make that certain rather than a matter of luck, the replica of the node that
holds the busiest shard is cut off from it (its link is dropped, and it cannot log back in) while
the ticks go on writing, and the primary is killed once it holds batches the replica lacks. The
test proves its premise (the killed node was a primary holding the shard, the replica was
promoted, the shard's seq went back), then that the ticks found the gap and rebuilt the shard:
every board equals the recompute, no sale lost or doubled, and no reader was served a false
answer or a server error.
"""

import time

import pytest
import redis as redis_lib
from django.conf import settings
from django.db.models import Sum
from redis.cluster import RedisCluster

from rankings.engine import store
from rankings.engine.shards import ALL, active, shard_of
from rankings.models import ShardState, TickLog
from rankings.serving import memory

from .. import processes
from .stack import (
    READ_PATHS,
    Reader,
    SaleStream,
    Stack,
    assert_exact,
    rebuilt_while_flowing,
    redis_caught_up,
    show,
    token_for_ingest,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.faults]

# Batches the primary must hold beyond its cut-off replica when it is killed.
LOST_BATCHES = 2
# Far inside what lets a replica take over (node timeout × validity factor 10 = 10 s of silence).
CUT_OFF_SECONDS = 8  # seconds


@pytest.fixture
def cluster(tmp_path, settings):
    """A cluster of this test's own; this process and every child it starts keep their boards on it."""
    cluster = processes.redis_cluster(tmp_path / "cluster")
    settings.REDIS_URL, settings.REDIS_CLUSTER = cluster.url, True
    store.reset_clients()
    memory.forget_all()
    yield cluster
    cluster.stop()
    store.reset_clients()
    memory.forget_all()


def _node_client(node: processes.Process) -> redis_lib.Redis:
    client = redis_lib.Redis.from_url(node.url, socket_timeout=2)
    client.execute_command("READONLY")  # a replica answers reads of its primary's slots
    return client


def _seq(node: processes.Process, key: str) -> int:
    return int(_node_client(node).hget(key, "seq") or 0)


def _replica_of(cluster: processes.RedisCluster, primary: processes.Process) -> processes.Process:
    """The primary's replica, once the primary has heard of it (a new cluster's nodes learn their
    replicas by gossip, a moment after `redis-cli --cluster create` returns)."""
    deadline = time.monotonic() + 30
    while True:
        nodes = _node_client(primary).execute_command("CLUSTER NODES")
        primary_id = next(about["node_id"] for about in nodes.values() if "myself" in about["flags"])
        address = next((a for a, about in nodes.items() if about["master_id"] == primary_id), None)
        if address is not None:
            return cluster.node(address)
        assert time.monotonic() < deadline, f"no replica of {primary.name} known after 30 s"
        time.sleep(0.1)


def _rebuilt_since(tick_id: int) -> int:
    return TickLog.objects.filter(id__gt=tick_id).aggregate(n=Sum("rebuilt_shards"))["n"] or 0


def test_a_primary_killed_mid_stream_loses_writes_that_the_ticks_rebuild_exactly(
    tmp_path, cluster, transactional_db
):
    # given the node that holds the busiest shard (every sale counts in `all`), and a URL naming another
    shard = shard_of(ALL, active().layout)
    state = store.state_key(1, shard)
    owner = RedisCluster.from_url(cluster.url).get_node_from_key(state).name
    victim = cluster.node(owner)
    named = next(n for n in cluster.nodes[:3] if n is not victim)
    replica = _replica_of(cluster, victim)
    plain = {
        "CACHE_URL": settings.CACHES["default"]["LOCATION"],
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
    }
    stack = Stack(tmp_path, named.url, REDIS_CLUSTER="true", THROTTLE_INGEST="", THROTTLE_READS="", **plain)
    try:
        host = stack.web(workers=2)
        stack.worker("w1")
        stack.beat("beat")
        stream = SaleStream(host, token_for_ingest(), clients=3, batch=40).start()
        reader = Reader(host, paths=[p for p in READ_PATHS if p != "/v1/status"]).start()
        wait_for(lambda: stream.accepted_between(0, time.monotonic()) >= 20, 60, what="sales to flow")
        wait_for(redis_caught_up, 60, interval=0.05, what="Redis to hold every shard", watch=stack.running())
        # when the replica is cut off: its link dropped, and it cannot log back in
        _node_client(replica).config_set("masterauth", "not-the-password")
        _node_client(victim).execute_command("CLIENT", "KILL", "TYPE", "replica")
        behind = _seq(replica, state)
        wait_for(
            lambda: _seq(victim, state) >= behind + LOST_BATCHES,
            CUT_OFF_SECONDS,
            interval=0.01,
            what="the primary to write batches its replica lacks",
            watch=stack.running(),
        )
        # and the primary is killed while the ticks write
        assert cluster.roles()[victim.address] == "master", "the premise: the node killed is a primary"
        before_kill, replica_holds = _seq(victim, state), _seq(replica, state)
        last_tick = TickLog.objects.order_by("-id").values_list("id", flat=True).first()
        killed_at = time.monotonic()
        victim.kill()
        # then the replica takes over its slots
        wait_for(
            lambda: cluster.roles().get(replica.address) == "master", 30, interval=0.05, what="the promotion"
        )
        cluster.wait_ok(30)
        promoted_at = time.monotonic()
        _node_client(replica).config_set("masterauth", "")
        # and the ticks find the shard behind PostgreSQL and rebuild it from the buckets
        rebuilt_at = rebuilt_while_flowing(stack, stream, interval=0.05)
        result, caught_up = stack.wind_down(stream, reader)
        result.update(
            **{
                "shard": shard,
                "seq on the killed primary": before_kill,
                "seq on the replica when it was killed": replica_holds,
                "seq in PostgreSQL at rest": ShardState.objects.get(shard=shard).seq,
                "promotion s": round(promoted_at - killed_at, 2),
                "rebuilt s": round(rebuilt_at - killed_at, 2),
                "rebuilt shards": _rebuilt_since(last_tick or 0),
                "batches accepted meanwhile": stream.accepted_between(killed_at, rebuilt_at),
                "reads": sum(reader.statuses.values()),
                "reads meanwhile": sum(killed_at <= m[0] <= rebuilt_at for m in reader.marks),
                "stale answers": reader.stale,
                "503 (nothing known)": reader.statuses[503],
                "read errors": reader.server_errors,
                "catch-up s": round(caught_up, 2),
            }
        )
        show(
            "a Redis Cluster primary killed mid-stream, its replica promoted without the last writes", result
        )
        # the premise: the node killed was the shard's primary, its replica took over, and it lacked writes
        assert cluster.roles().get(replica.address) == "master" and not victim.alive()
        assert replica_holds < before_kill, "the promoted replica held every write: nothing was lost"
        assert result["rebuilt shards"] >= 1, "no tick rebuilt a shard: the loss was not noticed"
        assert result["batches accepted meanwhile"] > 0, "no sale arrived between the kill and the rebuild"
        assert_exact(result)
        assert reader.server_errors == 0, reader.statuses
        assert not reader.stale_unknown, reader.stale_unknown[:3]
    finally:
        stack.close()

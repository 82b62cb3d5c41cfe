"""Redis memory per board member on a Redis Cluster against a single node, for the same boards.

The demo's shape of sales (bench_rebuild's generator, 200,000 sales) is rebuilt into a new version
once on a redis-server of the benchmark's own and once on a Redis Cluster of its own (three
primaries, three replicas, same redis-server, no persistence). Memory is what the primaries'
used_memory grew by while the boards were written (the keys with their per-key overhead, the
cluster's slot index included), divided by the boards' members. The replicas hold a copy each:
that doubling is the price of failover, not of the cluster's layout, and is shown apart.
"""

import statistics
import tempfile

from bench import harness
from bench.bench_rebuild import _generate
from tests import processes

SALES = 200_000


def _used_memory(nodes: list[processes.Process]) -> int:
    """The nodes' used_memory, once no deleted key is still being freed in the background."""
    import redis

    if not nodes:
        return 0

    def infos():
        found = [redis.Redis.from_url(n.url).info("memory") for n in nodes]
        return found if all(i["lazyfree_pending_objects"] == 0 for i in found) else None

    return sum(i["used_memory"] for i in processes.wait_until(infos, timeout=30, what="lazy frees to end"))


def _replicas_caught_up(primaries: list[processes.Process]) -> bool:
    """Whether every replica has acknowledged its primary's whole replication stream."""
    import redis

    for node in primaries:
        info = redis.Redis.from_url(node.url).info("replication")
        offsets = [v["offset"] for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
        if not offsets or min(offsets) < info["master_repl_offset"]:
            return False
    return True


def _primaries(cluster: processes.RedisCluster) -> tuple[list[processes.Process], list[processes.Process]]:
    roles = cluster.roles()
    primaries = [n for n in cluster.nodes if roles.get(n.address) == "master"]
    return primaries, [n for n in cluster.nodes if n not in primaries]


def _bytes_per_member(url: str, clustered: bool, primaries, replicas=()) -> tuple[float, float, int]:
    """(bytes per member on the primaries, on the replicas, members) of one rebuild of every board."""
    from rankings.engine import store
    from rankings.operations.backfill import version_build

    with processes.boards_on(url, clustered=clustered):
        before, before_replicas = _used_memory(primaries), _used_memory(list(replicas))
        version = version_build()
        if replicas:
            processes.wait_until(
                lambda: _replicas_caught_up(primaries), timeout=30, what="the replicas to catch up"
            )
        grown = _used_memory(primaries) - before
        grown_replicas = _used_memory(list(replicas)) - before_replicas
        members = sum(entry["members"] for entry in store.boards_summary(version.number).values())
        store.version_delete(version.number)
        if replicas:
            processes.wait_until(
                lambda: _replicas_caught_up(primaries), timeout=30, what="the replicas to catch up"
            )
    print(f"  {'cluster' if clustered else 'single node'}: {grown / members:.1f} B per member", flush=True)
    return grown / members, grown_replicas / members, members


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    print(f"cluster: {SALES:,} raw sales into boards on one node and on a cluster…", flush=True)
    _generate(SALES)
    with tempfile.TemporaryDirectory(prefix="salesrank-bench-cluster-") as logs:
        single = processes.redis_server(logs, name="redis-single")
        cluster = processes.redis_cluster(logs)
        try:
            primaries, replicas = _primaries(cluster)
            one = [_bytes_per_member(single.url, False, [single]) for _ in range(runs)]
            many = [_bytes_per_member(cluster.url, True, primaries, replicas) for _ in range(runs)]
        finally:
            cluster.stop()
            single.kill()
    single_bytes = statistics.median(b for b, _, _ in one)
    cluster_bytes = statistics.median(b for b, _, _ in many)
    replica_bytes = statistics.median(r for _, r, _ in many)
    table.add(
        f"Redis memory per board member, cluster of 3 primaries ({one[0][2]:,} members)",
        f"{cluster_bytes:.1f} B",
        f"single node {single_bytes:.1f} B",
        f"{cluster_bytes / single_bytes:.3f}x",
        f"target within 5%; the replicas add {replica_bytes:.1f} B per member",
    )
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

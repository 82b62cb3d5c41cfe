"""Whether Redis answers, and how full it is: what the readiness probe and /metrics ask."""

from dataclasses import dataclass

from redis.cluster import RedisCluster

from rankings.engine.store.client import fast, translated


@translated
def ping() -> None:
    """Return when Redis answers (every primary of a cluster); raise Unreachable when it does not
    within the fast client's timeout."""
    r = fast()
    if isinstance(r, RedisCluster):
        r.ping(target_nodes=RedisCluster.PRIMARIES)
    else:
        r.ping()


@dataclass(frozen=True)
class NodeMemory:
    """One Redis server's memory: what it uses, and its limit (0: none)."""

    node: str  # host:port
    used: int  # bytes
    limit: int  # bytes


@translated
def memory_used() -> list[NodeMemory]:
    """Each server's INFO memory (every primary of a cluster, each with its own limit)."""
    r = fast()
    if isinstance(r, RedisCluster):
        answers = r.info("memory", target_nodes=RedisCluster.PRIMARIES)
        # A cluster of one primary answers as a server does, not by node.
        if "used_memory" in answers:
            (only,) = r.get_primaries()
            answers = {f"{only.host}:{only.port}": answers}
    else:
        address = r.connection_pool.connection_kwargs
        answers = {f"{address.get('host')}:{address.get('port')}": r.info("memory")}
    return sorted(
        (
            NodeMemory(node, int(info["used_memory"]), int(info.get("maxmemory", 0)))
            for node, info in answers.items()
        ),
        key=lambda memory: memory.node,
    )

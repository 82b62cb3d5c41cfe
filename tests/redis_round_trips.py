"""Round trips to the ranking store's read client, counted: what a read costs in waits on Redis,
whatever the machine's load (tests assert them; benchmarks print them beside their rates)."""

from unittest import mock


class RedisRoundTrips:
    """Counts the round trips made on the ranking store's read client from its making: a pipeline is
    one, and so is each command it sends at once before its own; on a Redis Cluster a pipeline sends
    each node its commands at once and is one too, as is the store's own send to every node at once.

    Given pytest's `monkeypatch`, it counts to the end of the test; without, to the end of its `with`.
    """

    def __init__(self, monkeypatch=None):
        self.count = 0
        self._patches: list = []
        for owner, name in self._counted():
            counted = self._counting(getattr(owner, name))
            if monkeypatch is not None:
                monkeypatch.setattr(owner, name, counted)
            else:
                patch = mock.patch.object(owner, name, counted)
                patch.start()
                self._patches.append(patch)

    def __enter__(self) -> "RedisRoundTrips":
        return self

    def __exit__(self, *exc) -> None:
        for patch in self._patches:
            patch.stop()

    def _counted(self) -> list[tuple[object, str]]:
        """What sends a round trip, and so that a call is counted only for the read client, which of
        it is the read client's."""
        import redis
        from redis.cluster import ClusterPipeline, RedisCluster

        from rankings.engine import store
        from rankings.engine.store import client as store_client

        if store.clustered():
            nodes = store.fast().nodes_manager
            self._mine = lambda client: client.nodes_manager is nodes
            # The store's send to every node at once, then its read of every reply: one.
            return [
                (RedisCluster, "execute_command"),
                (ClusterPipeline, "execute"),
                (store_client, "_on_nodes"),
            ]
        pool = store.fast().connection_pool
        self._mine = lambda client: client.connection_pool is pool
        # A command a pipeline sends at once, before its own (redis-py's SCRIPT EXISTS of the scripts
        # it holds), is a round trip of its own.
        return [
            (redis.Redis, "execute_command"),
            (redis.client.Pipeline, "execute"),
            (redis.client.Pipeline, "immediate_execute_command"),
        ]

    def _counting(self, original):
        def counted(client, *args, **options):
            if self._mine(client):
                self.count += 1
            return original(client, *args, **options)

        return counted

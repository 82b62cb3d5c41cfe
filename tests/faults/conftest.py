"""The fault suite's Redis: a server of its own, so that pausing it or deleting every
key disturbs no other test run on the machine."""

import pytest
import redis as redis_lib

from rankings.engine import store
from rankings.serving import memory

from .. import processes


class PrivateRedis:
    def __init__(self, server: processes.Process):
        self.server = server
        self.url = server.url
        self.client = redis_lib.Redis.from_url(self.url)


@pytest.fixture(scope="session")
def private_redis(tmp_path_factory):
    server = processes.redis_server(tmp_path_factory.mktemp("fault-redis"))
    yield PrivateRedis(server)
    server.kill()


@pytest.fixture
def fault_redis(private_redis, settings):
    """This process and every child it starts use the private Redis, emptied first."""
    private_redis.client.flushall()
    settings.REDIS_URL = private_redis.url
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": private_redis.url}}
    store.reset_clients()
    memory.forget_all()
    yield private_redis
    store.reset_clients()
    memory.forget_all()

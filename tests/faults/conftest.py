"""The fault suite's Redis: a server of its own, so that pausing it or deleting every
key disturbs no other test run on the machine."""

import subprocess
import time

import pytest
import redis as redis_lib

from rankings.engine import store
from rankings.serving import selectors

from .stack import free_port


class PrivateRedis:
    def __init__(self, url: str, client: redis_lib.Redis, server: subprocess.Popen):
        self.url = url
        self.client = client
        self.server = server


@pytest.fixture(scope="session")
def private_redis():
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis_lib.Redis.from_url(url)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis_lib.ConnectionError:
            time.sleep(0.02)
    yield PrivateRedis(url, client, server)
    server.kill()
    server.wait()


@pytest.fixture
def fault_redis(private_redis, settings):
    """This process and every child it starts use the private Redis, emptied first."""
    private_redis.client.flushall()
    settings.REDIS_URL = private_redis.url
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": private_redis.url}}
    store.reset_clients()
    selectors.caches_clear()
    yield private_redis
    store.reset_clients()
    selectors.caches_clear()

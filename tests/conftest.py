"""Fixtures shared by the suite: real PostgreSQL and Redis, a per-run key prefix."""

import datetime as dt
import socket
import subprocess
import sys
import time

import pytest
import redis as redis_lib
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient


@pytest.fixture(scope="session")
def redis_client():
    return redis_lib.Redis.from_url(settings.REDIS_URL)


@pytest.fixture(autouse=True)
def _clean_redis(redis_client):
    """Each test starts with no key of this run's prefix in Redis and no remembered answers."""
    from rankings.engine import store
    from rankings.serving import selectors

    selectors.caches_clear()
    store.reset_clients()
    yield
    prefix = settings.RANKINGS["KEY_PREFIX"]
    keys = list(redis_client.scan_iter(f"{prefix}:*", count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def api():
    return APIClient()


@pytest.fixture
def ingest_user(db):
    user = get_user_model().objects.create_user("ingest-test")
    user.user_permissions.add(Permission.objects.get(codename="add_sale", content_type__app_label="rankings"))
    return user


@pytest.fixture
def ingest_api(ingest_user):
    client = APIClient()
    token = Token.objects.create(user=ingest_user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def utc(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)


@pytest.fixture
def worker_and_beat(tmp_path):
    from .processes import ROOT, django_env

    env = django_env(RANKINGS_TICK_SECONDS=0.5)
    celery = [sys.executable, "-m", "celery", "-A", "salesrank_site"]
    procs = [
        subprocess.Popen(
            [*celery, "worker", "--pool", "solo", "--loglevel", "WARNING"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [*celery, "beat", "--loglevel", "WARNING", "--schedule", str(tmp_path / "beat-schedule")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
        ),
    ]
    yield
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def own_redis(settings):
    """A Redis server of this test's own, so that stopping it disturbs nobody else."""
    port = _free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    from rankings.engine import store

    store.reset_clients()
    for _ in range(100):
        try:
            store.fast().ping()
            break
        except Exception:
            time.sleep(0.05)
    yield server
    server.kill()
    server.wait()
    store.reset_clients()

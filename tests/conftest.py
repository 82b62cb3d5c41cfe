"""Fixtures shared by the suite: real PostgreSQL and Redis, a per-run key prefix."""

import contextlib
import datetime as dt
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import redis as redis_lib
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction
from redis.cluster import RedisCluster
from rest_framework.test import APIClient

from rankings.serving import memory

from . import longest_first
from .rankings_helpers import run_keys


def pytest_addoption(parser):
    parser.addoption(
        "--redis-cluster",
        action="store_true",
        help="run against a Redis Cluster of the session's own (3 primaries, 3 replicas; one per"
        " xdist worker) with REDIS_CLUSTER=true; the Django cache and Celery's broker stay on REDIS_URL",
    )


def pytest_collection_modifyitems(config, items):
    """Each test runs in the one of make test's two runs it is meant for: a `cluster` test only with
    --redis-cluster, a `single_redis` test only without. In the other run it is deselected, not
    skipped: it does not run there, and nothing pretends it passed."""
    unwanted = "single_redis" if config.getoption("--redis-cluster") else "cluster"
    deselected = [item for item in items if item.get_closest_marker(unwanted)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker(unwanted)]
    items[:] = longest_first.longest_first(items, longest_first.workers())


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database commits without waiting for its WAL to reach the disk: a test never
    outlives a PostgreSQL crash, and a wait for the disk on each of the suite's many thousand
    commits (several milliseconds each) is most of what a test spends on PostgreSQL. Set on the
    database, it holds for the processes the tests start too."""
    from django.db import connection

    with django_db_blocker.unblock():
        with connection.cursor() as cursor:
            cursor.execute(
                f"ALTER DATABASE {connection.ops.quote_name(connection.settings_dict['NAME'])} SET synchronous_commit = off"
            )
        connection.close()  # the next connection is the database's own setting's


# What Django's post_migrate signal fills after every emptying (the content types and the
# permissions of the models): kept rather than deleted and made again.
KEPT_BY_FLUSH = ("django_content_type", "auth_permission")
# Tables a trigger writes when rows of another are deleted (migration 0028 of rankings: the products'
# names that changed).
WRITTEN_BY_DELETES = ("rankings_namechange",)
# The receivers of post_migrate, all of which fill only the tables of KEPT_BY_FLUSH.
POST_MIGRATE_FILLS_KEPT = (
    "django.contrib.auth.management.create_permissions",
    "django.contrib.contenttypes.management.create_contenttypes",
)
# One value for what the tables of KEPT_BY_FLUSH hold, every row of them.
KEPT_ROWS = """
SELECT md5(concat(
    (SELECT string_agg(concat_ws(' ', id, app_label, model), ',' ORDER BY id) FROM django_content_type), ';',
    (SELECT string_agg(concat_ws(' ', id, content_type_id, codename, name), ',' ORDER BY id) FROM auth_permission)
))
"""


def kept_rows(using: str) -> str:
    from django.db import connections

    with connections[using].cursor() as cursor:
        cursor.execute(KEPT_ROWS)
        return cursor.fetchone()[0]


@pytest.fixture(scope="session", autouse=True)
def _emptied_by_delete():
    """A test that commits is followed by emptying every table. Django truncates them, which makes
    new files for each of the many tables, partitions and indexes (about half a second each time);
    a test leaves a few rows, and deleting them takes milliseconds. The deletes go in one statement
    (one round trip instead of one a table). Django's foreign keys are checked at commit, when
    every table is empty, so the order of the deletes does not matter, but for the tables that
    triggers write as others are deleted from (WRITTEN_BY_DELETES), which are deleted from last.
    The content types and permissions are left as they are, and Django's post_migrate, which
    follows each emptying to make them again (some 30 statements), is sent only when they are not
    as they stood after it was last sent: otherwise it would find every row it makes."""
    from django.core.management.commands import flush
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush
    emit = flush.emit_post_migrate_signal
    after_post_migrate: dict[str, str] = {}

    @functools.wraps(truncate)  # tests/test_flush.py pins what it replaces
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences:
            return truncate(self, style, tables, reset_sequences=True, allow_cascade=allow_cascade)
        kept = [table for table in tables if table not in KEPT_BY_FLUSH]
        kept.sort(key=lambda table: table in WRITTEN_BY_DELETES)
        deletes = [f"DELETE FROM {self.quote_name(table)};" for table in kept]
        return [" ".join(deletes)] if deletes else []

    @functools.wraps(emit)
    def emit_post_migrate_signal(verbosity, interactive, db, **kwargs):
        if after_post_migrate.get(db) == kept_rows(db):
            return
        emit(verbosity, interactive, db, **kwargs)
        after_post_migrate[db] = kept_rows(db)

    DatabaseOperations.sql_flush = sql_flush
    flush.emit_post_migrate_signal = emit_post_migrate_signal
    yield
    DatabaseOperations.sql_flush = truncate
    flush.emit_post_migrate_signal = emit


@pytest.fixture
def partitions_dropped(transactional_db):
    """The partitions of raw sales (months) and engagement events (days) the test made are dropped
    after it, before the database is emptied for the next test: a history that spans months of
    clock leaves hundreds, and emptying them all again after every later test of the worker costs
    seconds each time."""
    from django.db import connection

    from rankings.engine import partitions

    def names() -> set[str]:
        return set(partitions.sale_partitions()) | {name for name, _ in partitions.engagement_partitions()}

    before = names()
    yield
    made = sorted(names() - before)
    if made:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE " + ", ".join(connection.ops.quote_name(name) for name in made))
    partitions.partitions_forget()


@pytest.fixture(scope="session")
def redis_cluster_session(request, tmp_path_factory):
    """With --redis-cluster: the boards of this session, and of every process it starts, on a Redis
    Cluster of its own; None otherwise."""
    if not request.config.getoption("--redis-cluster"):
        yield None
        return

    from . import processes

    cluster = processes.redis_cluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        with processes.boards_on(cluster.url, clustered=True):
            yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_client(redis_cluster_session):
    """A client of the boards' Redis: the server, or with --redis-cluster the session's cluster."""
    if redis_cluster_session is not None:
        return RedisCluster.from_url(settings.REDIS_URL)
    return redis_lib.Redis.from_url(settings.REDIS_URL)


@pytest.fixture(scope="session", autouse=True)
def _broker_keys_deleted():
    """The Celery broker keeps each queue's bindings (`_kombu.binding.<queue>`) after its workers
    stop: this run's queues, named after its prefix (and the prefixes a test makes from it), go with
    the run."""
    from rankings.conf import rankings_settings

    yield
    broker = redis_lib.Redis.from_url(settings.CELERY_BROKER_URL)
    prefix = rankings_settings.KEY_PREFIX
    keys = [
        key for pattern in (f"*{prefix}:*", f"*{prefix}-*") for key in broker.scan_iter(pattern, count=10_000)
    ]
    if keys:
        broker.delete(*keys)
    broker.close()


@pytest.fixture(autouse=True)
def _clean_redis(redis_client):
    """Each test starts with no key of this run's prefix in Redis and no remembered answers."""
    from rankings.engine import store

    memory.forget_all()
    store.reset_clients()
    yield
    keys = run_keys(redis_client)
    if keys:
        redis_client.delete(*keys)


@dataclass
class BuiltOnce:
    """What a build returned, and the Redis keys it left, to put back before each test that reads it."""

    result: object
    keys: dict[bytes, tuple[bytes, int]]
    redis_client: object

    def restored(self):
        """The build's Redis keys as it left them (every test's own are deleted after it); its rows
        are there already, in the transaction around the tests."""
        for key, (dumped, ttl_ms) in self.keys.items():
            self.redis_client.restore(key, max(ttl_ms, 0), dumped, replace=True)
        return self.result


@contextlib.contextmanager
def _rolled_back(django_db_blocker) -> Iterator[None]:
    """A transaction rolled back at the end. The database is unblocked only to open and end it: in
    between, each test reaches it only if marked to, as ever."""
    around = transaction.atomic()
    with django_db_blocker.unblock():
        around.__enter__()
    try:
        yield
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            around.__exit__(None, None, None)


@contextlib.contextmanager
def built_once(build: Callable, django_db_blocker, redis_client) -> Iterator[BuiltOnce]:
    """`build()` run once for several tests that only read what it made: its rows in a transaction
    rolled back after the last of them, each test in a savepoint of it rolled back after the test
    (no test sees another's writes); its Redis keys put back by `restored()` before each test."""
    with _rolled_back(django_db_blocker):
        with django_db_blocker.unblock():
            result = build()
        keys = {key: (redis_client.dump(key), redis_client.pttl(key)) for key in run_keys(redis_client)}
        yield BuiltOnce(result, keys, redis_client)


def built_once_for_the_class(build: Callable):
    """A class-scoped fixture of `built_once(build)`, named by the module attribute it is assigned
    to; a class's tests call its `restored()` before each test."""

    @pytest.fixture(scope="class")
    def once(django_db_setup, django_db_blocker, redis_client):
        with built_once(build, django_db_blocker, redis_client) as built:
            yield built

    return once


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
    from rankings.operations.tokens import token_create

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=ingest_user)}")
    return client


def utc(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)


@pytest.fixture
def worker_and_beat(tmp_path):
    """A Celery worker and beat ticking every half second, both ready (the beat has sent a tick)."""
    from . import processes

    env = processes.django_env(RANKINGS_TICK_SECONDS=0.5)
    started = [
        processes.celery_worker(tmp_path, env, args=["--without-mingle", "--without-gossip"], wait=False),
        processes.celery_beat(tmp_path, env, wait=False),
    ]
    processes.wait_all_ready(started)
    yield started
    processes.stop_all(started)


@pytest.fixture
def own_redis(settings, tmp_path):
    """A Redis server of this test's own, so that stopping it disturbs nobody else."""
    from rankings.engine import store

    from . import processes

    server = processes.redis_server(tmp_path)
    settings.REDIS_URL, settings.REDIS_CLUSTER = server.url, False
    store.reset_clients()
    yield server
    server.kill()
    store.reset_clients()


# The browser tests' Chromium and page, for every browser module (each defines its own `shop`).
from .browser import chromium, chromium_path, page  # noqa: E402, F401

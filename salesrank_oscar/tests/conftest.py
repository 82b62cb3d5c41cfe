"""Fixtures of the app's tests: the example shop's database (each run's own, dropped after), a real
salesrank shared by the session's tests, and a small Oscar catalogue of each test's own.

The salesrank starts in the background as soon as the tests are collected, while the shop's
database is made and the tests that do not need it run first.
"""

import importlib
import itertools
import threading
from decimal import Decimal as D

import pytest
from django.core.cache import cache

from tests import processes
from tests.browser import chromium, chromium_path, page  # noqa: F401 (the suite's browser fixtures)

from . import shop_side
from .salesrank import salesrank_made

_started: dict = {}


def _needs(item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config, items):
    if not any(_needs(item, "salesrank") for item in items):
        return
    with_worker = any(_needs(item, "shop_worker") for item in items)
    # pytest's own temporary folder (its last few runs are kept), as tmp_path_factory gives it
    log_dir = config._tmp_path_factory.mktemp("salesrank")

    def start():
        try:
            server = _started["salesrank"] = salesrank_made(log_dir)
            started = server.start_all()
            if with_worker:
                started.append(_started.setdefault("shop_worker", shop_side.worker(log_dir, server)))
            processes.wait_all_ready(started)
        except BaseException as error:  # raised again by the fixture, in the test that waits for it
            _started["error"] = error

    _started["thread"] = threading.Thread(target=start, daemon=True)
    _started["thread"].start()
    items.sort(key=lambda item: _needs(item, "salesrank"))  # stable: the others first, in their order


def pytest_sessionfinish(session):
    """What the session started, stopped and dropped, however it ends (a failure under -x included)."""
    if "thread" in _started:
        _started["thread"].join()
    if "shop_worker" in _started:
        _started.pop("shop_worker").kill()
        shop_side.queue_delete()
    if "salesrank" in _started:
        _started.pop("salesrank").close()


def _waited(name: str):
    _started["thread"].join()
    if "error" in _started:
        raise _started["error"]
    return _started[name]


@pytest.fixture(scope="session")
def salesrank():
    """A real salesrank shared by the session's tests: web, worker, beat ticking every half second."""
    return _waited("salesrank")


@pytest.fixture(scope="session")
def shop_worker(salesrank):
    """The example shop's Celery worker, sending to the session's salesrank; stopped before the
    shop's test database is dropped."""
    yield _waited("shop_worker")
    _started.pop("shop_worker").kill()
    shop_side.queue_delete()


@pytest.fixture(scope="session", autouse=True)
def _emptied_by_delete():
    """A test that commits (the browser's) is followed by emptying every table. Django truncates
    them, which makes new files for each of Oscar's hundred tables (seconds each time); deleting
    the few rows a test leaves takes milliseconds. Django's foreign keys are checked at commit,
    when every table is empty, so the order of the deletes does not matter."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences:
            return truncate(self, style, tables, reset_sequences=True, allow_cascade=allow_cascade)
        return [f"DELETE FROM {self.quote_name(table)};" for table in tables]

    DatabaseOperations.sql_flush = sql_flush
    yield
    DatabaseOperations.sql_flush = truncate


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The tables are made from the models (--no-migrations); Oscar's catalogue also reads a
    materialised view that only its migration makes, so that migration's function makes it here."""
    from django.db import connection

    migration = importlib.import_module("oscar.apps.catalogue.migrations.0030_auto_20250217_1247")
    with django_db_blocker.unblock():
        migration.create_materialized_view(None, None)
        connection.close()


@pytest.fixture
def wired(settings, salesrank):
    """The shop's settings pointing at the session's salesrank, which is up."""
    if not salesrank.web.alive():
        salesrank.start()
    settings.SALESRANK_URL = salesrank.url
    settings.SALESRANK_TOKEN = salesrank.token
    return salesrank


@pytest.fixture(autouse=True)
def _forgotten():
    """Each test starts with nothing remembered of salesrank's answers (nor of it being down)."""
    cache.clear()
    yield
    cache.clear()


_tags = itertools.count(1)


@pytest.fixture
def catalogue(db):
    """Toys (with Board games under it) and Books, their slugs the test's own (the tests share one
    salesrank); a product in one, a product in two."""
    from oscar.core.loading import get_model
    from oscar.test.factories import create_product

    Category = get_model("catalogue", "Category")
    tag = next(_tags)
    toys = Category.add_root(name="Toys", slug=f"toys-{tag}")
    board_games = toys.add_child(name="Board games", slug=f"board-games-{tag}")
    books = Category.add_root(name="Books", slug=f"books-{tag}")
    chess = create_product(title="Chess set", price=D("25.00"), num_in_stock=1000)
    chess.categories.add(board_games)
    atlas = create_product(title="Atlas", price=D("12.50"), num_in_stock=1000)
    atlas.categories.add(books, toys)
    return {"toys": toys, "board_games": board_games, "books": books, "chess": chess, "atlas": atlas}

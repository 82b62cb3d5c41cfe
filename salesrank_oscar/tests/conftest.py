"""Fixtures of the app's tests: the example shop's database (each run's own, dropped after), a real
salesrank shared by the session's tests, and a small Oscar catalogue of each test's own.

The salesrank starts in the background as soon as the tests are collected, while the shop's
database is made and the tests that do not need it run first.
"""

import importlib
import itertools
import tempfile
import threading
from decimal import Decimal as D
from pathlib import Path

import pytest
from django.core.cache import cache

from .salesrank import salesrank_started

_starting: dict = {}


def _needs_salesrank(item) -> bool:
    return "salesrank" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config, items):
    if not any(_needs_salesrank(item) for item in items):
        return
    log_dir = Path(tempfile.mkdtemp(prefix="salesrank-oscar-"))

    def start():
        try:
            _starting["server"] = salesrank_started(log_dir)
        except BaseException as error:  # raised again by the fixture, in the test that waits for it
            _starting["error"] = error

    _starting["thread"] = threading.Thread(target=start, daemon=True)
    _starting["thread"].start()
    items.sort(key=_needs_salesrank)  # stable: the others first, in their order


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The tables are made from the models (--no-migrations); Oscar's catalogue also reads a
    materialised view that only its migration makes, so that migration's function makes it here."""
    from django.db import connection

    migration = importlib.import_module("oscar.apps.catalogue.migrations.0030_auto_20250217_1247")
    with django_db_blocker.unblock():
        migration.create_materialized_view(None, None)
        connection.close()


def pytest_sessionfinish(session):
    """The salesrank stopped and dropped, however the session ends (a failure under -x included)."""
    if "thread" in _starting:
        _starting["thread"].join()
    if "server" in _starting:
        _starting.pop("server").close()


@pytest.fixture(scope="session")
def salesrank():
    _starting["thread"].join()
    if "error" in _starting:
        raise _starting["error"]
    return _starting["server"]


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

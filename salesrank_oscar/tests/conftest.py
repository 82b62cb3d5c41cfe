"""Fixtures of the app's tests: the example shop's database (each run's own, dropped after), a real
salesrank shared by the session's tests, and a small Oscar catalogue."""

import importlib
from decimal import Decimal as D

import pytest
from django.core.cache import cache

from .salesrank import salesrank_started


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The tables are made from the models (--no-migrations); Oscar's catalogue also reads a
    materialised view that only its migration makes, so that migration's function makes it here."""
    from django.db import connection

    migration = importlib.import_module("oscar.apps.catalogue.migrations.0030_auto_20250217_1247")
    with django_db_blocker.unblock():
        migration.create_materialized_view(None, None)
        connection.close()


@pytest.fixture(scope="session")
def salesrank(tmp_path_factory):
    server = salesrank_started(tmp_path_factory.mktemp("salesrank"))
    yield server
    server.close()


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


@pytest.fixture
def catalogue(db):
    """Toys (with Board games under it) and Books; a product in each, one in two."""
    from oscar.apps.catalogue.categories import create_from_breadcrumbs
    from oscar.test.factories import create_product

    toys = create_from_breadcrumbs("Toys")
    board_games = create_from_breadcrumbs("Toys > Board games")
    books = create_from_breadcrumbs("Books")
    chess = create_product(title="Chess set", price=D("25.00"), num_in_stock=1000)
    chess.categories.add(board_games)
    atlas = create_product(title="Atlas", price=D("12.50"), num_in_stock=1000)
    atlas.categories.add(books, toys)
    return {"toys": toys, "board_games": board_games, "books": books, "chess": chess, "atlas": atlas}

"""What tests/conftest.py's replacement of Django's `sql_flush` relies on, pinned.

The suite empties the database after each test that commits with DELETE
instead of TRUNCATE (milliseconds instead of half a second). It replaces
`DatabaseOperations.sql_flush` of Django's PostgreSQL backend; if Django
changes that method's signature, or stops emptying the database through it,
these tests fail before the replacement silently stops applying.
"""

import inspect

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.core.management.color import no_style
from django.core.management.sql import sql_flush
from django.db import connection
from django.db.backends.postgresql.operations import DatabaseOperations
from django.test.utils import CaptureQueriesContext

from catalogue.models import Category, Product

from .conftest import KEPT_BY_FLUSH


def test_the_replacement_takes_the_arguments_django_s_method_takes():
    replaced = DatabaseOperations.sql_flush.__wrapped__

    assert inspect.signature(DatabaseOperations.sql_flush) == inspect.signature(replaced)
    assert list(inspect.signature(replaced).parameters) == [
        "self",
        "style",
        "tables",
        "reset_sequences",
        "allow_cascade",
    ]


@pytest.mark.django_db
def test_django_s_flush_goes_through_the_backend_s_sql_flush():
    """The flush command (run after each test that commits) asks the backend for its statements:
    the replacement's DELETEs, Django's own TRUNCATE where sequences are reset."""
    tables = ["catalogue_category"]

    assert sql_flush(no_style(), connection, reset_sequences=False) == [
        f"DELETE FROM {connection.ops.quote_name(table)};"
        for table in connection.introspection.django_table_names(only_existing=True, include_views=False)
        if table not in KEPT_BY_FLUSH
    ]
    truncating = DatabaseOperations.sql_flush.__wrapped__(connection.ops, no_style(), tables)
    assert truncating and truncating[0].startswith("TRUNCATE")
    assert connection.ops.sql_flush(no_style(), tables, reset_sequences=True)[0].startswith("TRUNCATE")


@pytest.mark.django_db(transaction=True)
def test_deleting_in_any_order_empties_tables_that_reference_each_other():
    """The DELETEs come in Django's table order, not by references: the foreign keys are checked
    at commit, when every table is empty."""
    toys = Category.objects.create(slug="toys", name="Toys")
    Category.objects.create(slug="lego", name="Lego", parent=toys)
    Product.objects.create(product_id="p1", name="Kite").categories.add(toys)

    call_command("flush", interactive=False, verbosity=0, reset_sequences=False)  # as after a test

    assert not Category.objects.exists() and not Product.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_rows_kept_are_those_post_migrate_makes_and_it_finds_them_all():
    """The content types and permissions outlive the emptying after a test that commits (the flush
    command as pytest-django runs it) unchanged: post_migrate, which Django sends after it, finds
    every row it would make and inserts none."""
    kept = {
        ContentType: set(ContentType.objects.values_list("id", "app_label", "model")),
        Permission: set(Permission.objects.values_list("id", "content_type_id", "codename")),
    }
    assert all(kept.values())
    assert {model._meta.db_table for model in kept} == set(KEPT_BY_FLUSH)
    get_user_model().objects.create_user("flushed")

    with CaptureQueriesContext(connection) as queries:
        call_command("flush", interactive=False, verbosity=0, reset_sequences=False)

    assert not get_user_model().objects.exists()
    assert not [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert set(ContentType.objects.values_list("id", "app_label", "model")) == kept[ContentType]
    assert set(Permission.objects.values_list("id", "content_type_id", "codename")) == kept[Permission]

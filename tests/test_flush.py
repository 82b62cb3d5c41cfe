"""What tests/conftest.py's replacement of Django's `sql_flush` relies on, pinned.

The suite empties the database after each test that commits with DELETE
instead of TRUNCATE (milliseconds instead of half a second). It replaces
`DatabaseOperations.sql_flush` of Django's PostgreSQL backend; if Django
changes that method's signature, or stops emptying the database through it,
these tests fail before the replacement silently stops applying.
"""

import inspect

import pytest
from django.core.management import call_command
from django.core.management.color import no_style
from django.core.management.sql import sql_flush
from django.db import connection
from django.db.backends.postgresql.operations import DatabaseOperations

from catalogue.models import Category, Product


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

    call_command("flush", interactive=False, verbosity=0)

    assert not Category.objects.exists() and not Product.objects.exists()

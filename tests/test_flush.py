"""What tests/conftest.py's replacement of Django's `sql_flush` relies on, pinned.

The suite empties the database after each test that commits with DELETE
instead of TRUNCATE (milliseconds instead of half a second), all in one
statement. It replaces `DatabaseOperations.sql_flush` of Django's PostgreSQL
backend; if Django changes that method's signature, or stops emptying the
database through it, these tests fail before the replacement silently stops
applying. It sends post_migrate after the emptying only when the rows that
post_migrate makes changed since it was last sent; that it still makes them
again when a test deleted some, and that its receivers fill nothing else, is
pinned too.
"""

import inspect

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.core.management.color import no_style
from django.core.management.sql import emit_post_migrate_signal, sql_flush
from django.db import connection
from django.db.backends.postgresql.operations import DatabaseOperations
from django.db.models.signals import post_migrate
from django.test.utils import CaptureQueriesContext

from catalogue.models import Category, Product

from .conftest import KEPT_BY_FLUSH, POST_MIGRATE_FILLS_KEPT


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
    the replacement's DELETEs in one, Django's own TRUNCATE where sequences are reset."""
    tables = ["catalogue_category"]

    (deletes,) = sql_flush(no_style(), connection, reset_sequences=False)
    assert sorted(deletes.split(" ")[2::3]) == sorted(
        f"{connection.ops.quote_name(table)};"
        for table in connection.introspection.django_table_names(only_existing=True, include_views=False)
        if table not in KEPT_BY_FLUSH
    )
    assert deletes == " ".join(f"DELETE FROM {table}" for table in deletes.split(" ")[2::3])
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
    command as pytest-django runs it) unchanged: post_migrate, which Django sends after it (here
    sent whether or not they changed), finds every row it would make and inserts none."""
    kept = {
        ContentType: set(ContentType.objects.values_list("id", "app_label", "model")),
        Permission: set(Permission.objects.values_list("id", "content_type_id", "codename")),
    }
    assert all(kept.values())
    assert {model._meta.db_table for model in kept} == set(KEPT_BY_FLUSH)
    get_user_model().objects.create_user("flushed")

    with CaptureQueriesContext(connection) as queries:
        call_command("flush", interactive=False, verbosity=0, reset_sequences=False)
        emit_post_migrate_signal(0, False, "default")  # as the flush does when they changed

    assert not get_user_model().objects.exists()
    assert not [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert set(ContentType.objects.values_list("id", "app_label", "model")) == kept[ContentType]
    assert set(Permission.objects.values_list("id", "content_type_id", "codename")) == kept[Permission]


def test_post_migrate_s_receivers_fill_only_the_kept_tables():
    """Left out when the kept rows are unchanged, post_migrate must make nothing else: a receiver
    that filled another table would leave it empty after an emptying."""
    receivers = set()
    for app_config in apps.get_app_configs():
        sync, async_ = post_migrate._live_receivers(app_config)
        receivers |= {f"{receiver.__module__}.{receiver.__qualname__}" for receiver in sync + async_}

    assert receivers == set(POST_MIGRATE_FILLS_KEPT)


@pytest.mark.django_db(transaction=True)
def test_post_migrate_is_sent_again_only_when_a_test_changed_the_rows_it_makes():
    sent = []

    def receiver(sender, **kwargs):
        sent.append(sender.label)

    call_command("flush", interactive=False, verbosity=0, reset_sequences=False)  # sent, or not: as before
    post_migrate.connect(receiver, dispatch_uid="test_flush")
    try:
        call_command("flush", interactive=False, verbosity=0, reset_sequences=False)
        assert sent == []  # the rows are as the last emptying left them
        Permission.objects.get(codename="add_sale", content_type__app_label="rankings").delete()

        call_command("flush", interactive=False, verbosity=0, reset_sequences=False)
    finally:
        post_migrate.disconnect(dispatch_uid="test_flush")

    assert "rankings" in sent
    assert Permission.objects.filter(codename="add_sale", content_type__app_label="rankings").exists()

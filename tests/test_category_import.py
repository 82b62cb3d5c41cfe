"""import_categories FILE: bad input is refused as "line N: reason" with nothing written; an import
in progress holds no lock that a sale waits for, and reads no more of the catalogue than its rows name."""

import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from catalogue.models import Category, Product
from catalogue.tree_import import categories_import

from .rankings_helpers import Shop, table_rows_read

DEADLINE = 30  # seconds: how long a test waits for the other thread before it fails


def _import(tmp_path, content: bytes) -> None:
    path = tmp_path / "tree.csv"
    path.write_bytes(content)
    call_command("import_categories", str(path))


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"toys,Toys,\ngames,Games \xff,toys\n", r"line 2: .*not valid UTF-8"),
        (b"toys,Toys,\ngames,Ga\x00mes,toys\n", r"line 2: .*NUL"),
        (b"toys,Toys,\ngames," + b"G" * (200 * 1024) + b",toys\n", r"line 2: .*field larger"),
        (b"toys,Toys,\ngames,Games\x07,toys\n", r"line 2: .*control or bidirectional"),
        ("toys,Toys,\ngames,\u202eGames,toys\n".encode(), r"line 2: .*control or bidirectional"),
        (b'toys,Toys,\ngames,"Games\nand more",toys\n', r"line 2: .*control or bidirectional"),
    ],
    ids=["invalid-utf8", "nul", "huge-field", "control", "bidi", "newline"],
)
def test_bad_input_is_refused_with_its_line_and_nothing_is_written(tmp_path, content, reason):
    with pytest.raises(CommandError, match=reason):
        _import(tmp_path, content)
    assert not Category.objects.exists()


@pytest.mark.django_db
def test_a_file_with_a_byte_order_mark_is_imported_header_and_all(tmp_path):
    """Spreadsheets write UTF-8 with a byte-order mark: the header is still recognised as one."""
    _import(tmp_path, "\ufeffslug,name,parent\ntoys,Toys,\ngames,Jeux de société,toys\n".encode())
    assert dict(Category.objects.values_list("slug", "parent__slug")) == {"toys": None, "games": "toys"}
    assert Category.objects.get(slug="games").name == "Jeux de société"


# --- locks and reads ----------------------------------------------------------------------------------


def _categories_inserted(count: int) -> None:
    """`count` categories, 1 in 10 under one of the first ten, by one statement; then analysed, as
    autovacuum would have done for a catalogue this size."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO catalogue_category (slug, name, is_placeholder, has_sales) "
            "SELECT 'bulk-' || i, 'Bulk ' || i, false, false FROM generate_series(1, %s) AS i",
            [count],
        )
        cursor.execute(
            "UPDATE catalogue_category c SET parent_id = p.id FROM catalogue_category p "
            "WHERE c.slug LIKE 'bulk-%0' AND p.slug = 'bulk-' || (substr(c.slug, 6)::int % 10 + 1)"
            " AND c.slug <> p.slug"
        )
        cursor.execute("ANALYZE catalogue_category")


def _tree_file(rows: int) -> list[str]:
    lines = ["slug,name,parent", "imported,Imported,"]
    lines += [f"imported-{i},Imported {i},imported" for i in range(rows)]
    lines += [f"bulk-{i},Bulk {i} renamed,bulk-{i % 10 + 1}" for i in range(20, 20 + rows * 10, 10)]
    return [line + "\n" for line in lines]


@pytest.mark.django_db
def test_an_import_reads_the_rows_it_names_not_the_whole_catalogue():
    """An import of 100 rows into 30,000 categories reads about what it names, in a number of
    statements that follows neither its rows nor the catalogue's size."""
    # given a large catalogue
    _categories_inserted(30_000)
    # when 100 rows (half new, half renamed existing ones) are imported
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        before = table_rows_read("catalogue_category")
        report = categories_import(lines=_tree_file(50))
        read = table_rows_read("catalogue_category") - before
    # then the import read rows in proportion to its own (and their ancestors), not 30,000
    assert len(report.created) == 51 and len(report.updated) == 50
    assert read < 2_000, read
    assert len(queries) <= 20, len(queries)


@pytest.mark.django_db(transaction=True)
def test_a_sale_is_not_held_up_by_an_import_in_progress():
    """A sale creating a new product in existing categories, while an import that renames and adds
    categories is open, is stored at once (a lock wait would give up after lock_timeout)."""
    # given categories with sales, one of which the import renames
    shop = Shop()
    for slug in ("toys", "garden", "games"):
        Category.objects.create(slug=slug, name=slug.title())
    shop.send(shop.sale("first", categories=["toys", "garden", "games"]))
    lines = ["toys,Toys,\n", "games,Games and puzzles,toys\n", "strategy,Strategy,games\n"]
    imported, release, errors = threading.Event(), threading.Event(), []

    def import_held_open():
        try:
            with transaction.atomic():
                categories_import(lines=lines)
                imported.set()
                assert release.wait(DEADLINE)
        except BaseException as error:  # surfaced by the test
            errors.append(error)
        finally:
            imported.set()
            connection.close()

    thread = threading.Thread(target=import_held_open)
    thread.start()
    try:
        assert imported.wait(DEADLINE)
        assert not errors, errors
        # when a sale of a new product in those categories arrives meanwhile
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")
        try:
            shop.send(shop.sale("new-product", categories=["toys", "garden", "games"]))
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
    finally:
        release.set()
        thread.join(DEADLINE)
    # then the sale was stored while the import was open, and the import then committed
    assert not errors, errors
    assert Product.objects.filter(product_id="new-product").exists()
    assert Category.objects.get(slug="games").parent.slug == "toys"


@pytest.mark.django_db
def test_the_tree_guard_reads_the_levels_below_a_category_not_the_catalogue():
    """The database's guard, run for every parent set (an import's attach, an admin's save), counts
    the levels below the category by index lookups, however often the session has run it."""
    _categories_inserted(30_000)
    leaves = list(
        Category.objects.filter(parent__isnull=True).order_by("pk").values_list("pk", flat=True)[20:40]
    )
    root = Category.objects.get(slug="bulk-1")
    reads = []
    for pk in leaves:
        before = table_rows_read("catalogue_category")
        Category.objects.filter(pk=pk).update(parent=root)
        reads.append(table_rows_read("catalogue_category") - before)
    for i in range(20):
        before = table_rows_read("catalogue_category")
        Category.objects.create(slug=f"new-{i}", name=f"New {i}", parent=root)
        reads.append(table_rows_read("catalogue_category") - before)
    assert max(reads) < 100, reads


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["Games\u202e", "Games\x07", "Line\nbreak"])
def test_the_admin_refuses_control_and_bidi_characters_in_names(admin_client, name):
    from django.urls import reverse

    reply = admin_client.post(reverse("admin:catalogue_category_add"), {"slug": "games", "name": name})
    product = admin_client.post(
        reverse("admin:catalogue_product_add"), {"product_id": "p1", "name": name, "price_cents": 1}
    )
    assert reply.status_code == product.status_code == 200
    assert "control or bidirectional" in reply.content.decode()
    assert not Category.objects.exists() and not Product.objects.exists()

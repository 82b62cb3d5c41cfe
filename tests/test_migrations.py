"""Migrations that rewrite stored data keep it: a deployment's logged batches survive the upgrade, and
every migration that runs SQL can be undone and done again on a database with data."""

import datetime as dt
import importlib
import json
import zlib

import pytest
from django.db import DatabaseError, connection, migrations
from django.db.migrations.exceptions import IrreversibleError
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from catalogue.models import Category, Product
from rankings.engine.partitions import partitions_forget
from rankings.engine.shards import shard_count
from rankings.ingest.engagement import engagements_ingest
from rankings.ingest.sales import sales_ingest
from rankings.models import Batch, Snapshot, SnapshotHour, SnapshotMark

BEFORE = [("rankings", "0014_ticklog_shards")]
AFTER = [("rankings", "0015_batch_changes_packed")]


def _migrate(targets) -> None:
    MigrationExecutor(connection).migrate(targets)


@pytest.mark.django_db(transaction=True)
def test_batches_logged_as_json_read_back_the_same_after_packing():
    changes = [["7d", "units", "toys", "p1", 3], ["1h", "revenue", "all", "p-2", -250]]
    latest = [(app, name) for app, name in MigrationExecutor(connection).loader.graph.leaf_nodes()]
    view = {"ts": timezone.now().isoformat(), "productId": "p1", "kind": "view"}
    assert engagements_ingest(events=[view]).accepted == 1  # its day's partition is now known
    try:
        # given a batch logged before the change, as jsonb
        _migrate(BEFORE)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO rankings_batch (shard, seq, as_of, changes, sales, applied, created_at)"
                " VALUES (0, 1, now(), %s::jsonb, 2, false, now())",
                ['[["7d", "units", "toys", "p1", 3], ["1h", "revenue", "all", "p-2", -250]]'],
            )
        # when the migration packs it, then the model reads the same changes
        _migrate(AFTER)
        assert Batch.objects.get(shard=0, seq=1).changes == changes
        # and back: the packed batch becomes the same JSON again
        _migrate(BEFORE)
        with connection.cursor() as cursor:
            cursor.execute("SELECT changes FROM rankings_batch WHERE shard = 0 AND seq = 1")
            assert json.loads(cursor.fetchone()[0]) == changes  # Django reads jsonb as text
    finally:
        _migrate(latest)
        # Going back dropped the partitioned engagement table with its days; the forward
        # migration made it again without them.
        partitions_forget()
    # then a view of the same day is stored in the day's partition made again
    assert engagements_ingest(events=[view]).accepted == 1


@pytest.mark.django_db(transaction=True)
def test_going_back_before_hashed_tokens_is_refused_and_keeps_every_token(ingest_user):
    """The clear-text keys are gone after 0019: going back could only drop the hashed tokens."""
    from rankings.operations.tokens import token_create

    token_create(user=ingest_user)
    latest = [(app, name) for app, name in MigrationExecutor(connection).loader.graph.leaf_nodes()]
    try:
        with pytest.raises(IrreversibleError, match="ingest_token"):
            _migrate([("rankings", "0018_snapshots")])
    finally:
        _migrate(latest)
    assert ingest_user.api_tokens.count() == 1


# The apps whose migrations run SQL of their own.
APPS = ("rankings", "catalogue")

# Everything a migration may change in the schema, one row per object: (kind and name, definition).
# Partitions are left out (the months of sales and days of engagement events are made as rows
# arrive); the partitions of sales are compared apart.
_SCHEMA = """
WITH rel AS (
    SELECT c.oid, c.relname, c.relkind, c.relispartition FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND NOT c.relispartition
)
SELECT 'relation ' || relname, relkind::text || coalesce(' ' || pg_get_partkeydef(oid), '') FROM rel
UNION ALL
SELECT format('column %s.%s', rel.relname, a.attname),
    concat_ws(' ', format_type(a.atttypid, a.atttypmod), CASE WHEN a.attnotnull THEN 'not null' END,
        'identity ' || nullif(a.attidentity::text, ''), 'default ' || pg_get_expr(d.adbin, d.adrelid))
FROM rel JOIN pg_attribute a ON a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE rel.relkind IN ('r', 'p', 'v')
UNION ALL
SELECT 'order of ' || rel.relname, string_agg(a.attname, ', ' ORDER BY a.attnum)
FROM rel JOIN pg_attribute a ON a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE rel.relkind IN ('r', 'p', 'v') GROUP BY rel.relname
UNION ALL
SELECT 'index ' || i.relname, pg_get_indexdef(i.oid) FROM pg_index x
JOIN rel t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
UNION ALL
SELECT format('constraint %s.%s', t.relname, con.conname), pg_get_constraintdef(con.oid)
FROM pg_constraint con JOIN rel t ON t.oid = con.conrelid
UNION ALL
SELECT format('trigger %s.%s', t.relname, tg.tgname), pg_get_triggerdef(tg.oid)
FROM pg_trigger tg JOIN rel t ON t.oid = tg.tgrelid WHERE NOT tg.tgisinternal
UNION ALL
SELECT format('function %s(%s)', p.proname, pg_get_function_identity_arguments(p.oid)), pg_get_functiondef(p.oid)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
UNION ALL
SELECT 'sequence ' || s.relname, concat_ws(' ', format_type(q.seqtypid, NULL), q.seqstart, q.seqincrement,
    (SELECT format('owned by %s.%s', d.refobjid::regclass, d.refobjsubid) FROM pg_depend d
     WHERE d.classid = 'pg_class'::regclass AND d.objid = s.oid AND d.deptype IN ('a', 'i')))
FROM rel s JOIN pg_sequence q ON q.seqrelid = s.oid
"""


def _schema(*, ordered: bool = True) -> dict[str, str]:
    """The schema; without the order of each table's columns if not `ordered` (Django's reverse of a
    RemoveField adds the column back after the others, where going forward left it in its place)."""
    with connection.cursor() as cursor:
        cursor.execute(_SCHEMA)
        return {
            name: definition
            for name, definition in cursor.fetchall()
            if ordered or not name.startswith("order of ")
        }


def _rows() -> dict[str, int]:
    """The row count of every table (a partitioned one with its partitions), but the migrations' record."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
            " AND c.relname <> 'django_migrations'"
        )
        tables = sorted(name for (name,) in cursor.fetchall())
        cursor.execute(
            "SELECT " + ", ".join(f"(SELECT count(*) FROM {connection.ops.quote_name(t)})" for t in tables)
        )
        return dict(zip(tables, cursor.fetchone(), strict=True))


def _sales_stored() -> tuple[dict[str, str], tuple[int, bool]]:
    """The partitions of the raw sales with their bounds, and where the sales' ids go on from."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'rankings_sale'::regclass"
        )
        partitions = dict(cursor.fetchall())
        cursor.execute("SELECT last_value, is_called FROM rankings_sale_id_seq")
        return partitions, cursor.fetchone()


def _empty_months_dropped() -> None:
    """Drop the sales' month partitions that hold no sale (earlier tests of the worker leave some):
    going back to one plain table and forward again makes only the months that hold sales, as the
    release that partitioned the sales did."""
    with connection.cursor() as cursor:
        for name in _sales_stored()[0]:
            cursor.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {connection.ops.quote_name(name)})")
            if cursor.fetchone()[0] and name != "rankings_sale_p_before":
                cursor.execute(f"DROP TABLE {connection.ops.quote_name(name)}")
    partitions_forget()


def _runs_sql(operations) -> bool:
    return any(
        isinstance(op, migrations.RunSQL)
        or (isinstance(op, migrations.SeparateDatabaseAndState) and _runs_sql(op.database_operations))
        for op in operations
    )


def _steps_back() -> list[list[tuple[str, str]]]:
    """The targets that undo each migration that runs SQL in turn, the one that takes the fewest
    others with it first: each step undoes one more of them, and what depends on it."""
    loader = MigrationLoader(None)
    graph = loader.graph
    with_sql = [
        key
        for key, migration in loader.disk_migrations.items()
        if key[0] in APPS and _runs_sql(migration.operations)
    ]
    assert len(with_sql) >= 10  # the loader found them
    latest = dict(graph.leaf_nodes())
    undone: set[tuple[str, str]] = set()
    steps = []
    for key in sorted(with_sql, key=lambda key: (len(set(graph.backwards_plan(key))), key)):
        undone |= set(graph.backwards_plan(key))
        # In each app, the migration before the first one undone, or its latest.
        first = {app: min((name for a, name in undone if a == app), default=None) for app in APPS}
        steps.append(
            [
                (app, latest[app] if name is None else _previous(graph, (app, name)))
                for app, name in first.items()
            ]
        )
    return steps


def _previous(graph, key: tuple[str, str]) -> str:
    return next(name for app, name in graph.node_map[key].parents if app == key[0])


def _data() -> None:
    """Categories with parents, sales of several months (one returned), engagement events, the
    active version's snapshots of an hour and a logged batch."""
    toys = Category.objects.create(slug="toys", name="Toys")
    lego = Category.objects.create(slug="lego", name="Lego", parent=toys)
    Category.objects.create(slug="duplo", name="Duplo", parent=lego)
    Product.objects.create(product_id="brick", name="Brick", price_cents=250)
    now = timezone.now()
    months = [dt.datetime(2025, month, 10, 12, tzinfo=dt.UTC) for month in (1, 3, 4)]
    sales = [
        {"id": f"s{n}", "ts": ts.isoformat(), "productId": product, "categories": [slug], "qty": 2}
        for n, (ts, product, slug) in enumerate(
            [
                (months[0], "brick", "lego"),
                (months[1], "brick", "duplo"),
                (months[2], "car", "toys"),
                (now, "car", "toys"),
            ]
        )
    ]
    sales.append({"id": "r0", "ts": months[2].isoformat(), "productId": "brick", "qty": -1, "returnOf": "s1"})
    assert sales_ingest(events=sales, now=now).accepted == 5
    views = [{"ts": now.isoformat(), "productId": product, "kind": "view"} for product in ("brick", "car")]
    assert engagements_ingest(events=views, now=now).accepted == 2
    hour = now.replace(minute=0, second=0, microsecond=0)
    for window in ("1h", "7d"):
        Snapshot.objects.create(
            version=1, at=hour, window=window, metric="units", category="toys", products=["car"]
        )
    SnapshotHour.objects.create(version=1, at=hour)
    SnapshotMark.objects.bulk_create([SnapshotMark(shard=shard, at=hour) for shard in range(2)])
    Batch.objects.create(shard=0, seq=1, as_of=now, changes=[["7d", "units", "toys", "car", 2]], sales=1)


@pytest.mark.django_db(transaction=True)
def test_every_migration_that_runs_sql_is_undone_and_done_again_keeping_the_data(partitions_dropped):
    """Going back, one migration that runs SQL more at a time, keeps every row of every table that
    stays; forward again, each state on the way has the schema it had on the way back; and at the
    latest, the schema, the rows of every table that stayed all the way, the sales' months and the
    logged batch are as they were."""
    latest = list(MigrationExecutor(connection).loader.graph.leaf_nodes())
    _empty_months_dropped()
    _data()
    schema, rows, sales = _schema(), _rows(), _sales_stored()
    assert {f"rankings_sale_p2025_0{month}" for month in (1, 3, 4)} < set(sales[0])
    assert rows["rankings_engagement"] == 2 and rows["rankings_snapshot"] == 2
    counted, shards = rows, shard_count()
    way_back = []
    try:
        # when going back, undoing one migration that runs SQL more at each step
        for targets in _steps_back():
            _migrate(targets)
            # then each step keeps every row of each table it keeps
            after = _rows()
            assert after == {table: counted[table] for table in after}, targets
            counted = after
            way_back.append((targets, _schema(ordered=False)))
        # and the categories have the shards the release before them stored
        with connection.cursor() as cursor:
            cursor.execute("SELECT slug, shard FROM catalogue_category")
            assert dict(cursor.fetchall()) == {
                slug: zlib.crc32(slug.encode()) % shards for slug in ("toys", "lego", "duplo")
            }
        # when going forward again through the same states, then each has the schema it had
        for targets, then in reversed(way_back[:-1]):
            _migrate(targets)
            assert _schema(ordered=False) == then, targets
        _migrate(latest)
        # and at the latest, so has the database, every table kept all the way has its rows, the
        # sales are in the months' partitions again, their ids go on from where they were, and the
        # logged batch reads the same
        assert _schema() == schema
        assert {table: count for table, count in _rows().items() if table in counted} == counted
        assert _sales_stored() == sales
        assert Batch.objects.get().changes == [["7d", "units", "toys", "car", 2]]
    finally:
        _migrate(latest)


@pytest.mark.django_db(transaction=True)
def test_the_active_versions_snapshots_go_back_before_versions_and_forward_again():
    """Before 0020 a snapshot was the active version's, keyed by board and hour: going back keeps
    each, and forward again each is the active version's, of the hours the ticks marked."""
    # given the active version's snapshots of an hour two shards marked
    latest = list(MigrationExecutor(connection).loader.graph.leaf_nodes())
    shard_count()  # version 1 is the active one
    version = 1
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    for window in ("1h", "7d"):
        Snapshot.objects.create(
            version=version, at=hour, window=window, metric="units", category="toys", products=["p"]
        )
    SnapshotHour.objects.create(version=version, at=hour)
    SnapshotMark.objects.bulk_create([SnapshotMark(shard=shard, at=hour) for shard in range(2)])
    snapshots = sorted(Snapshot.objects.values_list("version", "at", "window", "category", "products"))
    try:
        # when going back before 0020, then every snapshot is kept
        _migrate([("rankings", "0019_api_tokens")])
        assert _rows()["rankings_snapshot"] == 2
        # and when going forward again, then they and their hour are the active version's again
        _migrate(latest)
        assert (
            sorted(Snapshot.objects.values_list("version", "at", "window", "category", "products"))
            == snapshots
        )
        assert list(SnapshotHour.objects.values_list("version", "at")) == [(version, hour)]
    finally:
        _migrate(latest)


@pytest.mark.django_db(transaction=True)
def test_going_back_before_snapshot_versions_is_refused_while_another_version_has_a_history():
    """The earlier release keeps one history, the active version's: going back while a version
    switched away from (or rebuilt) still has one would lose it, so it is refused, keeping it."""
    latest = list(MigrationExecutor(connection).loader.graph.leaf_nodes())
    shard_count()  # version 1 is the active one
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    Snapshot.objects.create(version=2, at=hour, window="7d", metric="units", category="toys", products=["p"])
    SnapshotHour.objects.bulk_create([SnapshotHour(version=version, at=hour) for version in (1, 2)])
    try:
        with pytest.raises(
            DatabaseError, match=r"versions other than the active one \(1\) have a history: 2"
        ):
            _migrate([("rankings", "0019_api_tokens")])
    finally:
        _migrate(latest)
    assert Snapshot.objects.filter(version=2).count() == 1 and SnapshotHour.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_going_back_before_unstored_shards_is_refused_without_an_active_version():
    """A category's shard, as the earlier release stored it, depends on the shard count that only an
    active ranking version records: without one, going back past 0003 is refused."""
    Category.objects.create(slug="toys", name="Toys")
    going_back = importlib.import_module("catalogue.migrations.0003_shards_category_has_sales").shards_restore
    with (
        pytest.raises(IrreversibleError, match="without an active ranking version"),
        connection.schema_editor() as editor,
    ):
        going_back(None, editor)


@pytest.mark.django_db(transaction=True)
def test_a_snapshot_s_ranks_keep_their_order_from_an_array_to_text_and_back():
    """0031 stores a snapshot's ranks as one text of ids, no longer an array: rows written before it
    read the same ids in the same order after it, compressed with LZ4 still, and going back gives
    the array again."""
    latest = list(MigrationExecutor(connection).loader.graph.leaf_nodes())
    before = [("rankings", "0030_engagement_received_at_by_database")]
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    ids = [f"product-{n:06d}" for n in range(1000, 0, -1)]  # 15 kB: compressed, not kept inline
    try:
        # given a snapshot written as an array, before 0031
        _migrate(before)
        with connection.cursor() as cursor:
            cursor.execute(
                'INSERT INTO rankings_snapshot (version, at, "window", metric, category, products)'
                " VALUES (1, %s, '1d', 'units', 'toys', %s), (1, %s, '1d', 'units', 'games', %s)",
                [hour, ids, hour, ["p:1", "p.2", "p-3"]],
            )
        # when migrating forward, then its ids are read in their order, and stored with LZ4
        _migrate(latest)
        assert dict(Snapshot.objects.values_list("category", "products")) == {
            "toys": ids,
            "games": ["p:1", "p.2", "p-3"],
        }
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_column_compression(products) FROM rankings_snapshot WHERE category = 'toys'"
            )
            assert cursor.fetchone() == ("lz4",)
        # and when going back, then they are an array again
        _migrate(before)
        with connection.cursor() as cursor:
            cursor.execute("SELECT category, products FROM rankings_snapshot")
            assert dict(cursor.fetchall()) == {"toys": ids, "games": ["p:1", "p.2", "p-3"]}
    finally:
        _migrate(latest)

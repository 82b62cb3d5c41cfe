"""What 1,000 sales write, at ingest and at the tick that claims them: rows and index entries per
table, and WAL bytes of those transactions only (read back with pg_walinspect, so that other
sessions' writes do not count): `pytest -s tests/measure_sale_writes.py`. Ten batches of 100, as
the API takes them, of sales counting in a category and its parent (two boards, one or two shards)."""

import datetime as dt

import pytest
from django.db import connection

from catalogue.models import Category, Product
from rankings.engine.batches import _claim_and_record
from rankings.engine.partitions import sale_partitions_ensure
from rankings.engine.shards import active
from rankings.engine.tick import tick
from rankings.ingest.sales import sales_ingest

pytestmark = pytest.mark.django_db(transaction=True)

NOW = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
BATCHES, PER_BATCH = 10, 100


def _counters() -> dict[str, tuple[int, int, int]]:
    """table (partitions under their parent's name) -> (rows inserted, updated, deleted)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute(
            "SELECT coalesce(i.inhparent::regclass::text, t.relname), sum(n_tup_ins), sum(n_tup_upd), sum(n_tup_del)"
            " FROM pg_stat_user_tables t LEFT JOIN pg_inherits i ON i.inhrelid = t.relid"
            " WHERE t.relname LIKE 'rankings_%%' GROUP BY 1"
        )
        return {name: (int(a), int(b), int(c)) for name, a, b, c in cursor.fetchall()}


def _indexes() -> dict[str, int]:
    """table -> its indexes (a partitioned table's, as each partition has them)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.relname, count(*) FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid"
            " WHERE t.relname LIKE 'rankings_%%' AND t.relkind IN ('r', 'p') AND NOT t.relispartition GROUP BY 1"
        )
        return dict(cursor.fetchall())


def _wal(start: str) -> tuple[int, int, int]:
    """(records, bytes, of which full-page images) of the WAL since `start` that write blocks of
    this database's relations (other sessions of the machine write other databases)."""
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")  # the tests' commits do not wait for the WAL: flushed here
        cursor.execute(
            "SELECT count(*), coalesce(sum(record_length), 0), coalesce(sum(fpi_length), 0)"
            " FROM pg_get_wal_records_info_till_end_of_wal(%s::pg_lsn)"
            " WHERE block_ref LIKE '%%/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/%%'",
            [start],
        )
        return cursor.fetchone()


def _measured(step) -> tuple[str, dict, tuple[int, int, int]]:
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")
        cursor.execute("SELECT pg_current_wal_lsn()::text")
        (start,) = cursor.fetchone()
    before = _counters()
    step()
    after = _counters()
    changed = {
        table: tuple(a - b for a, b in zip(after[table], before.get(table, (0, 0, 0)), strict=True))
        for table in after
        if after[table] != before.get(table)
    }
    return start, changed, _wal(start)


def _report(name: str, changed: dict, wal: tuple[int, int, int], indexes: dict[str, int]) -> None:
    print(f"\n{name}: per {BATCHES * PER_BATCH} sales")
    entries = 0
    for table, (ins, upd, dele) in sorted(changed.items()):
        table = table.removeprefix("public.")
        written = ins + upd
        entries += written * indexes.get(table, 0)
        print(f"  {table}: {ins} inserted, {upd} updated, {dele} deleted; {indexes.get(table, 0)} indexes")
    records, size, fpi = wal
    print(f"  index entries written (at most; HOT updates write none): {entries}")
    print(
        f"  WAL: {records} records, {size} bytes, of which full-page images {fpi} bytes; without them {size - fpi}"
    )


def test_measure(settings):
    settings.RANKINGS = {**settings.RANKINGS, "TICK_PARALLEL_FROM": 10**9}
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    toys = Category.objects.create(slug="toys", name="Toys", has_sales=True)
    Category.objects.create(slug="lego", name="Lego", parent=toys, has_sales=True)
    Product.objects.bulk_create([Product(product_id=f"p{n}", name=f"p{n}") for n in range(100)])
    sale_partitions_ensure([NOW - dt.timedelta(days=1), NOW + dt.timedelta(days=1)])
    active()
    tick(now=NOW, log_tick=False)  # the shards' states
    indexes = _indexes()

    def ingest() -> None:
        for b in range(BATCHES):
            sales_ingest(
                events=[
                    {
                        "id": f"s{b}-{n}",
                        "ts": (NOW - dt.timedelta(seconds=n)).isoformat(),
                        "productId": f"p{n % 100}",
                        "categories": ["lego"],
                        "qty": 1,
                    }
                    for n in range(PER_BATCH)
                ],
                now=NOW,
            )

    _, changed, wal = _measured(ingest)
    _report("ingest", changed, wal, indexes)

    def claim() -> None:
        for shard in range(active().layout.shards):
            _claim_and_record(
                shard=shard, layout=active().layout, now=NOW + dt.timedelta(seconds=1), limit=10**6
            )

    _, changed, wal = _measured(claim)
    _report("claim (every shard's tick transaction)", changed, wal, indexes)

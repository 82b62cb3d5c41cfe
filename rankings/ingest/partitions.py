"""The monthly partitions of the raw sales table: named, bounded and created before a sale needs one.

A sale lands in the partition of the UTC month of its `counted_at`. Partitions
are created on demand, by the ingest, for the months a batch needs that do not
exist yet, and ahead of need by the periodic prune for the current and next
months, so a live ingest practically never runs DDL; only an import of history
creates the old months it brings. There is no DEFAULT partition: a row in it
would forbid ever creating its month's partition, and on-demand creation means
no insert can miss a partition anyway. Sales before FLOOR share one partition,
made by the migration, so that stray old timestamps cannot create thousands.
"""

import datetime as dt
from collections.abc import Iterable

from django.db import connection, transaction
from psycopg import sql

from rankings.engine import locks
from rankings.models import Sale

# Every sale before this instant is in one partition (rankings_sale_p_before).
FLOOR = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)

# Months whose partition this process has seen committed: the ingest's usual case costs no query.
_known: set[dt.datetime] = set()


def month_of(instant: dt.datetime) -> dt.datetime:
    """Start of the UTC month holding `instant`."""
    utc = instant.astimezone(dt.UTC)
    return dt.datetime(utc.year, utc.month, 1, tzinfo=dt.UTC)


def next_month(month: dt.datetime) -> dt.datetime:
    return dt.datetime(month.year + month.month // 12, month.month % 12 + 1, 1, tzinfo=dt.UTC)


def partition_name(month: dt.datetime) -> str:
    return f"{Sale._meta.db_table}_p{month.year:04d}_{month.month:02d}"


def sale_partitions_ensure(instants: Iterable[dt.datetime]) -> list[str]:
    """Make sure a partition holds each instant's month; return the names of those created."""
    months = {month_of(t) for t in instants if t >= FLOOR} - _known
    if not months:
        return []
    parent = Sale._meta.db_table
    created = []
    with transaction.atomic(), connection.cursor() as cursor:
        # Two batches needing the same new month: the second waits, then finds it.
        locks.partition_create_lock()
        names = {partition_name(m): m for m in months}
        cursor.execute("SELECT relname FROM pg_class WHERE relname = ANY(%s)", [list(names)])
        existing = {name for (name,) in cursor.fetchall()}
        for name, month in sorted(names.items()):
            if name in existing:
                continue
            # Created apart and then attached: ATTACH takes a lock that lets ingests and
            # ticks go on, where CREATE … PARTITION OF would lock the whole table out.
            cursor.execute(
                sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)").format(
                    sql.Identifier(name), sql.Identifier(parent)
                )
            )
            cursor.execute(
                sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})").format(
                    sql.Identifier(parent),
                    sql.Identifier(name),
                    sql.Literal(month.isoformat()),
                    sql.Literal(next_month(month).isoformat()),
                )
            )
            created.append(name)
        transaction.on_commit(lambda: _known.update(months))
    return created


def sale_partitions() -> list[str]:
    """Names of the sales table's partitions, oldest first (the catch-all of old sales first)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [Sale._meta.db_table],
        )
        names = [name for (name,) in cursor.fetchall()]
    return sorted(names, key=lambda n: (not n.endswith("_p_before"), n))

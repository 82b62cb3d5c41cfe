"""Connections of a rebuild's own beside Django's: readers that see what another transaction sees (a
rebuild reads the raw sales on two of them side by side, both in the snapshot its own transaction
exported), and a transaction of its own for work that holds its connection long.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.db import connection
from psycopg import sql


def snapshot_export(cursor) -> str:
    """The snapshot of `cursor`'s transaction, for readers to import until that transaction ends."""
    cursor.execute("SELECT pg_export_snapshot()")
    (snapshot,) = cursor.fetchone()
    return snapshot


def _params() -> dict:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return params


@contextmanager
def own_transaction() -> Iterator[psycopg.Connection]:
    """A connection of its own in one transaction, committed when the block ends (rolled back if it
    raises), leaving Django's connection free meanwhile."""
    with psycopg.connect(**_params()) as own:
        yield own


@contextmanager
def snapshot_reader(snapshot: str, *, work_mem: str) -> Iterator[psycopg.Connection]:
    """A connection of its own that sees exactly `snapshot`, its queries given `work_mem` and no
    JIT compilation (it saves less than it costs on a rebuild's queries)."""
    with psycopg.connect(**_params()) as reader:
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
        reader.execute(sql.SQL("SET LOCAL work_mem = {}").format(sql.Literal(work_mem)))
        reader.execute("SET LOCAL jit = off")
        yield reader
        reader.rollback()

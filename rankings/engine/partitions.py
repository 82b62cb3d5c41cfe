"""The partitions of the raw tables: months of sales, days of engagement events; named, bounded and
created before an event needs one, and for engagement dropped once past the retention.

A sale lands in the partition of the UTC month of its `counted_at`. Partitions
are created on demand, by the ingest, for the months a batch needs that do not
exist yet, and ahead of need by the periodic prune for the current and next
months, so a live ingest practically never runs DDL; only an import of history
creates the old months it brings. There is no DEFAULT partition: a row in it
would forbid ever creating its month's partition, and on-demand creation means
no insert can miss a partition anyway. Sales before FLOOR share one partition,
made by the migration, so that stray old timestamps cannot create thousands.

Engagement events are partitioned the same way by UTC day of `ts`; a day
wholly older than the retention is dropped (rankings.engine.prune), never
deleted row by row.
"""

import datetime as dt
from collections.abc import Iterable

from django.db import connection, transaction
from psycopg import sql

from rankings.engine import locks
from rankings.models import Engagement, Sale

# Every sale before this instant is in one partition (rankings_sale_p_before).
FLOOR = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)

# Months (and days) whose partition this process has seen committed: the ingest's usual case
# costs no query. A dropped day is never asked for again (its events are too old on arrival).
_known: set[dt.datetime] = set()
_known_days: set[dt.datetime] = set()


def month_of(instant: dt.datetime) -> dt.datetime:
    """Start of the UTC month holding `instant`."""
    utc = instant.astimezone(dt.UTC)
    return dt.datetime(utc.year, utc.month, 1, tzinfo=dt.UTC)


def _months_known(instants: list[dt.datetime]) -> bool:
    """Whether every month from the least of `instants` to the greatest (at most three, none before
    FLOOR) is known to have its partition: a batch's usual case, told without a look at each."""
    if not instants:
        return True
    least, greatest = min(instants), max(instants)
    if least < FLOOR:
        return False
    month, last = month_of(least), month_of(greatest)
    for _ in range(3):
        if month not in _known:
            return False
        if month == last:
            return True
        month = next_month(month)
    return False


def next_month(month: dt.datetime) -> dt.datetime:
    return dt.datetime(month.year + month.month // 12, month.month % 12 + 1, 1, tzinfo=dt.UTC)


def partition_name(month: dt.datetime) -> str:
    return f"{Sale._meta.db_table}_p{month.year:04d}_{month.month:02d}"


def sale_partitions_ensure(instants: Iterable[dt.datetime]) -> list[str]:
    """Make sure a partition holds each instant's month; return the names of those created."""
    instants = list(instants)
    if _months_known(instants):
        return []
    months = {month_of(t) for t in instants if t >= FLOOR} - _known
    if not months:
        return []
    ranges = {partition_name(m): (m, next_month(m)) for m in months}
    created = _partitions_create(Sale._meta.db_table, ranges)
    transaction.on_commit(lambda: _known.update(months))
    return created


def _partitions_create(parent: str, ranges: dict[str, tuple[dt.datetime, dt.datetime]]) -> list[str]:
    """Create and attach the partitions of `parent` named in `ranges` that do not exist yet."""
    created = []
    with transaction.atomic(), connection.cursor() as cursor:
        # Two batches needing the same new partition: the second waits, then finds it.
        locks.partition_create_lock()
        cursor.execute("SELECT relname FROM pg_class WHERE relname = ANY(%s)", [list(ranges)])
        existing = {name for (name,) in cursor.fetchall()}
        for name, (start, stop) in sorted(ranges.items()):
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
                    sql.Literal(start.isoformat()),
                    sql.Literal(stop.isoformat()),
                )
            )
            created.append(name)
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


def day_of(instant: dt.datetime) -> dt.datetime:
    """Start of the UTC day holding `instant`."""
    utc = instant.astimezone(dt.UTC)
    return dt.datetime(utc.year, utc.month, utc.day, tzinfo=dt.UTC)


_DAY_NAME = "{table}_p{day:%Y_%m_%d}"


def engagement_partition_name(day: dt.datetime) -> str:
    return _DAY_NAME.format(table=Engagement._meta.db_table, day=day)


def engagement_partitions_ensure(instants: Iterable[dt.datetime]) -> list[str]:
    """Make sure a partition holds each instant's day; return the names of those created.
    Inside the caller's transaction (an ingest holding the retention lock)."""
    days = {day_of(t) for t in instants if t >= FLOOR} - _known_days
    if not days:
        return []
    ranges = {engagement_partition_name(d): (d, d + dt.timedelta(days=1)) for d in days}
    created = _partitions_create(Engagement._meta.db_table, ranges)
    transaction.on_commit(lambda: _known_days.update(days))
    return created


def engagement_partitions() -> list[tuple[str, dt.datetime | None]]:
    """(name, first day) of the engagement table's partitions, oldest first; the catch-all of events
    before FLOOR first, with None."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [Engagement._meta.db_table],
        )
        names = sorted(name for (name,) in cursor.fetchall())
    prefix = f"{Engagement._meta.db_table}_p"
    days: list[tuple[str, dt.datetime | None]] = []
    for name in names:
        suffix = name.removeprefix(prefix)
        if suffix == "_before":
            days.insert(0, (name, None))
        else:
            day = dt.datetime.strptime(suffix, "%Y_%m_%d").replace(tzinfo=dt.UTC)
            days.append((name, day))
    return days


def engagement_partitions_drop(cutoff: dt.datetime) -> list[str]:
    """Drop the days of engagement events that end at or before `cutoff` (and empty the catch-all of
    events before FLOOR once it is past); return the names dropped. Under the retention lock, which
    ingests share while they judge events by the retention and store them."""
    dropped = []
    with transaction.atomic(), connection.cursor() as cursor:
        locks.retention_change_lock()
        for name, day in engagement_partitions():
            if day is None:
                if cutoff >= FLOOR:
                    cursor.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(name)))
                    if cursor.fetchone()[0]:
                        cursor.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(name)))
                        dropped.append(name)
                continue
            if day + dt.timedelta(days=1) <= cutoff:
                cursor.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))
                dropped.append(name)
                _known_days.discard(day)
    return dropped


def partitions_forget() -> None:
    """Forget which partitions this process knows to exist, after they changed behind its back (a
    migration that dropped and recreated a partitioned table, a restore): the next ingest ensures them."""
    _known.clear()
    _known_days.clear()

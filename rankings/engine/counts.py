"""Running totals every process adds to and /metrics reads: counters and histograms kept in
PostgreSQL (rankings.models.MetricCount), so that a total is what every web process and worker
did, on one machine or many, and a count made in a transaction stands or falls with its work."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.db import connection

from rankings.models import MetricCount

# Rows one total is spread over: concurrent ingests add to their session's stripe (the server
# process number modulo this), so they seldom wait on one another's row until they commit, and a
# read adds up at most this many rows per total.
STRIPES = 16

_TABLE = MetricCount._meta.db_table

# One statement for all of a call's totals, in a fixed order: two sessions of one stripe wait for
# each other rather than deadlock.
_ADD = f"""
INSERT INTO {_TABLE} (name, key, stripe, value)
SELECT c.name, c.key, pg_backend_pid() %% {STRIPES}, c.value
FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS c (name, key, value)
ORDER BY c.name, c.key
ON CONFLICT (name, key, stripe) DO UPDATE SET value = {_TABLE}.value + excluded.value
"""


def counts_add(name: str, amounts: Mapping[str, int]) -> None:
    """Add each of `amounts` (key -> amount) to the total (name, key), in the caller's transaction
    if it has one."""
    keys = sorted(key for key, amount in amounts.items() if amount)
    if not keys:
        return
    with connection.cursor() as cursor:
        cursor.execute(_ADD, [[name] * len(keys), keys, [amounts[key] for key in keys]])


def counts_read(name: str) -> dict[str, int]:
    """key -> total of `name`, every stripe added up: at most STRIPES rows a key."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, sum(value) FROM {_TABLE} WHERE name = %s GROUP BY key", [name])
        return {key: int(total) for key, total in cursor.fetchall()}


# A histogram's observations are counted by the bucket they fall in (key: its upper bound), and
# their sum in whole microseconds (key SUM_KEY), so that every total is an exact integer.
SUM_KEY = "sum_us"
INF = float("inf")


@dataclass(frozen=True)
class Histogram:
    """A histogram as Prometheus reads it: cumulative counts by upper bound (the last +Inf), the
    number of observations and their sum."""

    buckets: list[tuple[float, int]]
    count: int
    sum: float


def _bound_key(bound: float) -> str:
    return "+Inf" if bound == INF else repr(float(bound))


def histogram_observe(name: str, bounds: Sequence[float], value: float) -> None:
    """Count one observation of `value` (seconds, or any unit) in the histogram `name` whose
    finite bucket bounds are `bounds`, ascending."""
    bound = next((b for b in bounds if value <= b), INF)
    counts_add(name, {_bound_key(bound): 1, SUM_KEY: round(value * 1_000_000)})


def histogram_read(name: str, bounds: Sequence[float]) -> Histogram:
    """The histogram `name` as every process has observed it."""
    totals = counts_read(name)
    buckets, running = [], 0
    for bound in [*bounds, INF]:
        running += totals.get(_bound_key(bound), 0)
        buckets.append((bound, running))
    return Histogram(buckets=buckets, count=running, sum=totals.get(SUM_KEY, 0) / 1_000_000)

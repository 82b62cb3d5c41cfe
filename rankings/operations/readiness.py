"""Readiness: whether this process can serve what it should, for a load balancer's probe."""

from django.db import DatabaseError, connection

from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.operations.metrics import boards_age

OK = "ok"


def readiness_read() -> dict[str, str]:
    """{"postgres", "redis", "boards"} -> "ok" or why not, in words (no figure): PostgreSQL and Redis
    answer, and the oldest shard's boards are younger than READY_MAX_AGE_SECONDS."""
    checks = {"postgres": _postgres()}
    try:
        store.ping()
        age = boards_age()
    except store.StoreError:
        return {**checks, "redis": "unreachable", "boards": "unknown while Redis is unreachable"}
    return {**checks, "redis": OK, "boards": _boards(age)}


def _postgres() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return "unreachable"
    return OK


def _boards(age: float | None) -> str:
    if age is None:
        return "not in Redis: no tick has laid them out yet (a fresh install, or Redis restarted empty)"
    if age == float("inf"):
        return "missing in Redis for some shard until a tick rebuilds them"
    if age > rankings_settings.READY_MAX_AGE_SECONDS:
        return "stale: not brought up to date within READY_MAX_AGE_SECONDS (the ticks stopped)"
    return OK

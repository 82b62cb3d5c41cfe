"""Every environment variable the service reads, in one list: the README's table is made from it
(`python -m salesrank_site.environment` prints the table), and a test holds the README, the
settings and this list to one another. The engine's own variables come from the declaration of
its settings (rankings/conf.py)."""

from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

from rankings.conf import DEFAULTS, OVERRIDES_VARIABLE


@dataclass(frozen=True)
class Variable:
    name: str
    default: str  # as the README states it
    meaning: str


SITE = [
    Variable(
        "DATABASE_URL",
        "`postgres:///salesrank`",
        "PostgreSQL: catalogue, raw sales, buckets, batches, versions, users",
    ),
    Variable(
        "REDIS_URL",
        "`redis://127.0.0.1:6379/0`",
        "Redis: the boards, and the throttle counters; with `REDIS_CLUSTER`, one node of the cluster",
    ),
    Variable(
        "REDIS_CLUSTER",
        "`false`",
        "`true`: the boards live on a Redis Cluster (`REDIS_URL` names one of its nodes; each shard's keys"
        " stay on one slot); `CACHE_URL` and `CELERY_BROKER_URL` must then name a plain Redis",
    ),
    Variable(
        "CACHE_URL", "`REDIS_URL`", "Django's cache (the throttle counters): a plain Redis, never a cluster"
    ),
    Variable(
        "CELERY_BROKER_URL",
        "`REDIS_URL` with the next database number (`…/1`)",
        "the Celery broker; in a database of its own, so the boards' database can be flushed without"
        " losing queued tasks; a plain Redis, never a cluster",
    ),
    Variable(
        "RANKINGS_TICK_QUEUES",
        "`1`",
        "tick queues (`<prefix>:ticks.0`, `…1`, …): the beat's tick sends shard s's tick to queue s mod"
        " this count, so workers consuming different queues tick disjoint shards side by side (see the"
        ' runbook, "Ticking on several machines")',
    ),
    Variable(
        OVERRIDES_VARIABLE,
        "none",
        "the engine's constants (`rankings/conf.py`, each with its meaning and bound), as a JSON object such"
        ' as `{"BATCH_SIZE": 50000}`: for benchmarks and tests; an unknown name or a value out of bounds'
        " stops the start",
    ),
    Variable(
        "THROTTLE_READS",
        "`100/s`",
        "API reads per client address (a DRF rate such as `100/s` or `6000/min`; empty: no limit)",
    ),
    Variable(
        "THROTTLE_READS_AUTHENTICATED",
        "`500/s`",
        "API reads per token, for a shop's own servers reading with a token",
    ),
    Variable("THROTTLE_PAGES", "`20/s`", "page views per client address"),
    Variable(
        "THROTTLE_INGEST",
        "`600/min`",
        "`POST /v1/sales`, `POST /v1/engagements` and `POST /v1/catalogue/…` batches per token",
    ),
    Variable(
        "NUM_PROXIES",
        "`0`",
        "proxies in front that append to `X-Forwarded-For`; the client address the throttles count is"
        " taken from that header only when this is set",
    ),
    Variable("SECRET_KEY", "none", "Django's secret; required unless `DEBUG` is on"),
    Variable("DEBUG", "off", "Django's debug mode; never in production"),
    Variable("ALLOWED_HOSTS", "`127.0.0.1,localhost`", "host names served, comma-separated"),
    Variable(
        "HTTPS",
        "off",
        "`true` behind TLS: redirect plain HTTP, secure cookies, HSTS for a year (with subdomains and"
        " preload, unless the two variables below say otherwise), and trust `X-Forwarded-Proto: https` from the TLS proxy (which must set and overwrite it)",
    ),
    Variable(
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "`HTTPS`",
        "HSTS for every subdomain too; `false` when other hosts under the domain may still serve plain"
        " HTTP (a browser that has seen it cannot be told otherwise for a year)",
    ),
    Variable(
        "SECURE_HSTS_PRELOAD",
        "`HTTPS`",
        "asks browsers' HSTS preload lists to include the domain; `false` for a site that is not to be"
        " listed (leaving a list takes months)",
    ),
    Variable("LOG_LEVEL", "`INFO`", "level of the root logger"),
    Variable(
        "LOG_FORMAT",
        "`text`",
        "`json`: every log line of the web processes, the workers and the beat is one JSON object (time,"
        " level, logger, message, request_id; a request's method, path, status and duration_ms), and a"
        " request's id reaches the Celery tasks it queues; `text`: plain lines",
    ),
    Variable(
        "READ_DOT_ENV", "on", "`0` ignores `.env`, to see the settings exactly as the environment gives them"
    ),
]
# Read by the Procfile (`make run`), not by the settings.
PROCFILE = [
    Variable(
        "WEB_CONCURRENCY", "the core count", "gunicorn worker processes started by the Procfile (`make run`)"
    ),
    Variable("CELERY_CONCURRENCY", "the core count", "Celery worker processes started by the Procfile"),
    Variable(
        "CELERY_WORKER_QUEUES",
        "every queue",
        "the queues the Procfile's worker consumes, comma-separated (e.g. `salesrank:ticks.1`); by default"
        " the default queue `<prefix>:tasks` and every tick queue",
    ),
]

_HTTPS = "set HTTPS (true behind TLS: the redirect, secure cookies, HSTS and X-Forwarded-Proto)"


def _override(name: str) -> str:
    return f'set RANKINGS_OVERRIDES to {{"{name}": …}} (a constant of the engine, rankings/conf.py)'


# Variables earlier releases read, and what replaces each: one still set would be ignored in
# silence, so it stops the start instead.
RETIRED = {
    "SECURE_SSL_REDIRECT": _HTTPS,
    "SESSION_COOKIE_SECURE": _HTTPS,
    "CSRF_COOKIE_SECURE": _HTTPS,
    "SECURE_HSTS_SECONDS": _HTTPS,
    "SECURE_PROXY_SSL_HEADER": _HTTPS,
    "CONN_MAX_AGE": "unset it: database connections are kept 60 seconds",
    **{
        f"RANKINGS_{name}": _override(name)
        for name in (
            "BATCH_SIZE",
            "TICK_PARALLEL_FROM",
            "MAX_BATCH_CHANGES",
            "MAX_EVENT_CATEGORIES",
            "VERIFY_SAMPLE_CATEGORIES",
            "VERSION_READY_KEEP_SECONDS",
        )
    },
}


def refuse_retired(environment) -> None:
    """Raise ImproperlyConfigured naming the first retired variable set in `environment`."""
    for name, instead in RETIRED.items():
        if name in environment:
            raise ImproperlyConfigured(f"{name} is no longer read: {instead}")


def engine() -> list[Variable]:
    """The engine's settings that an operator sets by environment variable."""
    return [
        Variable(s.env, s.default_text or f"`{_text(s.default)}`", s.meaning)
        for s in DEFAULTS.values()
        if s.env
    ]


def _text(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def variables() -> list[Variable]:
    return [*SITE[:5], *engine(), *SITE[5:], *PROCFILE]


def table() -> str:
    """The README's table of environment variables."""
    rows = [f"| `{v.name}` | {v.default} | {v.meaning} |" for v in variables()]
    return "\n".join(["| variable | default | meaning |", "|---|---|---|", *rows])


if __name__ == "__main__":
    print(table())

"""The engine's settings, declared in one place: each with its default, type, bound and meaning.

Like DRF's `api_settings`: `rankings_settings.NAME` reads `settings.RANKINGS["NAME"]` when the
project sets it, else the default below; a name not declared here is refused, and every value is
checked against its type and bound when the app starts (`validate`). The few an operator sets
come from environment variables (`env`), read by the project's settings through
`environment_values`; the rest are constants of the engine, overridable in `settings.RANKINGS`
for tests and benchmarks. The README's table of environment variables is made from this
declaration (`manage.py settings_table`).
"""

import ipaddress
import os
from dataclasses import dataclass
from typing import Any

import environ
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DAY = 86400  # seconds


@dataclass(frozen=True)
class Setting:
    default: Any  # a value, or a function of the settings (a default derived from another one)
    kind: type
    meaning: str
    low: float | None = None  # the least value a number may take
    env: str | None = None  # the environment variable an operator sets it with
    default_text: str | None = None  # the default as the README states it, where the value is not it


def _cores(_) -> int:
    return os.cpu_count() or 1


DEFAULTS: dict[str, Setting] = {
    "KEY_PREFIX": Setting(
        "salesrank",
        str,
        "every Redis key and every Celery queue name start with it, so deployments and test runs"
        " can share a Redis",
        env="RANKINGS_KEY_PREFIX",
    ),
    "TICK_SECONDS": Setting(
        2.0,
        float,
        "seconds between the beat's ticks: how far the boards trail the sales",
        0.1,
        "RANKINGS_TICK_SECONDS",
    ),
    "TICK_EXPIRES_SECONDS": Setting(
        lambda s: s.TICK_SECONDS * 3,
        float,
        "a tick queued longer is dropped: the next one does its work, and ticks queued while the"
        " workers were down are not run one after another",
        0.1,
    ),
    "TICK_WAKE": Setting(
        True,
        bool,
        "sales that commit wake their shards' tick at once (one pending wake per tick queue), so the"
        " boards trail the sales by a tick's duration rather than the beat's interval; the beat's"
        " tick stays as the safety net",
        env="RANKINGS_TICK_WAKE",
    ),
    "TICK_QUEUES": Setting(
        ["salesrank:ticks.0"],
        list,
        "the tick queues' names: the beat's tick sends shard s's tick to queue s mod their count",
    ),
    "SHARDS": Setting(
        4,
        int,
        "shard count of a fresh install; afterwards the active version's layout rules (changed with"
        " `rankings_rebuild --shards`/`--pin`) and a value that is neither the installation's first"
        " count nor the active version's is refused at start",
        1,
        "RANKINGS_SHARDS",
    ),
    "SPLIT": Setting(
        "",
        str,
        "boards kept as sub-boards, e.g. `all:3,toys:2`: each named category's boards are split into"
        " that many parts by a stable hash of the product, each part on a shard of its own (so on"
        " several Redis Cluster nodes), and reads merge them exactly; a fresh install starts with"
        " it, afterwards it takes effect through `rankings_rebuild` and a switch",
        env="RANKINGS_SPLIT",
        default_text="empty",
    ),
    "BATCH_SIZE": Setting(
        200_000,
        int,
        "the most pending rows a tick claims in one batch: a backlog is worked in a few large"
        " set-based steps, a smaller one is taken whole (the worker holds one entry of about 200"
        " bytes per board member a batch changes)",
        1,
    ),
    "TICK_THREADS": Setting(
        _cores,
        int,
        "a tick with a backlog ticks its shards side by side in this many threads, each on a"
        " database connection of its own; `1` ticks them one after another",
        1,
        "RANKINGS_TICK_THREADS",
        default_text="the machine's cores",
    ),
    "TICK_PARALLEL_FROM": Setting(
        5_000,
        int,
        "pending rows from which a tick counts as a backlog and uses its threads; a smaller tick"
        " stays on one connection, which costs less than opening more",
        1,
    ),
    "MAX_BATCH_CHANGES": Setting(
        20_000,
        int,
        "board changes per step applied to Redis: each step is one Lua call that blocks readers"
        " for about 1 ms per 1,000 changes, so a large window transition is split into steps",
        1,
    ),
    "SHARD_RETRY_SECONDS": Setting(
        2.0, float, "seconds before a shard whose tick raised is tried again (doubling each time)", 0.0
    ),
    "SHARD_RETRY_MAX_SECONDS": Setting(
        60.0, float, "the longest wait before a failing shard is tried again", 0.0
    ),
    "BATCH_LOG_SECONDS": Setting(
        2 * 3600,
        int,
        "how long applied batches are kept, for a rebuild to catch up and a retired version to be"
        " switched back to; keep it above the longest rebuild and the grace period",
        60,
        "RANKINGS_BATCH_LOG_SECONDS",
    ),
    "MINUTE_BUCKETS_KEEP_SECONDS": Setting(
        2 * 3600,
        int,
        "minute buckets kept behind the engine's clock: the 1-hour window plus an hour of slack for"
        " late events (never less than the longest window of minute buckets)",
        0,
    ),
    "HOUR_BUCKETS_KEEP_SECONDS": Setting(
        32 * DAY,
        int,
        "hour buckets kept behind the engine's clock: the 30-day window and the 30-day chart plus a"
        " day (never less than the longest window of hour buckets)",
        0,
    ),
    "INGEST_LOG_KEEP_SECONDS": Setting(3 * DAY, int, "ingest log kept (the status page's rates)", 0),
    "TICK_LOG_KEEP_SECONDS": Setting(2 * DAY, int, "tick log kept (the status page's last ticks)", 0),
    "VERIFY_LOG_KEEP_SECONDS": Setting(
        7 * DAY, int, "verify log kept (the status page's week of repairs)", 0
    ),
    "PRUNE_CHUNK_ROWS": Setting(
        5000, int, "rows a prune deletes per statement, each its own short transaction", 1
    ),
    "PRUNE_SECONDS": Setting(3600, int, "seconds between the beat's prunes", 1),
    "NAMES_COPY_SECONDS": Setting(
        10,
        int,
        "seconds between the beat's steps of the walk that mends Redis's copy of the product names",
        1,
    ),
    "NAMES_CHANGES_SECONDS": Setting(
        2,
        int,
        "seconds between the beat's copies of the product names edits changed into Redis's copy (a name"
        " read from that copy is remembered this much less than a minute, so that an edit shows within it)",
        1,
    ),
    "VERSION_GRACE_SECONDS": Setting(
        3600,
        int,
        "how long a version switched away from is kept for switching back",
        0,
        "RANKINGS_VERSION_GRACE_SECONDS",
    ),
    "VERSION_READY_KEEP_SECONDS": Setting(
        2 * 3600, int, "a rebuilt version never switched to is deleted after this long", 0
    ),
    "REBUILD_TEMP_KEY_SECONDS": Setting(
        3600,
        int,
        "a rebuild's temporary boards expire after this long, so a rebuild that dies leaves none",
        1,
    ),
    "VERIFY_SAMPLE_CATEGORIES": Setting(
        20, int, "categories whose boards each sampled verify compares with the buckets", 0
    ),
    "VERIFY_SAMPLE_SECONDS": Setting(
        300, int, "seconds between sampled verifies", 1, "RANKINGS_VERIFY_SAMPLE_SECONDS"
    ),
    "MAX_FUTURE_SECONDS": Setting(300, int, "an event whose ts is further ahead of the clock is rejected", 0),
    "MAX_BATCH_EVENTS": Setting(5000, int, "most sale events in one batch", 1),
    "MAX_ENGAGEMENT_BATCH_EVENTS": Setting(10_000, int, "most engagement events in one batch", 1),
    "MAX_EVENT_CATEGORIES": Setting(
        20, int, "most categories one event may name (each unknown one becomes a placeholder)", 1
    ),
    "MAX_BATCH_NEW_CATEGORIES": Setting(
        1000,
        int,
        "most categories one batch may add to the catalogue as placeholders (without it, 5,000 events"
        " naming 20 unknown slugs each would add 100,000); an event past it is rejected, to be sent again",
        1,
    ),
    "ENGAGEMENT_RETENTION_DAYS": Setting(
        35,
        int,
        "days of raw engagement events (views, wishes) kept behind the engine's clock, then dropped"
        " a day's partition at a time; never less than the longest window plus a day",
        1,
        "RANKINGS_ENGAGEMENT_RETENTION_DAYS",
    ),
    "SNAPSHOT_DEPTH": Setting(
        1000,
        int,
        "ranks of each `1d` and `7d` board recorded every hour (movers, rank arrows, rank history)",
        1,
        "RANKINGS_SNAPSHOT_DEPTH",
    ),
    "SNAPSHOT_WINDOWS": Setting(("1d", "7d"), tuple, "the windows whose boards are recorded every hour"),
    "SNAPSHOT_KEEP_SECONDS": Setting(32 * DAY, int, "hourly snapshots kept behind the engine's clock", 0),
    "NEW_DAYS": Setting(
        30,
        int,
        "hot new releases: products released at most this many days before a board's `asOf`",
        1,
        "RANKINGS_NEW_DAYS",
    ),
    "NEW_MOST": Setting(
        10_000,
        int,
        "hot new releases are at most this many latest releases of the catalogue: what one read of a"
        " board's new releases costs grows with it, never with the board",
        1,
    ),
    "READY_MAX_AGE_SECONDS": Setting(
        60.0,
        float,
        "`GET /readyz` answers 503 once the oldest shard's boards were last brought up to date longer"
        " ago than this (the ticks stopped), as it does when PostgreSQL or Redis does not answer",
        1.0,
        "READY_MAX_AGE_SECONDS",
    ),
    "METRICS_ALLOW": Setting(
        ["127.0.0.1/32", "::1/128"],
        list,
        "addresses (CIDRs, comma-separated) that may read `GET /metrics` without a token, as the"
        " throttles see the client's address (`NUM_PROXIES`); anyone else needs a token with"
        " `rankings.view_status`; empty: a token always",
        env="METRICS_ALLOW",
        default_text="`127.0.0.1/32,::1/128`",
    ),
    "WINDOWS": Setting(
        {"1h": (60, 60), "1d": (3600, 24), "7d": (3600, 168), "30d": (3600, 720)},
        dict,
        "name: (bucket size in seconds, bucket count)",
    ),
    "ALERTS_ALLOW_PRIVATE": Setting(
        False,
        bool,
        "rank alerts may name `http` URLs and be delivered to private, loopback, link-local and"
        " reserved addresses: for a receiver on the developer's own machine, never in production",
        env="ALERTS_ALLOW_PRIVATE",
    ),
    "ALERTS_PER_USER": Setting(
        1000, int, "most rank alerts one API user holds, whichever of its tokens made them", 1
    ),
    "ALERTS_TIMEOUT_SECONDS": Setting(
        5.0,
        float,
        "a webhook delivery (resolving, connecting, sending, reading the answer's status) is given up"
        " after this long and counts as failed",
        0.1,
    ),
    "ALERTS_SEND_THREADS": Setting(
        8, int, "webhook deliveries one sender makes at once, each on a thread of its own", 1
    ),
    "ALERTS_HOST_CONCURRENCY": Setting(
        2,
        int,
        "webhook deliveries one sender makes at once to the same host: a receiver that hangs holds at"
        " most this many of its threads, and the others go on delivering elsewhere",
        1,
    ),
    "ALERTS_RETRY_SECONDS": Setting(
        86400,
        int,
        "a firing refused (any answer but 2xx, or none) is retried with a growing wait for this long after"
        " its first attempt, then given up and its alert marked failing",
        60,
    ),
    "ALERTS_KEEP_SECONDS": Setting(
        7 * DAY,
        int,
        "firings and their delivery attempts kept behind the engine's clock (never less than the retries'"
        " day plus a day)",
        0,
    ),
    "ALERTS_SEND_SECONDS": Setting(10, int, "seconds between the beat's webhook sends", 1),
    "ALERTS_SEND_BUDGET_SECONDS": Setting(
        60.0,
        float,
        "a send stops claiming firings after this long (the next beat's send takes the rest), so one"
        " task never holds a worker through a flood",
        1.0,
    ),
}


class RankingsSettings:
    """`rankings_settings.NAME`: settings.RANKINGS's value, else the declared default."""

    def __getattr__(self, name: str) -> Any:
        declared = DEFAULTS.get(name)
        if declared is None:
            raise AttributeError(f"no ranking setting {name!r}")
        given = getattr(settings, "RANKINGS", {})
        if name in given:
            return given[name]
        return declared.default(self) if callable(declared.default) else declared.default

    def validate(self) -> None:
        """Refuse a name that is not declared, a value of the wrong type or below its bound, and
        a batch's bound on new categories below an event's."""
        unknown = set(getattr(settings, "RANKINGS", {})) - set(DEFAULTS)
        if unknown:
            raise ImproperlyConfigured(f"RANKINGS names unknown settings: {', '.join(sorted(unknown))}")
        for name, declared in DEFAULTS.items():
            _check(name, getattr(self, name), declared)
        for network in self.METRICS_ALLOW:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ImproperlyConfigured(
                    f"METRICS_ALLOW: {network!r} is not an address or a CIDR"
                ) from None
        # Else an event naming more new slugs than a batch may add is refused in every batch.
        if self.MAX_BATCH_NEW_CATEGORIES < self.MAX_EVENT_CATEGORIES:
            raise ImproperlyConfigured(
                f"RANKINGS['MAX_BATCH_NEW_CATEGORIES'] must be at least MAX_EVENT_CATEGORIES"
                f" ({self.MAX_EVENT_CATEGORIES}), not {self.MAX_BATCH_NEW_CATEGORIES}"
            )


def _check(name: str, value: Any, declared: Setting) -> None:
    if not _of_kind(value, declared.kind):
        raise ImproperlyConfigured(f"RANKINGS[{name!r}] must be a {declared.kind.__name__}, not {value!r}")
    if declared.low is not None and value < declared.low:
        raise ImproperlyConfigured(f"RANKINGS[{name!r}] must be at least {declared.low}, not {value!r}")


def _of_kind(value: object, kind: type) -> bool:
    """Whether `value` is a `kind`: an int is a float too, a bool no int."""
    if kind is int and isinstance(value, bool):
        return False
    return isinstance(value, (int, float) if kind is float else kind)


rankings_settings = RankingsSettings()


# One variable for the engine's constants, as a JSON object ({"BATCH_SIZE": 50}): how benchmarks
# and the tests' child processes tune what an operator leaves alone.
OVERRIDES_VARIABLE = "RANKINGS_OVERRIDES"


def environment_values(env: environ.Env) -> dict[str, Any]:
    """The settings an operator has set by environment variable, read with django-environ, then
    those of RANKINGS_OVERRIDES (a list given for a tuple setting made a tuple)."""
    values = {
        name: env.get_value(declared.env, cast=declared.kind)
        for name, declared in DEFAULTS.items()
        if declared.env and declared.env in env.ENVIRON
    }
    overrides = env.json(OVERRIDES_VARIABLE, default={})
    return {**values, **{name: _from_json(name, value) for name, value in overrides.items()}}


def _from_json(name: str, value: Any) -> Any:
    """A value of RANKINGS_OVERRIDES as the declaration types it: JSON has lists, not tuples."""
    declared = DEFAULTS.get(name)
    if declared and declared.kind is tuple and isinstance(value, list):
        return tuple(value)
    return value


# Sales make the first two, engagement events (rankings.ingest.engagement) the last two.
SALES_METRICS = ("units", "revenue")
ENGAGEMENT_METRICS = ("views", "wishes")
METRICS = SALES_METRICS + ENGAGEMENT_METRICS

# The deepest rank any list of a board reads: the API refuses offset + limit past it, a page past
# it is not found, and what a list keeps of a board stops there.
MAX_DEPTH = 10_000  # ranks

_COMPANION = {"units": "revenue", "revenue": "units", "views": "wishes", "wishes": "views"}


def other_metric(metric: str) -> str:
    """A board's companion: the blobs and lists show units beside revenue, views beside wishes,
    and the other way round."""
    return _COMPANION[metric]


def metric_pair(metric: str) -> tuple[str, str]:
    """The two metrics of one kind of event that `metric` is one of, in METRICS order."""
    return SALES_METRICS if metric in SALES_METRICS else ENGAGEMENT_METRICS


def longest_window_seconds() -> int:
    """The span of the longest window."""
    return max(size * count for size, count in rankings_settings.WINDOWS.values())


def alerts_keep_seconds() -> int:
    """How long firings and attempts are kept behind the engine's clock: the setting, but never less
    than the retries' period plus a day (a firing still retried is never pruned)."""
    return max(rankings_settings.ALERTS_KEEP_SECONDS, rankings_settings.ALERTS_RETRY_SECONDS + DAY)


def engagement_retention_seconds() -> int:
    """How long raw engagement events are kept behind the engine's clock: the setting, but never
    less than the longest window plus a day (a rebuild reads every window from them)."""
    return max(rankings_settings.ENGAGEMENT_RETENTION_DAYS * DAY, longest_window_seconds() + DAY)

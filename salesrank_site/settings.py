"""Settings, read from the environment (django-environ); defaults suit a developer machine."""

import datetime as dt
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import environ
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured
from django_guid.integrations import CeleryIntegration
from kombu import Queue

from rankings.conf import DEFAULTS, environment_values
from salesrank_site.environment import refuse_retired
from salesrank_site.logs import FORMATS, logging_config

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, False),
    ALLOWED_HOSTS=(list, ["127.0.0.1", "localhost"]),
    DATABASE_URL=(str, "postgres:///salesrank"),
    REDIS_URL=(str, "redis://127.0.0.1:6379/0"),
    REDIS_CLUSTER=(bool, False),
)
# A developer's .env (written by `make run`) fills in what the environment leaves out;
# READ_DOT_ENV=0 ignores it, to see the settings exactly as the environment gives them.
if env.bool("READ_DOT_ENV", default=True):
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)
refuse_retired(env)

DEBUG = env("DEBUG")
# A fixed key only for a developer's DEBUG run; production must set SECRET_KEY.
SECRET_KEY = env("SECRET_KEY", default="insecure-development-key" if DEBUG else environ.Env.NOTSET)
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

# Ranking engine: every setting, its default and meaning are declared in rankings/conf.py; an
# operator sets a few of them by environment variable (the README's table), the rest are the
# engine's constants.
RANKINGS = environment_values(env)
RANKINGS.setdefault("KEY_PREFIX", DEFAULTS["KEY_PREFIX"].default)

# Production serves HTTPS only. One switch, HTTPS=true, turns on the redirect,
# secure cookies and HSTS. Off by default because a developer's `make run` is
# plain HTTP, where HSTS would lock the browser out of 127.0.0.1 for a year.
HTTPS = env.bool("HTTPS", default=False)
SECURE_SSL_REDIRECT = SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
# A year: the least that HSTS preload lists accept.
SECURE_HSTS_SECONDS = 365 * 24 * 3600 if HTTPS else 0  # seconds
# Neither can be taken back once a browser (or a preload list) has seen it: a domain with other
# hosts that may still serve plain HTTP turns them off.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=HTTPS)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=HTTPS)
# gunicorn sits behind a TLS-terminating proxy, which must set (and overwrite)
# X-Forwarded-Proto; without this the SSL redirect would loop forever.
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

INSTALLED_APPS = [
    "salesrank_site.admin_site.SiteAdminConfig",  # django.contrib.admin, with its autocomplete guarded
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "axes",
    "django_guid",
    "catalogue",
    "rankings",
]

MIDDLEWARE = [
    # First: /healthz, /readyz and /metrics are answered before the host check, the HTTPS redirect
    # and the request log (rankings/serving/probes.py says why).
    "rankings.serving.probes.OperatorEndpointsMiddleware",
    # Each request's id (its X-Request-ID when that is a UUID, else a new one), in every log line of
    # the request and of the Celery tasks it queues (django-guid's context and Celery integration),
    # and in the response's X-Request-ID; then the request's log line.
    "salesrank_site.request_log.RequestLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "salesrank_site.security_policy.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # ETag on every GET response, and 304 for a matching If-None-Match.
    "django.middleware.http.ConditionalGetMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: it turns a login that AxesStandaloneBackend refused into the lockout answer (429).
    "axes.middleware.AxesMiddleware",
]

# Admin logins (django-axes): 10 failures within 15 minutes for one username, or from one
# address, lock that username or address out of the login form for 15 minutes. Per username
# stops guessing one password from many addresses; per address stops one client trying many
# usernames. Attempts past the cool-off are deleted at the next login attempt; successful
# logins are not logged (AXES_DISABLE_ACCESS_LOG), so neither table grows with time.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = 10
AXES_COOLOFF_TIME = dt.timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
# Tries during a lockout are refused without being recorded: otherwise each would restart the
# cool-off (a client that keeps trying is never let back) and append its form to the attempt's
# row, which would grow without bound.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_DISABLE_ACCESS_LOG = True
# The client address as the rate limits see it (X-Forwarded-For only as far as NUM_PROXIES says),
# when that is an IP address; else REMOTE_ADDR.
AXES_CLIENT_IP_CALLABLE = "rankings.serving.throttling.login_address"
# No banner at every process's start; failures and lockouts are still logged as warnings.
AXES_VERBOSE = False

ROOT_URLCONF = "salesrank_site.urls"
WSGI_APPLICATION = "salesrank_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL")}
# Keep connections between requests: opening one costs more than answering a read.
DATABASES["default"]["CONN_MAX_AGE"] = 60  # seconds
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env("REDIS_URL")
# On, REDIS_URL names one node of a Redis Cluster and the boards spread over its
# nodes (each shard's keys on one slot). The Django cache and Celery's broker
# need a plain Redis then: CACHE_URL and CELERY_BROKER_URL must name one.
REDIS_CLUSTER = env("REDIS_CLUSTER")
if REDIS_CLUSTER and not ("CACHE_URL" in env and "CELERY_BROKER_URL" in env):
    raise ImproperlyConfigured(
        "REDIS_CLUSTER is on: set CACHE_URL and CELERY_BROKER_URL to a plain (non-cluster) Redis"
    )
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": env("CACHE_URL", default=REDIS_URL),
        "KEY_PREFIX": RANKINGS["KEY_PREFIX"] + ":cache",
        "OPTIONS": {
            # A slow or absent Redis must not hang a page: fail fast, serve stale.
            # A throttle check is two calls (read, then write its count), so
            # each may cost a read at most this long while Redis stalls; Redis
            # on the same network answers in well under a millisecond.
            "SOCKET_CONNECT_TIMEOUT": 0.1,  # seconds
            "SOCKET_TIMEOUT": 0.1,  # seconds
            # The cache holds only the API's throttle counters: while Redis is
            # down a read is let through unthrottled rather than failing with a
            # 500, so that it can serve its last known answer.
            "IGNORE_EXCEPTIONS": True,
        },
    }
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]

# A full ingest batch (5,000 events) is about 1 MB of JSON; allow some headroom.
# A larger body is refused (413) before it is parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024  # bytes

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rankings.serving.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "rankings.serving.api.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    # Views name their scope (throttle_scope): "ingest" is counted per user
    # (token); "reads" per client address, or per user for an authenticated
    # reader, which has a bucket and rate of its own ("reads-authenticated");
    # the pages ("pages") per client address. An empty rate turns a scope off.
    "DEFAULT_THROTTLE_CLASSES": ["rankings.serving.throttling.ScopedThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        # Ten full batches a second (50,000 events/s) sustained: far above a shop's peak
        # and the benchmarks, low enough to stop a runaway client.
        "ingest": env("THROTTLE_INGEST", default="600/min") or None,
        # 6,000 a minute, counted per second: DRF keeps one timestamp per request
        # in the window, so a minute-long window would move 6,000 of them
        # through Redis on every read.
        "reads": env("THROTTLE_READS", default="100/s") or None,
        # A shop's own servers reading through a token: five times an address's
        # rate, still bounded so that a leaked token cannot flood the readers.
        "reads-authenticated": env("THROTTLE_READS_AUTHENTICATED", default="500/s") or None,
        # A person reads a page every few seconds; a burst of 20 a second from
        # one address is a crawler or a script, and each page costs several reads.
        "pages": env("THROTTLE_PAGES", default="20/s") or None,
    },
    # The client address of a throttle is REMOTE_ADDR unless proxies are
    # declared. Behind N trusted proxies (a load balancer, a TLS terminator)
    # that each append to X-Forwarded-For, set NUM_PROXIES=N and the N-th
    # address from the right is counted. The default 0 ignores the header, which
    # any client can write: DRF's None would key on the raw header, and a random
    # value per request would escape every limit.
    "NUM_PROXIES": env.int("NUM_PROXIES", default=0),
}

SPECTACULAR_SETTINGS = {
    "TITLE": "salesrank API",
    "DESCRIPTION": "Exact best-seller rankings by category, from a stream of sale events.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI from this server's static files (drf-spectacular-sidecar), not
    # a CDN: the docs work without internet, and no third-party script runs on
    # the origin of the admin.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Content-Security-Policy on every response: scripts, styles, images and
# connections from this origin only; no inline script or style (the pages draw
# their chart as inline SVG, which is markup, not script); no framing. data:
# images are Swagger UI's icons, embedded in its stylesheet.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

# Celery: the broker is Redis; every queue name carries the key prefix so that
# two deployments or test runs on one Redis never take each other's tasks.


def _next_database(url: str) -> str:
    """The same Redis server, the next database number (redis://h:p/0 -> redis://h:p/1)."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return url
    number = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{number + 1}"))


# The broker has a Redis database of its own: the boards' database can lose
# every key (a FLUSHDB, or the fault suite deleting the prefix) without taking
# the queued ticks along, and the queues never show up in the boards' SCANs.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=_next_database(REDIS_URL))
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = RANKINGS["KEY_PREFIX"] + ":tasks"


def tick_queue_names(prefix: str, count: int) -> list[str]:
    """The names of `count` tick queues; like every queue's, they carry the key prefix."""
    return [f"{prefix}:ticks.{n}" for n in range(count)]


# The tick is fanned out over queues of its own: the beat's tick, on the default
# queue, sends the tick of shard s to queue s mod RANKINGS_TICK_QUEUES, so that
# workers consuming different tick queues tick disjoint shards side by side. A
# worker started without -Q consumes the default queue and every tick queue.
RANKINGS["TICK_QUEUES"] = tick_queue_names(RANKINGS["KEY_PREFIX"], env.int("RANKINGS_TICK_QUEUES", default=1))
# The beat's schedule, from the settings of the engine it drives.
_TICK_SECONDS = RANKINGS.get("TICK_SECONDS", DEFAULTS["TICK_SECONDS"].default)
# Unless given, derived from the tick's interval as rankings/conf.py declares it.
_TICK_EXPIRES_SECONDS = RANKINGS.get("TICK_EXPIRES_SECONDS", _TICK_SECONDS * 3)
_VERIFY_SAMPLE_SECONDS = RANKINGS.get("VERIFY_SAMPLE_SECONDS", DEFAULTS["VERIFY_SAMPLE_SECONDS"].default)
_PRUNE_SECONDS = RANKINGS.get("PRUNE_SECONDS", DEFAULTS["PRUNE_SECONDS"].default)
_ALERTS_SEND_SECONDS = RANKINGS.get("ALERTS_SEND_SECONDS", DEFAULTS["ALERTS_SEND_SECONDS"].default)
_NAMES_COPY_SECONDS = RANKINGS.get("NAMES_COPY_SECONDS", DEFAULTS["NAMES_COPY_SECONDS"].default)
_NAMES_CHANGES_SECONDS = RANKINGS.get("NAMES_CHANGES_SECONDS", DEFAULTS["NAMES_CHANGES_SECONDS"].default)
CELERY_TASK_QUEUES = [Queue(name) for name in (CELERY_TASK_DEFAULT_QUEUE, *RANKINGS["TICK_QUEUES"])]
# One task reserved per worker process: a tick must not wait in the buffer of
# a process busy with a long task (a rebuild) while another process is idle.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A tick is acknowledged when it starts, and one whose worker died is not run
# again: the next tick, one interval later, replays the batches the dead one
# committed and claims what it left. Redelivery (acks_late) would add nothing
# but a stale tick an hour later, and repeating a rebuild whose process died
# would only repeat the death; versions_expire marks such a build failed.
CELERY_TASK_ACKS_LATE = False
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # How long a message fetched but not acknowledged stays hidden before
    # another worker gets it. Kept far above the longest task (the time limits
    # below), so that even with acks_late a running tick is never handed to a
    # second worker; with early acks it only covers prefetched messages.
    "visibility_timeout": 3 * 3600,  # seconds
}
# Time limits. A tick works a backlog in batches that each commit on their
# own, so cutting a long one short loses nothing: the soft limit raises inside
# the task (an open transaction rolls back, a batch not yet in Redis is
# replayed by the next tick) and the hard limit kills the process (its
# connection closes and the shard locks go with it). A tick of a normal
# interval takes well under a second; a minute covers the catch-up after an
# outage one bite at a time without ever letting a stuck tick hold a shard.
CELERY_TASK_ANNOTATIONS = {
    "rankings.tasks.tick": {"soft_time_limit": 60, "time_limit": 90},  # seconds
    "rankings.tasks.tick_shards": {"soft_time_limit": 60, "time_limit": 90},  # seconds
}
# Any other task (a rebuild replays every raw sale) gets two hours.
CELERY_TASK_SOFT_TIME_LIMIT = 2 * 3600  # seconds
CELERY_TASK_TIME_LIMIT = 2 * 3600 + 300  # seconds
CELERY_BEAT_SCHEDULE = {
    "rankings-versions-expire": {
        "task": "rankings.tasks.versions_expire",
        "schedule": 300,  # seconds; the grace period is measured in hours
        # Two of these queued (a worker was down) do the same work once: drop the older.
        "options": {"expires": 300},  # seconds
    },
    "rankings-verify-sampled": {
        "task": "rankings.tasks.verify_sampled",
        "schedule": _VERIFY_SAMPLE_SECONDS,
        "options": {"expires": _VERIFY_SAMPLE_SECONDS},  # seconds; a missed run is not repeated
    },
    "rankings-prune": {
        "task": "rankings.tasks.prune",
        "schedule": _PRUNE_SECONDS,
        # Each run deletes everything due, so a queued duplicate would only repeat the checks.
        "options": {"expires": _PRUNE_SECONDS},
    },
    "rankings-alerts-send": {
        "task": "rankings.tasks.alerts_send",
        "schedule": _ALERTS_SEND_SECONDS,
        # Each send delivers what is due and what falls due while it runs (ALERTS_SEND_BUDGET_SECONDS);
        # one queued while another ran finds nothing more, and two at once never send one firing twice.
        "options": {"expires": _ALERTS_SEND_SECONDS},  # seconds
    },
    "rankings-names-changes-copy": {
        "task": "rankings.tasks.names_changes_copy",
        "schedule": _NAMES_CHANGES_SECONDS,
        # Each run takes every change listed by then: a queued duplicate would find none.
        "options": {"expires": _NAMES_CHANGES_SECONDS},  # seconds
    },
    "rankings-names-copy": {
        "task": "rankings.tasks.names_copy",
        "schedule": _NAMES_COPY_SECONDS,
        # Each step goes on from where the last stopped: a missed one is not worth repeating.
        "options": {"expires": _NAMES_COPY_SECONDS},  # seconds
    },
    "rankings-tick": {
        "task": "rankings.tasks.tick",
        "schedule": _TICK_SECONDS,
        "options": {"expires": _TICK_EXPIRES_SECONDS},
    },
}

# Plain lines, or one JSON object a line (salesrank_site/logs.py); Celery's and gunicorn's own
# lines follow (salesrank_site/celery.py, gunicorn.conf.py).
LOG_FORMAT = env("LOG_FORMAT", default="text")
if LOG_FORMAT not in FORMATS:
    raise ImproperlyConfigured(f"LOG_FORMAT must be one of {', '.join(FORMATS)}, not {LOG_FORMAT!r}")
LOGGING = logging_config(log_format=LOG_FORMAT, level=env("LOG_LEVEL", default="INFO"))
LOGGING_CONFIG = "salesrank_site.logs.configure"
# The request's id is made by salesrank_site/request_log.py; django-guid carries it to Celery.
DJANGO_GUID = {
    # Celery tasks queued while answering a request carry its id; a task queued by a task, the id
    # of the task that queued it.
    "INTEGRATIONS": [CeleryIntegration()],
}

# Static files are served by the web process itself (whitenoise), from the app
# folders as well, so a developer's `make run` needs no separate collect step.
WHITENOISE_USE_FINDERS = True

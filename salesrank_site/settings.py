"""Settings, read from the environment (django-environ); defaults suit a developer machine."""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, False),
    ALLOWED_HOSTS=(list, ["127.0.0.1", "localhost"]),
    DATABASE_URL=(str, "postgres:///salesrank"),
    REDIS_URL=(str, "redis://127.0.0.1:6379/0"),
    RANKINGS_KEY_PREFIX=(str, "salesrank"),
)
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env("DEBUG")
# A fixed key only for a developer's DEBUG run; production must set SECRET_KEY.
SECRET_KEY = env("SECRET_KEY", default="insecure-development-key" if DEBUG else environ.Env.NOTSET)
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "catalogue",
    "rankings",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # ETag on every GET response, and 304 for a matching If-None-Match.
    "django.middleware.http.ConditionalGetMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

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
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env("REDIS_URL")
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env("RANKINGS_KEY_PREFIX") + ":cache",
        "OPTIONS": {
            # A slow or absent Redis must not hang a page: fail fast, serve stale.
            "SOCKET_CONNECT_TIMEOUT": 0.25,  # seconds
            "SOCKET_TIMEOUT": 0.25,  # seconds
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
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024  # bytes

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "rankings.api.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "salesrank API",
    "DESCRIPTION": "Exact best-seller rankings by category, from a stream of sale events.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
}

# Ranking engine. Read through rankings.conf.rankings_settings.
RANKINGS = {
    # Every Redis key starts with this, so deployments and test runs can share one Redis.
    "KEY_PREFIX": env("RANKINGS_KEY_PREFIX"),
    "TICK_SECONDS": env.float("RANKINGS_TICK_SECONDS", default=2.0),  # seconds
    # Boards are split by a stable hash of the category; one tick at a time works a shard.
    "SHARDS": env.int("RANKINGS_SHARDS", default=4),
    # A tick claims at most this many pending sales per batch, so a backlog is
    # worked through in steps that each commit and reach Redis quickly.
    "BATCH_SIZE": env.int("RANKINGS_BATCH_SIZE", default=5000),
    # Applied batches are kept this long, so that a rebuilt version, or one
    # switched back to, can catch up by replaying them.
    "BATCH_LOG_SECONDS": env.int("RANKINGS_BATCH_LOG_SECONDS", default=2 * 3600),  # seconds
    # A version switched away from is kept this long for switching back, then deleted.
    "VERSION_GRACE_SECONDS": env.int("RANKINGS_VERSION_GRACE_SECONDS", default=3600),  # seconds
    # Events whose ts is further ahead of the server clock are rejected.
    "MAX_FUTURE_SECONDS": 300,  # seconds
    "MAX_BATCH_EVENTS": 5000,
    # name: (bucket size in seconds, bucket count)
    "WINDOWS": {
        "1h": (60, 60),
        "1d": (3600, 24),
        "7d": (3600, 168),
        "30d": (3600, 720),
    },
}

# Celery: the broker is Redis; every queue name carries the key prefix so that
# two deployments or test runs on one Redis never take each other's tasks.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_TASK_DEFAULT_QUEUE = RANKINGS["KEY_PREFIX"] + ":tasks"
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = False
CELERY_BEAT_SCHEDULE = {
    "rankings-versions-expire": {
        "task": "rankings.tasks.versions_expire",
        "schedule": 300,  # seconds; the grace period is measured in hours
    },
    "rankings-tick": {
        "task": "rankings.tasks.tick",
        "schedule": RANKINGS["TICK_SECONDS"],
        # A tick that waited longer than a few intervals is stale: the next one covers it.
        "options": {"expires": RANKINGS["TICK_SECONDS"] * 3},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
}

# Static files are served by the web process itself (whitenoise), from the app
# folders as well, so a developer's `make run` needs no separate collect step.
WHITENOISE_USE_FINDERS = True

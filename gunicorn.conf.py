"""gunicorn's settings beyond the command line's (read from the directory it starts in): with
LOG_FORMAT=json, its own lines (start, workers, timeouts) are JSON too, as the site's are."""

import sys
from pathlib import Path

import environ

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from salesrank_site.logs import JSON_FORMATTER  # noqa: E402

# The environment as the settings read it: a developer's .env fills in what it leaves out.
env = environ.Env()
if env.bool("READ_DOT_ENV", default=True):
    environ.Env.read_env(ROOT / ".env", overwrite=False)

if env("LOG_FORMAT", default="text") == "json":
    # Merged into gunicorn's own logging configuration, whose handlers take this formatter by the
    # name "generic"; its loggers do not also pass their lines to the root logger's handler.
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["error_console"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["console"], "propagate": False},
        },
        "formatters": {"generic": JSON_FORMATTER},
    }

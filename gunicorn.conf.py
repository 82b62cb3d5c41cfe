"""gunicorn's settings beyond the command line's (read from the directory it starts in): with
LOG_FORMAT=json, its own lines (start, workers, timeouts) are JSON too, as the site's are."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from salesrank_site.logs import JSON_FORMATTER  # noqa: E402

if os.environ.get("LOG_FORMAT") == "json":
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

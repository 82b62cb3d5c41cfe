"""How every process logs: plain lines by default, or with LOG_FORMAT=json one JSON object a line
(time, level, logger, message, the request id, the process id, and whatever a record adds, such as
a request's method, path, status and duration), for a log collector to read.

The request id is the one the web process gave the request (or took from its X-Request-ID
header); a Celery task queued while answering it carries it along (django-guid), so the lines of
a request and of the tick it woke share one id. Each record gets it from the filter below, None
outside any request or task.
"""

import logging
import logging.config
from typing import Any

from django_guid.log_filters import CorrelationId

FORMATS = ("text", "json")
# The request id's field in a record and in a JSON line.
REQUEST_ID = "request_id"

JSON_FORMATTER: dict[str, Any] = {
    "()": "pythonjsonlogger.json.JsonFormatter",
    "fmt": ["levelname", "name", "message", REQUEST_ID, "process"],
    "rename_fields": {"levelname": "level", "name": "logger"},
    "timestamp": "time",  # ISO 8601, UTC
}
REQUEST_ID_FILTER = {"()": CorrelationId, "correlation_id_field": REQUEST_ID}


def logging_config(*, log_format: str, level: str) -> dict:
    """Django's LOGGING: one handler on stderr, in `log_format`, every record with its request id."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": REQUEST_ID_FILTER},
        "formatters": {"json": JSON_FORMATTER, "text": {"format": "%(message)s"}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": log_format, "filters": ["request_id"]},
        },
        "root": {"handlers": ["console"], "level": level},
        # django-guid says at INFO what it does with every request's header and task.
        "loggers": {"django_guid": {"level": "WARNING"}},
    }


def configure(config: dict) -> None:
    """Django's LOGGING_CONFIG: the configuration above, and Python's warnings as log records (one
    line each, through the "py.warnings" logger) rather than text written beside them."""
    logging.config.dictConfig(config)
    logging.captureWarnings(True)


def json_handlers(logger: logging.Logger) -> None:
    """Make every handler of `logger` write JSON lines with the request id (for the handlers Celery
    sets up on its own)."""
    from pythonjsonlogger.json import JsonFormatter

    options = {name: value for name, value in JSON_FORMATTER.items() if name != "()"}
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter(**options))
        handler.addFilter(CorrelationId(correlation_id_field=REQUEST_ID))

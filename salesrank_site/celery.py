"""The Celery app: worker and beat run the write path's ticks."""

import os

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "salesrank_site.settings")

app = Celery("salesrank")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@after_setup_logger.connect
@after_setup_task_logger.connect
def json_lines(logger, **kwargs):
    """With LOG_FORMAT=json, the handlers Celery sets up write JSON lines, as the web's do; else
    Celery's own lines stay as they are."""
    from django.conf import settings

    from salesrank_site.logs import json_handlers

    if settings.LOG_FORMAT == "json":
        json_handlers(logger)

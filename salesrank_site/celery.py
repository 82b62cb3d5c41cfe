"""The Celery app: worker and beat run the write path's ticks."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "salesrank_site.settings")

app = Celery("salesrank")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

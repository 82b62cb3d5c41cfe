"""salesrank: exact best-seller rankings by category."""

from .celery import app as celery_app

__all__ = ("celery_app",)

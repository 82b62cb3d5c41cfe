"""The example shop: a minimal django-oscar project wired to a local salesrank."""

from .celery import app as celery_app

__all__ = ["celery_app"]

"""Celery tasks: thin wrappers that call the services."""

from celery import shared_task


@shared_task(ignore_result=True)
def tick():
    """The beat's periodic tick: aggregate pending sales and expire buckets, as of the clock."""
    from .aggregate import tick as run_tick

    run_tick()

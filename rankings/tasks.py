"""Celery tasks: thin wrappers that call the services."""

from celery import shared_task


@shared_task(ignore_result=True)
def tick():
    """The beat's periodic tick: aggregate pending sales and expire buckets, as of the clock."""
    from rankings.engine.aggregate import tick as run_tick

    run_tick()


@shared_task(ignore_result=True)
def prune():
    """Delete old buckets and logs; create the coming months' sales partitions."""
    from rankings.engine.prune import prune as run_prune

    run_prune()


@shared_task(ignore_result=True)
def versions_expire():
    """Delete versions whose grace period is over; mark abandoned rebuilds failed."""
    from rankings.operations.backfill import versions_expire as expire

    expire()


@shared_task(ignore_result=True)
def verify_sampled():
    """Compare a few random categories' boards with the buckets; rebuild a shard that differs."""
    from rankings.operations.verify import verify_sampled as verify

    verify()


@shared_task(ignore_result=True)
def version_build(activate: bool = False, shards: int | None = None, pinned: list[str] | None = None):
    """A rebuild started from the admin, laid out with `shards` shards of which `pinned` have a
    category each (default: as the active version); its progress is kept on the version's row."""
    from rankings.engine.shards import Layout
    from rankings.operations.backfill import version_build as build

    build(activate=activate, layout=Layout(shards, tuple(pinned or ())) if shards else None)

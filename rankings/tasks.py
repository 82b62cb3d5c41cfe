"""Celery tasks: thin wrappers that call the services."""

from celery import shared_task
from celery.utils.log import get_task_logger

from rankings.conf import rankings_settings
from rankings.ingest.wake import tick_groups, tick_wake, wake_release

log = get_task_logger(__name__)


@shared_task(ignore_result=True)
def tick():
    """The beat's periodic tick: send each group of shards its tick, on the group's own queue."""
    from rankings.engine.shards import shard_count_checked

    for queue, shards in tick_groups(shard_count_checked(), rankings_settings.TICK_QUEUES):
        tick_shards.apply_async(
            kwargs={"shards": shards}, queue=queue, expires=rankings_settings.TICK_EXPIRES_SECONDS
        )


@shared_task(ignore_result=True)
def tick_shards(shards: list[int], woken: int | None = None):
    """Aggregate these shards' pending sales and expire their buckets, as of the clock; a shard
    another tick holds is skipped, and one the active version no longer has is ignored.

    `woken`: the tick group whose wake sent this task (see tick_wake); its mark is lifted first,
    so a sale that commits while this tick runs wakes the group again. Afterwards a shard ticked
    here that has sales again (committed after its last claim) is woken: were its wake sent while
    this tick still held the shard, the woken tick found it busy and skipped it.
    """
    from rankings.engine.shards import shard_count
    from rankings.engine.tick import shards_pending
    from rankings.engine.tick import tick as run_tick

    if woken is not None:
        wake_release(woken)
    report = run_tick(shards=shards)
    log.info(
        "ticked shards %s as of %s: %s sales, %s batches%s",
        report.ticked_shards,
        report.as_of.isoformat(),
        report.sales,
        report.batches,
        f", busy elsewhere {report.busy_shards}" if report.busy_shards else "",
    )
    if report.ticked_shards and rankings_settings.TICK_WAKE:
        tick_wake(shards_pending(report.ticked_shards), count=shard_count())


@shared_task(ignore_result=True)
def prune():
    """Delete old buckets and logs; create the coming months' sales partitions."""
    from rankings.engine.prune import prune as run_prune

    run_prune()


@shared_task(ignore_result=True)
def alerts_send():
    """Deliver the rank alerts' firings that are due, and their retries."""
    from rankings.operations.webhooks import alerts_send as send

    report = send()
    if report.attempts:
        log.info(
            "alerts: %s attempts, %s delivered, %s refused, %s given up",
            report.attempts,
            report.delivered,
            report.refused,
            report.given_up,
        )


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


@shared_task(ignore_result=True)
def names_changes_copy():
    """Mend Redis's copy of the names the catalogue's edits changed."""
    from rankings.engine.names_copy import names_changes_copy as copy

    copy()


@shared_task(ignore_result=True)
def names_copy():
    """A step of the walk that mends Redis's copy of every product name from the catalogue."""
    from rankings.engine.names_copy import names_step

    step = names_step()
    if step.mended or step.pruned:
        log.info("product names in Redis: %s mended, %s of deleted products pruned", step.mended, step.pruned)

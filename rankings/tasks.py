"""Celery tasks: thin wrappers that call the services."""

from collections.abc import Iterable
from typing import TYPE_CHECKING

from celery import shared_task
from celery.utils.log import get_task_logger
from django.db import transaction

from rankings.conf import rankings_settings

if TYPE_CHECKING:
    from rankings.engine.shards import Layout

log = get_task_logger(__name__)


@shared_task(ignore_result=True)
def tick():
    """The beat's periodic tick: send each group of shards its tick, on the group's own queue."""
    from rankings.engine.shards import shard_count_checked

    for queue, shards in tick_groups(shard_count_checked(), rankings_settings.TICK_QUEUES):
        tick_shards.apply_async(
            kwargs={"shards": shards}, queue=queue, expires=rankings_settings.TICK_EXPIRES_SECONDS
        )


def tick_groups(count: int, queues: list[str]) -> list[tuple[str, list[int]]]:
    """(queue, its shards) of `count` shards, for each queue with one: shard s goes to queue s mod len(queues)."""
    groups = [(queue, list(range(n, count, len(queues)))) for n, queue in enumerate(queues)]
    return [(queue, group) for queue, group in groups if group]


@shared_task(ignore_result=True)
def tick_shards(shards: list[int], woken: int | None = None):
    """Aggregate these shards' pending sales and expire their buckets, as of the clock; a shard
    another tick holds is skipped, and one the active version no longer has is ignored.

    `woken`: the tick group whose wake sent this task (see tick_wake); its mark is lifted first,
    so a sale that commits while this tick runs wakes the group again. Afterwards a shard ticked
    here that has sales again (committed after its last claim) is woken: were its wake sent while
    this tick still held the shard, the woken tick found it busy and skipped it.
    """
    from rankings.engine.aggregate import shards_pending
    from rankings.engine.aggregate import tick as run_tick
    from rankings.engine.shards import shard_count

    if woken is not None:
        _wake_release(woken)
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


def tick_wake(shards: Iterable[int], *, count: int) -> None:
    """Send the tick of each group holding one of `shards` (of `count`), unless that group's tick
    is pending already: a burst of commits sends one. Called when sales commit; a failure (Redis or the
    broker away) is logged, not raised: the sales are stored, and the beat's tick counts them."""
    from rankings.engine import store

    chosen = set(shards)
    if not chosen or not rankings_settings.TICK_WAKE:
        return
    # A mark lapses when the task it announced would have expired in its queue.
    ttl = rankings_settings.TICK_EXPIRES_SECONDS
    try:
        for group, (queue, members) in enumerate(tick_groups(count, rankings_settings.TICK_QUEUES)):
            if chosen.isdisjoint(members) or not store.wake_claim(group, ttl=ttl):
                continue
            tick_shards.apply_async(
                kwargs={"shards": members, "woken": group},
                queue=queue,
                expires=rankings_settings.TICK_EXPIRES_SECONDS,
            )
    except Exception:
        log.warning(
            "could not wake the tick of shards %s; the beat's tick counts their sales",
            sorted(chosen),
            exc_info=True,
        )


def tick_wake_on_commit(layout: "Layout", categories: Iterable[Iterable[str]]) -> None:
    """Wake the ticks of the shards that sales of these categories are queued for (besides the
    board of all), once the current transaction commits: at once outside one, never should it
    roll back. No categories (no sale stored): nothing is woken."""
    from rankings.engine.shards import ALL

    chosen = {shard for slugs in categories for slug in (ALL, *slugs) for shard in layout.shards_of(slug)}
    if chosen:
        transaction.on_commit(lambda: tick_wake(chosen, count=layout.shards))


def _wake_release(group: int) -> None:
    from rankings.engine import store

    try:
        store.wake_release(group)
    except store.StoreError:
        log.warning("could not lift the wake mark of tick group %s; it lapses by itself", group)


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

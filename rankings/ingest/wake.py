"""Woken ticks: when sales commit, the tick of their shards is sent at once rather than at the
beat's next tick, one per group of shards however many commits come in a burst."""

import logging
from collections.abc import Iterable

from celery import current_app
from django.db import transaction

from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.engine.shards import ALL, Layout

log = logging.getLogger(__name__)

# The task a wake sends, by name: the ingest does not import the Celery tasks that call it.
TICK_SHARDS = "rankings.tasks.tick_shards"


def tick_groups(count: int, queues: list[str]) -> list[tuple[str, list[int]]]:
    """(queue, its shards) of `count` shards, for each queue with one: shard s goes to queue s mod len(queues)."""
    groups = [(queue, list(range(n, count, len(queues)))) for n, queue in enumerate(queues)]
    return [(queue, group) for queue, group in groups if group]


def tick_wake(shards: Iterable[int], *, count: int) -> None:
    """Send the tick of each group holding one of `shards` (of `count`), unless that group's tick
    is pending already: a burst of commits sends one. Called when sales commit; a failure (Redis or the
    broker away) is logged, not raised: the sales are stored, and the beat's tick counts them."""
    chosen = set(shards)
    if not chosen or not rankings_settings.TICK_WAKE:
        return
    # A mark lapses when the task it announced would have expired in its queue.
    ttl = rankings_settings.TICK_EXPIRES_SECONDS
    try:
        for group, (queue, members) in enumerate(tick_groups(count, rankings_settings.TICK_QUEUES)):
            if chosen.isdisjoint(members) or not store.wake_claim(group, ttl=ttl):
                continue
            current_app.send_task(
                TICK_SHARDS,
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


def tick_wake_on_commit(layout: Layout, categories: Iterable[Iterable[str]]) -> None:
    """Wake the ticks of the shards that sales of these categories are queued for (besides the
    board of all), once the current transaction commits: at once outside one, never should it
    roll back. No categories (no sale stored): nothing is woken."""
    chosen = {shard for slugs in categories for slug in (ALL, *slugs) for shard in layout.shards_of(slug)}
    if chosen:
        transaction.on_commit(lambda: tick_wake(chosen, count=layout.shards))


def wake_release(group: int) -> None:
    """The group's woken tick has started: a sale committed from now on wakes it again."""
    try:
        store.wake_release(group)
    except store.StoreError:
        log.warning("could not lift the wake mark of tick group %s; it lapses by itself", group)

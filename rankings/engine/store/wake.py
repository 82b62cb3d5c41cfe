"""Wake marks: at most one woken tick pending per group of shards, whatever the commits of sales."""

from rankings.engine.store.client import fast, translated
from rankings.engine.store.keys import wake_key


@translated
def wake_claim(group: int, *, ttl: float) -> bool:
    """Mark a wake of tick group `group` pending, unless one is: True when this caller marked it
    (and is to send the tick). The mark lapses after `ttl` seconds should the tick never start."""
    return bool(fast().set(wake_key(group), "1", nx=True, px=max(1, int(ttl * 1000))))


@translated
def wake_release(group: int) -> None:
    """The group's woken tick has started: a sale committed from now on wakes it again."""
    fast().delete(wake_key(group))

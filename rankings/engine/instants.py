"""A board's instant as readers are told it: the epoch seconds Redis keeps, as a UTC datetime."""

import datetime as dt
import functools


@functools.lru_cache(maxsize=1024)  # the same few instants, between two ticks, for every read
def instant(as_of: float | None) -> dt.datetime | None:
    """A board's as_of (epoch seconds) as a UTC datetime, to the second; None when unknown."""
    if not as_of:
        return None
    return dt.datetime.fromtimestamp(int(as_of), tz=dt.UTC)

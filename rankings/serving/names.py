"""Names pushed to the catalogue reach every reader process within about a second.

A push of names (the catalogue API) raises a stamp on the readers' pointer in Redis
(store.names_changed), which every process reads with the active version, at most once per
ACTIVE_VERSION_TTL and in the same round trip. A process that finds it changed forgets the product
and category names it remembers, and reads them again from the catalogue. When Redis missed the
push, the names' own lifetimes still bound how long an old one shows (under a minute).
"""

import threading
from collections.abc import Callable

from rankings.engine import store

_forgets: list[Callable[[], None]] = []
_UNSEEN = object()
_seen: list[object] = [_UNSEEN]  # the stamp this process last acted on
_lock = threading.Lock()


def forget_on_push(forget: Callable[[], None]) -> None:
    """Register what forgets a memory of names (taking its own lock) when a push is seen."""
    _forgets.append(forget)


def names_current() -> None:
    """Forget the names this process remembers if a push has raised the stamp since it last looked:
    a dictionary lookup when nothing changed, no round trip ever."""
    stamp = store.names_stamp()
    if stamp == _seen[0]:
        return
    with _lock:
        if stamp == _seen[0]:
            return
        _seen[0] = stamp
    for forget in _forgets:
        forget()

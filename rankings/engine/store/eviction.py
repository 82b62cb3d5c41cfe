"""Redis's eviction policy: boards are not a cache, and a policy that may evict them is refused."""

import logging
from typing import Any

from cachetools import TTLCache
from django.conf import settings
from redis.cluster import RedisCluster

from rankings.engine.store.client import (
    REMEMBERED_PREFIXES,
    ResponseError,
    StoreError,
    UnsafeEvictionPolicy,
    clustered,
    fast,
    memory_lock,
    remembered,
    translated,
)

log = logging.getLogger(__name__)

# How long the answer of CONFIG GET maxmemory-policy is trusted: a tick every
# few seconds then costs no extra round trip, and a change of policy is still
# seen within this time.
EVICTION_CHECK_SECONDS = 30.0  # seconds

policies: TTLCache = remembered(TTLCache(maxsize=REMEMBERED_PREFIXES, ttl=EVICTION_CHECK_SECONDS))
# The Redis servers whose policy was found hidden: the warning is given once, not on every tick.
_policy_hidden: set[str] = remembered(set())
_UNKNOWN = object()


@translated
def eviction_policy() -> str | None:
    """Redis's maxmemory-policy (remembered for EVICTION_CHECK_SECONDS); None when CONFIG is refused.

    Managed Redis services often rename or forbid CONFIG; then the policy
    cannot be known here and is the operator's responsibility.
    """
    url = settings.REDIS_URL
    with memory_lock:
        cached = policies.get(url, _UNKNOWN)
    if cached is not _UNKNOWN:
        return cached
    try:
        # The fast client: a status page must not hang on a Redis that is down.
        policy = _policy_of_every_primary()
        _policy_hidden.discard(url)
    except ResponseError as error:
        if url not in _policy_hidden:
            log.warning(
                "cannot read Redis maxmemory-policy (%s): make sure it is noeviction or a volatile-*"
                " policy, or boards may be evicted unnoticed",
                error,
            )
            _policy_hidden.add(url)
        policy = None
    with memory_lock:
        policies[url] = policy
    return policy


_POLICY_FIELDS = {"maxmemory-policy", b"maxmemory-policy"}


def _policy_of_every_primary() -> str | None:
    """The maxmemory-policy of the one server, or of a cluster's primaries the first that may evict;
    None when an answer names none."""
    if not clustered():
        answers: list[dict[Any, Any]] = [fast().config_get("maxmemory-policy")]
    else:
        answer: dict[Any, Any] = fast().config_get("maxmemory-policy", target_nodes=RedisCluster.PRIMARIES)
        # One answer per primary, by node name; a cluster of one primary answers as a server does.
        answers = [answer] if _POLICY_FIELDS & answer.keys() else list(answer.values())
    found: list[str | None] = []
    for answer in answers:
        policy = answer.get("maxmemory-policy") or answer.get(b"maxmemory-policy")
        found.append(policy.decode() if isinstance(policy, bytes) else policy)
    return min(found, key=lambda policy: eviction_policy_safe(policy) is not False)


def eviction_policy_safe(policy: str | None) -> bool | None:
    """Boards carry no TTL, so only allkeys-* policies can evict them; None when unknown."""
    if policy is None:
        return None
    return not policy.startswith("allkeys-")


@translated
def eviction_policy_check() -> None:
    """Raise UnsafeEvictionPolicy when Redis may evict a board; warn only when the policy is hidden."""
    try:
        policy = eviction_policy()
    except StoreError:
        return  # Redis is unreachable: the tick's own calls meet that, and the check runs next time
    if eviction_policy_safe(policy) is False:
        raise UnsafeEvictionPolicy(
            f"Redis maxmemory-policy is {policy}: boards would be evicted;"
            " set noeviction or a volatile-* policy"
        )

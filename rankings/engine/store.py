"""The only module that talks to Redis: key names, Lua scripts and pipelines.

Layout, for key prefix P, version V and shard S (the hash tag keeps a shard's
keys on one Redis Cluster slot, so a batch can be applied atomically):

    P:active                         hash: version that serves reads, epoch
                                     (the switch that made it active)
    P:vV:gen                         generation marker; missing = Redis lost data
    P:vV:shards                      the version's layout, for readers: its shard
                                     count, then its pinned categories ("5,toys")
    P:vV:{sS}:state                  hash: seq (last applied batch), asof, gen;
                                     from:K (a version laid out unlike the active
                                     one: the last batch of the active layout's
                                     shard K replayed into it)
                                     (asof is the shard's as_of, epoch seconds; the
                                     field keeps its stored name so a running
                                     deployment's state stays readable)
    P:vV:{sS}:b:<window>:<metric>:<category>
                                     the board: a sorted set, product -> -score
    P:vV:{sS}:t:<window>:<metric>:<category>
                                     the board's first BLOB_SIZE ranks as one JSON
                                     string, rewritten in the same Lua call that
                                     changes the board, so reading them is one GET
    P:vV:{sS}:b:…:rebuild:<token>    a rebuild's temporary board until it is swapped
                                     in; it expires, so a rebuild that dies leaves none

On a Redis Cluster (REDIS_CLUSTER) the keys of one shard share its slot, so
every Lua call stays on one node; the keys without a shard (active, gen,
shards) are never in a call with a shard's keys. Reads of several shards are
pipelines, which the cluster client sends to each node at once, and SCANs
visit every primary.

Scores are stored negated so that ZRANGE (ascending) yields score descending
with equal scores by productId ascending in byte order: exactly the ranking
order, with no composite score and no loss of integer precision. A product
whose score is not positive is removed from the board.
"""

import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import redis
from cachetools import LRUCache, TTLCache
from django.conf import settings
from redis.backoff import NoBackoff
from redis.client import Pipeline
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.retry import Retry

from rankings.conf import metric_pair, other_metric, rankings_settings
from rankings.engine.split import PART_MARK, is_part

log = logging.getLogger(__name__)

# Reads for the public must fail fast when Redis is slow or down, so that pages
# can serve the last known answer instead of hanging a worker.
FAST_TIMEOUT = 0.5  # seconds
# The write path and the operators' tools may wait longer: a large batch is one
# Lua call, and a SCAN of every board takes a while.
PATIENT_TIMEOUT = 30  # seconds
# How long a reader trusts its copy of the active version; a switch-over is
# seen by every reader within this time, and both versions stay whole meanwhile.
ACTIVE_VERSION_TTL = 1.0  # seconds
# Members written per ZADD when a board is rebuilt: large enough to keep round
# trips few, small enough not to block Redis for long.
REBUILD_CHUNK = 5000
# Keys SCAN visits per call: it walks the whole keyspace whatever the pattern (other prefixes'
# keys too), so a larger step costs far fewer round trips; each call stays a few milliseconds.
SCAN_COUNT = 10_000
# Ranks kept in a board's blob: the first page of every list and the product
# page badges of the best sellers come from one GET, the read that is asked most.
BLOB_SIZE = 100
# Marks a rebuild's temporary board, written beside the live one until the swap.
TEMP_MARK = ":rebuild:"
# Entries each of the caches below keeps (one per key prefix, Redis server or version): a
# process serves one installation, and tests use a prefix each; past this the oldest is asked again.
REMEMBERED_PREFIXES = 64


class StoreError(Exception):
    """Redis could not do what was asked. The store raises nothing else, so no caller imports redis."""


class Unreachable(StoreError):
    """Redis did not answer in time (down, paused or overloaded)."""


class Refused(StoreError):
    """Redis answered with an error: a script refused the change, or the command is not allowed."""


class UnsafeEvictionPolicy(StoreError):
    """Redis may evict any key under memory pressure, and a board lost that way goes unnoticed."""


# A cluster whose node is down (CLUSTERDOWN until a replica takes over its slots, a slot no node
# serves) and a slot moving are Redis not answering, not Redis refusing.
_UNREACHABLE = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.SlotNotCoveredError,
)
# What the client raises: RedisCluster raises errors of its own outside RedisError, among them
# "cannot be connected" (caused by a connection error) and a command it cannot route (a bug).
_ERRORS = (redis.RedisError, redis.exceptions.RedisClusterException)


def _store_error(error: Exception) -> StoreError:
    if isinstance(error, _UNREACHABLE) or isinstance(error.__cause__, _UNREACHABLE):
        return Unreachable(str(error))
    return Refused(str(error))


def _translated(func):
    """Redis's exceptions become the store's own (see StoreError)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except _ERRORS as error:
            raise _store_error(error) from error

    return wrapper


# --- clients ----------------------------------------------------------------------

Client = redis.Redis | RedisCluster

_clients: dict[str, Client] = {}
_lock = threading.Lock()


def _client(name: str, timeout: float) -> Client:
    if name not in _clients:
        with _lock:
            if name not in _clients:
                _clients[name] = _connect(timeout, patient=name == "patient")
    return _clients[name]


def _connect(timeout: float, *, patient: bool) -> Client:
    """A client of REDIS_URL: of the one server, or with REDIS_CLUSTER of the cluster that node is in
    (it learns the other nodes from it, and follows a replica that takes over a primary's slots)."""
    options = {"socket_timeout": timeout, "socket_connect_timeout": timeout, "health_check_interval": 30}
    if not clustered():
        return redis.Redis.from_url(settings.REDIS_URL, **options)
    if not patient:
        # A public read tries once more after learning the cluster's new layout, then gives up:
        # its last known answer is better than a wait through a failover.
        options["retry"] = Retry(NoBackoff(), 1)
    return RedisCluster.from_url(settings.REDIS_URL, **options)


def clustered() -> bool:
    """Whether the boards live on a Redis Cluster (REDIS_CLUSTER) rather than one server."""
    return bool(getattr(settings, "REDIS_CLUSTER", False))


def fast() -> Client:
    """The client that gives up after FAST_TIMEOUT: for the reads that serve the public."""
    return _client("fast", FAST_TIMEOUT)


def patient() -> Client:
    """The client that waits up to PATIENT_TIMEOUT: for writes and the operators' reads."""
    return _client("patient", PATIENT_TIMEOUT)


def reset_clients() -> None:
    """Forget connections and what was remembered of Redis (after a fork, or in tests that restart it)."""
    _clients.clear()
    _scripts.clear()
    with _cache_lock:
        _active_read.clear()
        _eviction_cache.clear()
        _policy_hidden.clear()
        _layouts.clear()
        _seq_seen.clear()


@contextmanager
def pipeline() -> Iterator[Pipeline]:
    """Commands of several store functions, each given `pipe=`, sent when the block ends in one
    MULTI/EXEC: no other client's command runs between them, and none is sent if the block raises
    or the connection drops before EXEC.

    On a Redis Cluster the keys of one block may lie on different nodes, where no MULTI reaches:
    there each command is sent as it is given, and answered before the next, so a block must give
    them in an order of which every prefix is harmless (the shard count before the pointer that
    names its version)."""
    if clustered():
        try:
            yield patient()
        except _ERRORS as error:
            raise _store_error(error) from error
        _active_forget()
        return
    pipe = patient().pipeline(transaction=True)
    try:
        yield pipe
        pipe.execute()
    except _ERRORS as error:
        raise _store_error(error) from error
    finally:
        pipe.reset()
    # The block may have moved the readers' pointer (active_set): this process sees it at once.
    _active_forget()


_scripts: dict[str, Script] = {}


def _script(source: str) -> Script:
    """The script, loaded into Redis once and then called by its SHA (reloaded if Redis forgot it)."""
    script = _scripts.get(source)
    if script is None:
        script = _scripts[source] = patient().register_script(source)
    return script


# Guards the caches below: a server process reads from several threads.
_cache_lock = threading.Lock()


# --- eviction policy ---------------------------------------------------------------

# How long the answer of CONFIG GET maxmemory-policy is trusted: a tick every
# few seconds then costs no extra round trip, and a change of policy is still
# seen within this time.
EVICTION_CHECK_SECONDS = 30.0  # seconds

_eviction_cache: TTLCache = TTLCache(maxsize=REMEMBERED_PREFIXES, ttl=EVICTION_CHECK_SECONDS)
# The Redis servers whose policy was found hidden: the warning is given once, not on every tick.
_policy_hidden: set[str] = set()
_UNKNOWN = object()


@_translated
def eviction_policy() -> str | None:
    """Redis's maxmemory-policy (remembered for EVICTION_CHECK_SECONDS); None when CONFIG is refused.

    Managed Redis services often rename or forbid CONFIG; then the policy
    cannot be known here and is the operator's responsibility.
    """
    url = settings.REDIS_URL
    with _cache_lock:
        cached = _eviction_cache.get(url, _UNKNOWN)
    if cached is not _UNKNOWN:
        return cached
    try:
        # The fast client: a status page must not hang on a Redis that is down.
        policy = _policy_of_every_primary()
        _policy_hidden.discard(url)
    except redis.ResponseError as error:
        if url not in _policy_hidden:
            log.warning(
                "cannot read Redis maxmemory-policy (%s): make sure it is noeviction or a volatile-*"
                " policy, or boards may be evicted unnoticed",
                error,
            )
            _policy_hidden.add(url)
        policy = None
    with _cache_lock:
        _eviction_cache[url] = policy
    return policy


_POLICY_FIELDS = {"maxmemory-policy", b"maxmemory-policy"}


def _policy_of_every_primary() -> str:
    """The maxmemory-policy of the one server, or of a cluster's primaries the first that may evict."""
    if not clustered():
        answers = [fast().config_get("maxmemory-policy")]
    else:
        answer = fast().config_get("maxmemory-policy", target_nodes=RedisCluster.PRIMARIES)
        # One answer per primary, by node name; a cluster of one primary answers as a server does.
        answers = [answer] if _POLICY_FIELDS & answer.keys() else answer.values()
    policies = []
    for answer in answers:
        policy = answer.get("maxmemory-policy") or answer.get(b"maxmemory-policy")
        policies.append(policy.decode() if isinstance(policy, bytes) else policy)
    return min(policies, key=lambda policy: eviction_policy_safe(policy) is not False)


def eviction_policy_safe(policy: str | None) -> bool | None:
    """Boards carry no TTL, so only allkeys-* policies can evict them; None when unknown."""
    if policy is None:
        return None
    return not policy.startswith("allkeys-")


@_translated
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


# --- key names ---------------------------------------------------------------


def prefix() -> str:
    return rankings_settings.KEY_PREFIX


def active_key() -> str:
    return f"{prefix()}:active"


def gen_key(version: int) -> str:
    return f"{prefix()}:v{version}:gen"


def shards_key(version: int) -> str:
    return f"{prefix()}:v{version}:shards"


def shard_tag(version: int, shard: int) -> str:
    return f"{prefix()}:v{version}:{{s{shard}}}"


def state_key(version: int, shard: int) -> str:
    return f"{shard_tag(version, shard)}:state"


def board_key(version: int, shard: int, window: str, metric: str, category: str) -> str:
    return f"{shard_tag(version, shard)}:b:{window}:{metric}:{category}"


def blob_key(version: int, shard: int, window: str, metric: str, category: str) -> str:
    return f"{shard_tag(version, shard)}:t:{window}:{metric}:{category}"


# --- versions -------------------------------------------------------------------

# prefix -> (the active version as last read from Redis, time.monotonic() of that read): trusted
# for ACTIVE_VERSION_TTL, and served while Redis is unreachable. A plain dict, read without the
# lock, because every read of a board asks it first; emptied should it ever hold
# REMEMBERED_PREFIXES prefixes.
_active_read: dict[str, tuple[int, float]] = {}


def _remember(memory: dict, key, value) -> None:
    """memory[key] = value, in a dict that a reader may read without the lock and that is emptied when full."""
    with _cache_lock:
        if len(memory) >= REMEMBERED_PREFIXES:
            memory.clear()
        memory[key] = value


def _active_forget() -> None:
    with _cache_lock:
        _active_read.pop(prefix(), None)


@_translated
def active_version(*, fresh: bool = False) -> int:
    """The version that serves reads; when Redis is unreachable, the last one seen."""
    key = prefix()
    known = _active_read.get(key)
    if known is not None and not fresh and time.monotonic() - known[1] < ACTIVE_VERSION_TTL:
        return known[0]
    try:
        try:
            value = fast().hget(active_key(), "version")
        except redis.ResponseError:  # a pointer from before switches were numbered, until a tick
            value = fast().get(active_key())
    except _ERRORS as error:
        if known is not None:
            return known[0]
        raise Unreachable(str(error)) from error
    version = int(value) if value else 1
    _remember(_active_read, key, (version, time.monotonic()))
    return version


# Point readers at ARGV[1], made active by switch number ARGV[2], unless the
# pointer already names a later switch: a writer that read PostgreSQL before a
# switch committed can never move the pointer back. A pointer written before
# switches were numbered (a plain string) is replaced. Returns the version named.
_ACTIVE_SET = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
    local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '-1')
    if epoch > tonumber(ARGV[2]) then
        return tonumber(redis.call('HGET', KEYS[1], 'version'))
    end
elseif kind ~= 'none' then
    redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'epoch', ARGV[2])
return tonumber(ARGV[1])
"""


@_translated
def active_set(version: int, epoch: int, *, pipe: Pipeline | None = None) -> int | None:
    """Point every reader at `version`, made active by switch `epoch` (they see it within
    ACTIVE_VERSION_TTL); refused if the pointer names a later switch. Returns the version named
    (with `pipe`, the pipeline's result holds it)."""
    named = _script(_ACTIVE_SET)(keys=[active_key()], args=[version, epoch], client=pipe or patient())
    if pipe is not None:
        return None
    _active_forget()
    return int(named)


@_translated
def active_ensure(version: int, epoch: int) -> int:
    """Restore the readers' pointer if Redis lost it or it names an earlier switch than `epoch`."""
    return int(_script(_ACTIVE_SET)(keys=[active_key()], args=[version, epoch], client=patient()))


def wake_key(group: int) -> str:
    return f"{prefix()}:wake:{group}"


@_translated
def wake_claim(group: int, *, ttl: float) -> bool:
    """Mark a wake of tick group `group` pending, unless one is: True when this caller marked it
    (and is to send the tick). The mark lapses after `ttl` seconds should the tick never start."""
    return bool(fast().set(wake_key(group), "1", nx=True, px=max(1, int(ttl * 1000))))


@_translated
def wake_release(group: int) -> None:
    """The group's woken tick has started: a sale committed from now on wakes it again."""
    fast().delete(wake_key(group))


# A version's layout never changes, so a reader asks Redis once per version: (prefix, version) -> layout.
_layouts: dict[tuple[str, int], tuple[int, tuple[str, ...]]] = {}


@_translated
def shard_layout_set(
    version: int, shards: int, pinned: Sequence[str] = (), *, pipe: Pipeline | None = None
) -> None:
    """Record the version's layout (its shard count, then its pinned categories, comma-separated:
    slugs hold no comma) where readers find it without PostgreSQL."""
    (pipe or patient()).set(shards_key(version), ",".join([str(shards), *pinned]))


@_translated
def shard_layout_get(version: int) -> tuple[int, tuple[str, ...]] | None:
    """The version's (shard count, pinned categories) as recorded in Redis; None when Redis does not hold it."""
    key = (prefix(), version)
    known = _layouts.get(key)
    if known is not None:
        return known
    value = fast().get(shards_key(version))
    if value is None:
        return None
    count, *pinned = value.decode().split(",")
    layout = (int(count), tuple(pinned))
    _remember(_layouts, key, layout)
    return layout


# --- the write path --------------------------------------------------------------

# A board's first `size` ranks with both metrics' scores, as one JSON string (the blob's text).
# Scores are copied as the strings Redis gives, so no precision is lost on the way to JSON;
# members are product ids, which need no JSON escaping.
# Rewrite the blob of each board in KEYS[first..last] (triples: board, the other metric's board,
# blob) from the board itself. A board of at most `size` members has no blob: it would copy the
# whole board, and a read builds the same text from the board (_HEAD).
_BLOBS = """
local function blob_text(board, other, size, total)
    local rows = redis.call('ZRANGE', board, 0, size - 1, 'WITHSCORES')
    local parts = {}
    if #rows > 0 then
        local members = {}
        for j = 1, #rows, 2 do members[#members + 1] = rows[j] end
        local others = redis.call('ZMSCORE', other, unpack(members))
        for j = 1, #rows, 2 do
            local o = others[(j + 1) / 2]
            o = o and string.gsub(o, '^-', '') or '0'
            parts[#parts + 1] = '["' .. rows[j] .. '",' .. string.gsub(rows[j + 1], '^-', '') .. ',' .. o .. ']'
        end
    end
    return '{"total":' .. total .. ',"rows":[' .. table.concat(parts, ',') .. ']}'
end

local function write_blobs(first, last, size)
    for i = first, last, 3 do
        local board, other, blob = KEYS[i], KEYS[i + 1], KEYS[i + 2]
        local total = redis.call('ZCARD', board)
        if total <= size then
            redis.call('DEL', blob)
        else
            redis.call('SET', blob, blob_text(board, other, size, total))
        end
    end
end
"""

# Apply one batch of a shard, exactly once: the batch's sequence number must be
# the next one and the shard's generation must match, or nothing is written.
# Add a batch's changes, ARGV's triples (board index in KEYS, member, increment) from ARGV[first]
# on; a member whose score is no longer positive (scores are stored negated) leaves its board.
_CHANGES = """
local function add_changes(first)
    for i = first, #ARGV, 3 do
        local key = KEYS[tonumber(ARGV[i])]
        local member = ARGV[i + 1]
        local score = tonumber(redis.call('ZINCRBY', key, ARGV[i + 2], member))
        if score >= 0 then redis.call('ZREM', key, member) end
    end
end
"""

# KEYS: state, then triples (board, other metric's board, blob).
# ARGV: seq, as_of, gen, blob size, then triples (board index, member, increment).
# Returns 1 = applied, 0 = already applied (a replay), -1 = the shard must be
# rebuilt (Redis lost it, or a batch is missing).
_APPLY = (
    _BLOBS
    + _CHANGES
    + """
local state = KEYS[1]
local seq = tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', state, 'seq') or '0')
local gen = redis.call('HGET', state, 'gen')
if cur >= seq and gen == ARGV[3] then return 0 end
if cur ~= seq - 1 or (seq > 1 and gen ~= ARGV[3]) then return -1 end
add_changes(5)
write_blobs(2, #KEYS, tonumber(ARGV[4]))
redis.call('HSET', state, 'seq', seq, 'asof', ARGV[2], 'gen', ARGV[3])
return 1
"""
)

# Move a shard's as_of forward when the clock moved but no board changed;
# only if Redis holds exactly the batch the caller believes it holds.
_TOUCH = """
local state = KEYS[1]
if redis.call('HGET', state, 'seq') ~= ARGV[1] or redis.call('HGET', state, 'gen') ~= ARGV[3] then
    return 0
end
redis.call('HSET', state, 'asof', ARGV[2])
return 1
"""

# Apply one batch of another layout's shard ARGV[1] (a field from:K) to this shard, exactly once:
# applied unless the field already holds its number ARGV[2] or more; the shard's own seq counts
# the batches it took. KEYS and the rest of ARGV as in _APPLY (from its third argument: as_of, gen,
# blob size, triples). Returns 1 = applied, 0 = already applied, -1 = the generation differs.
_APPLY_ROUTED = (
    _BLOBS
    + _CHANGES
    + """
local state = KEYS[1]
if redis.call('HGET', state, 'gen') ~= ARGV[4] then return -1 end
local seen = tonumber(redis.call('HGET', state, ARGV[1]) or '0')
if seen >= tonumber(ARGV[2]) then return 0 end
add_changes(6)
write_blobs(2, #KEYS, tonumber(ARGV[5]))
redis.call('HINCRBY', state, 'seq', 1)
redis.call('HSET', state, ARGV[1], ARGV[2], 'asof', ARGV[3])
return 1
"""
)

# Set a shard's from:K fields (ARGV: gen, then pairs field, value); with ARGV[2] = 'replace', every
# other from: field is deleted first, else a field only ever grows. 0 when the generation differs.
_SOURCES_SET = """
local state = KEYS[1]
if redis.call('HGET', state, 'gen') ~= ARGV[1] then return 0 end
if ARGV[2] == 'replace' then
    local fields = redis.call('HKEYS', state)
    for _, field in ipairs(fields) do
        if string.sub(field, 1, 5) == 'from:' then redis.call('HDEL', state, field) end
    end
end
for i = 3, #ARGV, 2 do
    local seen = tonumber(redis.call('HGET', state, ARGV[i]) or '0')
    if ARGV[2] == 'replace' or tonumber(ARGV[i + 1]) > seen then redis.call('HSET', state, ARGV[i], ARGV[i + 1]) end
end
return 1
"""


# Put rebuilt boards in place and rewrite their blobs in one step: readers see
# the old boards with their blobs or the new ones with theirs, never a missing
# or half-written board, nor a blob that lags its board. Temporary boards carry
# a TTL (so that a rebuild that dies leaves nothing behind); the live board
# must not inherit it, as RENAME would make it. If a temporary board is gone,
# nothing at all is changed.
# KEYS: state, then pairs (temporary, live), then triples (board, other
# metric's board, blob), then the stale live keys to delete (declared as keys,
# all of the shard's slot, so that Redis Cluster runs the call on their node);
# ARGV: seq, as_of, gen, number of pairs, blob size, number of triples.
_SWAP = (
    _BLOBS
    + """
local pairs_end = 1 + 2 * tonumber(ARGV[4])
for i = 2, pairs_end, 2 do
    if redis.call('EXISTS', KEYS[i]) == 0 then
        return redis.error_reply('temporary board ' .. KEYS[i] .. ' is gone (expired?); nothing was swapped')
    end
end
for i = 2, pairs_end, 2 do
    redis.call('RENAME', KEYS[i], KEYS[i + 1])
    redis.call('PERSIST', KEYS[i + 1])
end
local triples_end = pairs_end + 3 * tonumber(ARGV[6])
for i = triples_end + 1, #KEYS do
    redis.call('DEL', KEYS[i])
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'asof', ARGV[2], 'gen', ARGV[3])
write_blobs(pairs_end + 1, triples_end, tonumber(ARGV[5]))
return 1
"""
)


class Change(NamedTuple):
    """A net change of one product's score on one board (a tuple: a tick makes hundreds of thousands)."""

    window: str
    metric: str
    category: str
    product_id: str
    delta: int


@_translated
def generation(version: int) -> str:
    """The current generation token, created if missing (after Redis lost its data)."""
    token = uuid.uuid4().hex
    return _generation_of(patient().set(gen_key(version), token, nx=True, get=True), token)


def _generation_of(held: bytes | None, token: str) -> str:
    """The generation after SET NX GET of `token`: the one Redis held, else `token`, now set."""
    return held.decode() if held is not None else token


@_translated
def shard_open(version: int, shard: int) -> tuple[str, dict[str, str]]:
    """The version's generation token (as `generation`) and what Redis holds of the shard's state
    (as `shard_state`), in one round trip: how every shard tick begins."""
    token = uuid.uuid4().hex
    pipe = patient().pipeline(transaction=False)
    pipe.set(gen_key(version), token, nx=True, get=True)
    pipe.hgetall(state_key(version, shard))
    held, raw = pipe.execute()
    return _generation_of(held, token), _decoded(raw)


@_translated
def generation_get(version: int) -> str | None:
    """The version's generation token, or None when Redis does not hold the version."""
    value = patient().get(gen_key(version))
    return value.decode() if value else None


def _board_keys(version: int, shard: int, window: str, metric: str, category: str) -> tuple[str, str, str]:
    return (
        board_key(version, shard, window, metric, category),
        board_key(version, shard, window, other_metric(metric), category),
        blob_key(version, shard, window, metric, category),
    )


@_translated
def batch_apply(
    *, version: int, shard: int, seq: int, as_of: float, gen: str, changes: Iterable[Change]
) -> int:
    """Apply a batch's changes atomically with its sequence number and blobs; see _APPLY."""
    keys, argv = _changes_args(version, shard, changes)
    args = [seq, repr(as_of), gen, BLOB_SIZE, *argv]
    return int(_script(_APPLY)(keys=keys, args=args, client=patient()))


def _changes_args(version: int, shard: int, changes: Iterable[Change]) -> tuple[list[str], list]:
    """KEYS (state, then each board's triples) and the change triples of ARGV for _APPLY and _APPLY_ROUTED."""
    keys = [state_key(version, shard)]
    index: dict[tuple, int] = {}
    argv: list = []
    # Changes are read by position: a batch read back from PostgreSQL holds plain lists.
    for window, metric, category, product_id, delta in changes:
        pair = metric_pair(metric)
        board = (window, category, pair)
        first = index.get(board)
        if first is None:
            # Both metrics' blobs of a pair show both scores: a change to one rewrites both. A batch
            # of views alone rewrites no sales board's blob, and the other way round.
            first = index[board] = len(keys) + 1
            for each in pair:
                keys.extend(_board_keys(version, shard, window, each, category))
        argv.extend((first if metric == pair[0] else first + 3, product_id, -delta))
    return keys, argv


@_translated
def batch_apply_routed(
    *, version: int, shard: int, source: int, seq: int, as_of: float, gen: str, changes: Iterable[Change]
) -> int:
    """Apply the changes of batch `seq` of the active layout's shard `source` that fall in this shard
    of a version laid out otherwise, exactly once; see _APPLY_ROUTED for the outcome."""
    keys, argv = _changes_args(version, shard, changes)
    args = [f"from:{source}", seq, repr(as_of), gen, BLOB_SIZE, *argv]
    return int(_script(_APPLY_ROUTED)(keys=keys, args=args, client=patient()))


@_translated
def shard_sources_set(*, version: int, shard: int, gen: str, sources: dict[int, int], replace: bool) -> bool:
    """Record that the shard holds the batches of the active layout's shards up to `sources`
    (shard -> seq); `replace` forgets every other; else a position only grows. False: generation differs."""
    args = [gen, "replace" if replace else "grow"]
    for source, seq in sources.items():
        args.extend((f"from:{source}", seq))
    return bool(_script(_SOURCES_SET)(keys=[state_key(version, shard)], args=args, client=patient()))


def shard_sources(state: dict[str, str]) -> dict[int, int]:
    """The from:K positions of a shard's state (as shard_state returns it)."""
    return {int(k[5:]): int(v) for k, v in state.items() if k.startswith("from:")}


@_translated
def shard_touch(*, version: int, shard: int, seq: int, as_of: float, gen: str) -> bool:
    """Advance a shard's as_of; False when Redis does not hold the shard at `seq` (rebuild it)."""
    args = [str(seq), repr(as_of), gen]
    return bool(_script(_TOUCH)(keys=[state_key(version, shard)], args=args, client=patient()))


class BoardsLoad:
    """A version's rebuilt boards, written into temporary keys as they come (write, from any
    thread), then put in place a shard at a time (boards_swap). A board's products may come in
    several pieces; each is written once. `fresh`: the version holds no board but what this load
    writes (its build deleted whatever Redis held of it first), so a swap need not look for others."""

    def __init__(self, version: int, *, fresh: bool = False):
        self.version = version
        self.fresh = fresh
        self.token = uuid.uuid4().hex[:8]
        # shard -> the boards written to it: (window, metric, category)
        self.boards: dict[int, set[tuple[str, str, str]]] = {}
        self._lock = threading.Lock()

    def temporary_key(self, shard: int, window: str, metric: str, category: str) -> str:
        return f"{board_key(self.version, shard, window, metric, category)}{TEMP_MARK}{self.token}"

    @_translated
    def write(self, pieces: Iterable[tuple[int, str, str, str, list[str], list[int]]]) -> None:
        """Add each piece (shard, window, metric, category, product ids, their positive scores) to
        its board's temporary key, all in one pipeline; a board's first piece gives the key a TTL."""
        ttl = rankings_settings.REBUILD_TEMP_KEY_SECONDS
        pipe = patient().pipeline(transaction=False)
        for shard, window, metric, category, members, scores in pieces:
            if not members:
                continue
            key = self.temporary_key(shard, window, metric, category)
            args: list = [None] * (2 * len(members))
            args[0::2] = [-score for score in scores]
            args[1::2] = members
            for start in range(0, len(args), 2 * REBUILD_CHUNK):
                pipe.execute_command("ZADD", key, *args[start : start + 2 * REBUILD_CHUNK])
            with self._lock:
                first = (window, metric, category) not in self.boards.setdefault(shard, set())
                self.boards[shard].add((window, metric, category))
            if first:
                pipe.expire(key, ttl)
        pipe.execute()


@_translated
def boards_swap(load: BoardsLoad, *, shard: int, seq: int, as_of: float, gen: str) -> None:
    """Replace every board of the shard with the boards `load` wrote to it, and its state with
    (seq, as_of, gen), in one step (see _SWAP)."""
    version = load.version
    boards = load.boards.get(shard, set())
    pairs = [
        (load.temporary_key(shard, *board), board_key(version, shard, *board)) for board in sorted(boards)
    ]
    live_keys = {live for _, live in pairs}
    stale = [] if load.fresh else [k for k in shard_board_keys(version, shard) if k not in live_keys]
    stale += [k.replace(":b:", ":t:", 1) for k in stale]
    blob_keys = [k for board in sorted(boards) for k in _board_keys(version, shard, *board)]
    keys = [state_key(version, shard)] + [k for pair in pairs for k in pair] + blob_keys + stale
    args = [seq, repr(as_of), gen, len(pairs), BLOB_SIZE, len(blob_keys) // 3]
    _script(_SWAP)(keys=keys, args=args, client=patient())


def shard_replace(
    *,
    version: int,
    shard: int,
    seq: int,
    as_of: float,
    gen: str,
    boards: dict[tuple[str, str, str], dict[str, int]],
) -> None:
    """Replace every board of a shard with `boards` ((window, metric, category) -> scores)."""
    load = BoardsLoad(version)
    pieces = []
    for (window, metric, category), scores in boards.items():
        positive = {member: score for member, score in scores.items() if score > 0}
        if positive:
            pieces.append((shard, window, metric, category, list(positive), list(positive.values())))
    load.write(pieces)
    boards_swap(load, shard=shard, seq=seq, as_of=as_of, gen=gen)


@_translated
def shard_board_keys(version: int, shard: int) -> list[str]:
    pattern = f"{shard_tag(version, shard)}:b:*"
    keys = [k.decode() for k in patient().scan_iter(match=pattern, count=SCAN_COUNT)]
    return [k for k in keys if TEMP_MARK not in k]


@_translated
def board_read_all(key: str) -> list[tuple[str, int]]:
    """Every member of a board in ranking order, with its (positive) score."""
    return _scored(patient().zrange(key, 0, -1, withscores=True))


def _scored(rows: list[tuple[bytes, float]]) -> list[tuple[str, int]]:
    """A board's members as ZRANGE WITHSCORES gives them, with their (positive) scores."""
    return [(member.decode(), int(-score)) for member, score in rows]


def _head(raw: bytes | None) -> dict | None:
    """A head as the head script gives it: {"total", "rows"}, or None."""
    return json.loads(raw) if raw else None


@_translated
def shard_state(version: int, shard: int) -> dict[str, str]:
    return _decoded(patient().hgetall(state_key(version, shard)))


def _decoded(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


@_translated
def version_delete(version: int) -> int:
    """Delete every key of a version; returns how many."""
    r = patient()
    deleted = 0
    batch = []
    for key in r.scan_iter(match=f"{prefix()}:v{version}:*", count=SCAN_COUNT):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += r.unlink(*batch)
            batch = []
    if batch:
        deleted += r.unlink(*batch)
    return deleted


@_translated
def keyspace_survey() -> tuple[set[int], list[str]]:
    """One SCAN of every version's keys: the versions Redis holds, and the temporary boards without
    a TTL (left by a rebuild that died before temporary boards were given one)."""
    r = patient()
    start = len(prefix()) + 2  # past "P:v"
    versions: set[int] = set()
    temporary: list[str] = []
    for raw in r.scan_iter(match=f"{prefix()}:v*", count=SCAN_COUNT):
        key = raw.decode()
        number = key[start:].split(":", 1)[0]
        if number.isdigit():
            versions.add(int(number))
        if TEMP_MARK in key:
            temporary.append(key)
    pipe = r.pipeline(transaction=False)
    for key in temporary:
        pipe.ttl(key)
    ttls = pipe.execute() if temporary else []
    return versions, [key for key, ttl in zip(temporary, ttls, strict=True) if ttl == -1]


@_translated
def keys_delete(keys: list[str]) -> int:
    return patient().unlink(*keys) if keys else 0


# --- the read path -----------------------------------------------------------------

# The fields of a shard's state a read takes with its boards.
_STATE_READ = ("asof", "seq", "gen")
# The highest batch sequence number this process has read in each shard's state, per generation.
_seq_seen: LRUCache = LRUCache(maxsize=REMEMBERED_PREFIXES * 64)


def _as_of(version: int, shard: int, state: list) -> float | None:
    """A shard's as_of from its state's (asof, seq, gen); None, unknown, when there is none, or when
    the seq is below one this process has read in the same generation: Redis lost the shard's last
    writes (a replica that had not received them took over its node, or it restarted from an older
    snapshot) and its boards lag PostgreSQL until a tick rebuilds them. The seq only grows
    otherwise: a rebuild, a clock reset and every batch write one at least as high."""
    as_of, seq, gen = state
    if not as_of:
        return None
    seq, key = int(seq or 0), (prefix(), version, shard, gen)
    with _cache_lock:
        if seq < _seq_seen.get(key, 0):
            return None
        _seq_seen[key] = seq
    return float(as_of)


# A board's first ranks as its blob's text: the blob, or for a board of at most ARGV[1] members
# (which has none) the same text made from the board; false for a larger board whose blob is
# missing. KEYS: the board, the other metric's board, the blob.
_HEAD = (
    _BLOBS
    + """
local blob = redis.call('GET', KEYS[3])
if blob then return blob end
local total = redis.call('ZCARD', KEYS[1])
if total > tonumber(ARGV[1]) then return false end
return blob_text(KEYS[1], KEYS[2], tonumber(ARGV[1]), total)
"""
)


def _heads(version: int, boards: list[tuple[int, str, str, str]], states: list[int]) -> tuple[list, list]:
    """_HEAD of each board (shard, window, metric, category), and the state of each shard of
    `states`: one round trip on one server; on a Redis Cluster, whose pipelines refuse scripts, the
    states in one and each head in one of its own."""
    r = fast()
    pipe = r.pipeline(transaction=False)
    for shard in states:
        pipe.hmget(state_key(version, shard), _STATE_READ)
    script, calls = _script(_HEAD), [list(_board_keys(version, *board)) for board in boards]
    if clustered():
        return pipe.execute() if states else [], [script(keys=k, args=[BLOB_SIZE], client=r) for k in calls]
    for keys in calls:
        script(keys=keys, args=[BLOB_SIZE], client=pipe)
    values = pipe.execute()
    return values[: len(states)], values[len(states) :]


@dataclass
class BoardSlice:
    as_of: float | None
    total: int
    rows: list[tuple[str, int, int]]  # (product_id, this metric's score, other metric's score)


@_translated
def board_slice(
    *, version: int, shard: int, window: str, metric: str, category: str, start: int, stop: int
) -> BoardSlice:
    """Members ranked start..stop (0-based, inclusive), with both metrics.

    Within the blob's ranks this is one round trip (the blob, or a small board's head made from
    it: _HEAD); deeper, two (ZRANGE, then ZMSCORE for the other metric).
    """
    r = fast()
    if stop < BLOB_SIZE:
        (state,), (blob,) = _heads(version, [(shard, window, metric, category)], [shard])
        if blob:
            data = json.loads(blob)
            return BoardSlice(
                as_of=_as_of(version, shard, state),
                total=data["total"],
                rows=[(m, int(s), int(o)) for m, s, o in data["rows"][start : stop + 1]],
            )
    key = board_key(version, shard, window, metric, category)
    pipe = r.pipeline(transaction=False)
    pipe.zrange(key, start, stop, withscores=True)
    pipe.zcard(key)
    pipe.hmget(state_key(version, shard), _STATE_READ)
    rows, total, state = pipe.execute()
    members = [m for m, _ in rows]
    others = (
        r.zmscore(board_key(version, shard, window, other_metric(metric), category), members)
        if members
        else []
    )
    return BoardSlice(
        as_of=_as_of(version, shard, state),
        total=total,
        rows=[
            (m.decode(), int(-s), int(-o) if o is not None else 0)
            for (m, s), o in zip(rows, others, strict=True)
        ],
    )


@dataclass
class MemberRank:
    as_of: float | None
    total: int
    rank: int | None  # 0-based
    score: int
    other: int

    @classmethod
    def from_reply(cls, version: int, shard: int, reply: list) -> "MemberRank":
        rank, score, other, total, state = reply
        return cls(
            as_of=_as_of(version, shard, state),
            total=total,
            rank=rank,
            score=int(-float(score)) if score is not None else 0,
            other=int(-float(other)) if other is not None else 0,
        )


# KEYS: the board, the other metric's board, the shard's state. ARGV: the product, then the
# state's fields to read (_STATE_READ).
# One command instead of five: what a rank costs is mostly the client's work per command.
_MEMBER_RANK = """
local rank = redis.call('ZRANK', KEYS[1], ARGV[1])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local other = redis.call('ZSCORE', KEYS[2], ARGV[1])
return {rank, score, other, redis.call('ZCARD', KEYS[1]), redis.call('HMGET', KEYS[3], unpack(ARGV, 2))}
"""


def _member_keys(version: int, shard: int, window: str, metric: str, category: str) -> list[str]:
    return [
        board_key(version, shard, window, metric, category),
        board_key(version, shard, window, other_metric(metric), category),
        state_key(version, shard),
    ]


@_translated
def member_rank(
    *, version: int, shard: int, window: str, metric: str, category: str, product_id: str
) -> MemberRank:
    """One product's rank and scores on a board, in one round trip."""
    keys = _member_keys(version, shard, window, metric, category)
    reply = _script(_MEMBER_RANK)(keys=keys, args=[product_id, *_STATE_READ], client=fast())
    return MemberRank.from_reply(version, shard, reply)


class BoardCopy:
    """A whole board as of one instant, as Redis sent it: a member's rank is its place in the
    board's ZRANGE; scores are parsed only for the members asked about."""

    def __init__(self, as_of: float | None, stamp: tuple, board: list[bytes], other: list[bytes]):
        self.as_of = as_of
        self.stamp = stamp  # the shard's (asof, seq, gen) as read with the board (shard_stamp)
        self.total = len(board) // 2
        self._scores = board
        self._places = dict(zip(board[::2], range(0, len(board), 2), strict=True))
        self._others = dict(zip(other[::2], other[1::2], strict=True))

    def before(self, score: int, product_id: str) -> int:
        """What ordered_before would have answered at the copy's instant: the members with a higher
        score, or the same score and a smaller id (found by halves: O(log n) scores parsed)."""
        key = (float(-score), product_id.encode())
        low, high = 0, self.total
        while low < high:
            mid = (low + high) // 2
            if (float(self._scores[2 * mid + 1]), self._scores[2 * mid]) < key:
                low = mid + 1
            else:
                high = mid
        return low

    def member(self, product_id: str) -> MemberRank:
        """What member_rank would have answered at the copy's instant."""
        key = product_id.encode()
        place = self._places.get(key)
        if place is None:
            return MemberRank(as_of=self.as_of, total=self.total, rank=None, score=0, other=0)
        other = self._others.get(key)
        return MemberRank(
            as_of=self.as_of,
            total=self.total,
            rank=place // 2,
            score=int(-float(self._scores[place + 1])),
            other=int(-float(other)) if other is not None else 0,
        )


# KEYS: the board, the other metric's board, the shard's state. ARGV: the most members to copy,
# then the state's fields (_STATE_READ). One script, so the boards and the state are of one batch.
_BOARD_COPY = """
if redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[1]) then return false end
return {redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES'), redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES'),
        redis.call('HMGET', KEYS[3], unpack(ARGV, 2))}
"""


@_translated
def board_copy(
    *, version: int, shard: int, window: str, metric: str, category: str, most: int
) -> BoardCopy | None:
    """A board of at most `most` members, whole, in one round trip; None for a larger one."""
    keys = _member_keys(version, shard, window, metric, category)
    reply = _script(_BOARD_COPY)(keys=keys, args=[most, *_STATE_READ], client=fast())
    if reply is None:
        return None
    board, other, state = reply
    return BoardCopy(_as_of(version, shard, state), tuple(state), board, other)


@_translated
def shard_stamp(*, version: int, shard: int) -> tuple:
    """A shard's state fields (asof, seq, gen) as stored. Every write to the shard's boards writes them (a batch its
    seq, a tick its asof, a rebuild all three), so equal fields mean boards unchanged in between."""
    return tuple(fast().hmget(state_key(version, shard), _STATE_READ))


# --- what it takes to climb ---------------------------------------------------------

# Lua compares strings by the server's locale; ids are ordered by their bytes, so compared here.
_BYTES_BEFORE = """
local function bytes_before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
"""

# KEYS: a board. ARGV: a score as stored (negated), a member. The members ordered before
# (score, member): a higher score, or the same score and a smaller member. ZCOUNT on the score alone would miss the second
# kind; a tie group (its members sorted by bytes) is searched by halves, O(log² n).
_ORDERED_BEFORE = (
    _BYTES_BEFORE
    + """
local higher = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
local ties = redis.call('ZCOUNT', KEYS[1], ARGV[1], ARGV[1])
local low, high = 0, ties  -- members of the tie group before ARGV[2] number `low` once low == high
while low < high do
  local mid = math.floor((low + high) / 2)
  local member = redis.call('ZRANGE', KEYS[1], higher + mid, higher + mid)[1]
  if bytes_before(member, ARGV[2]) then low = mid + 1 else high = mid end
end
return higher + low
"""
)


@_translated
def ordered_before(
    *, version: int, shard: int, window: str, metric: str, category: str, score: int, product_id: str
) -> int:
    """How many members of a board are ordered before a product with `score` (it excluded when its
    own score is lower): its rank, were its score `score`, is one more."""
    key = board_key(version, shard, window, metric, category)
    return _script(_ORDERED_BEFORE)(keys=[key], args=[-score, product_id], client=fast())


# KEYS: a board, its shard's state. ARGV: how many ranks, the ranks (1-based), how many edges,
# the edges (ascending scores, as stored: negated), then the state's fields. Returns the board's size, each rank's
# member and score (while the board is that deep), the members scoring from each edge up to the
# next (the last: and above), and the state.
_THRESHOLDS = """
local total = redis.call('ZCARD', KEYS[1])
local ranks, at = {}, 2
for i = 1, tonumber(ARGV[1]) do
  local rank = tonumber(ARGV[at])
  at = at + 1
  if rank <= total then
    local row = redis.call('ZRANGE', KEYS[1], rank - 1, rank - 1, 'WITHSCORES')
    ranks[#ranks + 1] = {rank, row[1], row[2]}
  end
end
local edges = tonumber(ARGV[at])
local counts = {}
for i = 1, edges do
  local above = i < edges and '(' .. ARGV[at + i + 1] or '-inf'
  counts[i] = redis.call('ZCOUNT', KEYS[1], above, ARGV[at + i])
end
return {total, ranks, counts, redis.call('HMGET', KEYS[2], unpack(ARGV, at + edges + 1))}
"""


@dataclass
class Thresholds:
    as_of: float | None
    total: int
    ranks: list[tuple[int, str, int]]  # (rank, the member there, its score), while the board is that deep
    counts: list[int]  # members scoring from each edge up to the next (the last edge: and above)


@_translated
def board_thresholds(
    *, version: int, shard: int, window: str, metric: str, category: str, ranks: list[int], edges: list[int]
) -> Thresholds:
    """The members and scores at `ranks` and the board's histogram over `edges`, in one round trip."""
    keys = [board_key(version, shard, window, metric, category), state_key(version, shard)]
    args = [len(ranks), *ranks, len(edges), *(-edge for edge in edges), *_STATE_READ]
    total, rows, counts, state = _script(_THRESHOLDS)(keys=keys, args=args, client=fast())
    return Thresholds(
        as_of=_as_of(version, shard, state),
        total=total,
        ranks=[(int(rank), member.decode(), int(-float(score))) for rank, member, score in rows],
        counts=[int(count) for count in counts],
    )


@_translated
def members_ranks(
    *, version: int, window: str, metric: str, product_id: str, boards: list[tuple[int, str]]
) -> list[MemberRank]:
    """One product's rank on several boards ((shard, category) pairs), in one round trip.

    Plain commands rather than the member-rank script: a cluster's pipeline refuses EVALSHA."""
    pipe = fast().pipeline(transaction=False)
    for shard, category in boards:
        key, other_key, state_key_ = _member_keys(version, shard, window, metric, category)
        pipe.zrank(key, product_id)
        pipe.zscore(key, product_id)
        pipe.zscore(other_key, product_id)
        pipe.zcard(key)
        pipe.hmget(state_key_, _STATE_READ)
    values = pipe.execute()
    return [
        MemberRank.from_reply(version, shard, values[5 * i : 5 * i + 5])
        for i, (shard, _) in enumerate(boards)
    ]


@_translated
def members_scores(
    *, version: int, lookups: list[tuple[int, str, str, str, list[str]]]
) -> list[dict[str, int]]:
    """For each (shard, window, metric, category, product ids): those products' scores on that board
    (0 when not on it), in one round trip. An engagement board's answers show units and revenue too."""
    pipe = fast().pipeline(transaction=False)
    asked = [(lookup, lookup[4]) for lookup in lookups if lookup[4]]
    for (shard, window, metric, category, _), members in asked:
        pipe.zmscore(board_key(version, shard, window, metric, category), members)
    replies = iter(pipe.execute() if asked else [])
    found = []
    for *_, members in lookups:
        if not members:
            found.append({})
            continue
        reply = next(replies)
        found.append({m: int(-float(s)) if s is not None else 0 for m, s in zip(members, reply, strict=True)})
    return found


@_translated
def shard_as_of(*, version: int, shard: int) -> float | None:
    """The instant a shard's boards were last brought up to date (None: Redis holds no state for it)."""
    return _as_of(version, shard, fast().hmget(state_key(version, shard), _STATE_READ))


@_translated
def board_heads(*, version: int, boards: list[tuple[int, str, str, str, int]]) -> list[BoardSlice | None]:
    """The first n ranks of several boards ((shard, window, metric, category, n) each).

    One round trip for them all: each board's head (its blob, or for a small board the same made
    from the board: _HEAD), each shard's as_of. None for a board the head cannot answer (a large
    board's blob missing, or n deeper than the blob): a caller reads that one with board_slice.
    """
    shards = sorted({shard for shard, *_ in boards})
    states, heads = _heads(version, [board[:4] for board in boards], shards)
    as_of_by_shard = {shard: _as_of(version, shard, s) for shard, s in zip(shards, states, strict=True)}
    out: list[BoardSlice | None] = []
    for blob, (shard, _, _, _, n) in zip(heads, boards, strict=True):
        if not blob:
            out.append(None)  # a large board whose blob is missing
            continue
        data = json.loads(blob)
        if n > BLOB_SIZE and data["total"] > BLOB_SIZE:
            out.append(None)  # deeper than the blob
            continue
        out.append(
            BoardSlice(
                as_of=as_of_by_shard[shard],
                total=data["total"],
                rows=[(m, int(s), int(o)) for m, s, o in data["rows"][:n]],
            )
        )
    return out


# Keys the status figures survey at most (SCAN steps of SCAN_COUNT): a status read costs the same
# at a million categories (tens of millions of keys) as at ten. Past it, the figures are
# extrapolated from the share of the keyspace seen, which SCAN's hash order spreads evenly.
SURVEY_KEYS = 5_000  # keys


@dataclass
class BoardsSurvey:
    """The board keys of a version among the keys surveyed, and how many keys there are in Redis
    per key surveyed (1.0: every key was seen, and the figures are exact)."""

    keys: list[str]
    scale: float

    @property
    def estimated(self) -> bool:
        return self.scale != 1.0


def _boards_survey(r: Client, version: int) -> BoardsSurvey:
    """The version's board keys among the first SURVEY_KEYS keys SCAN visits (other prefixes'
    included: they are the share of the keyspace seen)."""
    head, keys = f"{prefix()}:v{version}:", []
    for seen, raw in enumerate(r.scan_iter(count=min(SCAN_COUNT, SURVEY_KEYS)), start=1):
        key = raw.decode()
        if key.startswith(head) and ":b:" in key and TEMP_MARK not in key:
            keys.append(key)
        if seen >= SURVEY_KEYS:
            # A cluster client asks one node unless told otherwise; SCAN visited every primary.
            every = {"target_nodes": RedisCluster.PRIMARIES} if isinstance(r, RedisCluster) else {}
            return BoardsSurvey(keys, max(1.0, r.dbsize(**every) / seen))
    return BoardsSurvey(keys, 1.0)


@_translated
def boards_summary(version: int) -> dict[str, dict[str, int | bool]]:
    """Per window: how many boards and members the version holds, and whether that is estimated
    from a survey of part of the keyspace (one bounded SCAN, one pipeline)."""
    r = fast()
    survey = _boards_survey(r, version)
    pipe = r.pipeline(transaction=False)
    for key in survey.keys:
        pipe.zcard(key)
    found: dict[str, list[int]] = {}
    for key, members in zip(survey.keys, pipe.execute() if survey.keys else [], strict=True):
        window, _, category = key.split(":b:", 1)[1].split(":", 2)
        entry = found.setdefault(window, [0, 0])
        # A split board counts once, with its first part.
        entry[0] += 1 if not is_part(category) or category.endswith(f"{PART_MARK}0") else 0
        entry[1] += members
    return {
        window: {
            "boards": round(boards * survey.scale),
            "members": round(members * survey.scale),
            "estimated": survey.estimated,
        }
        for window, (boards, members) in found.items()
    }


@_translated
def head_read(version: int, shard: int, window: str, metric: str, category: str) -> dict | None:
    """A board's head as readers get it ({"total", "rows"}): its blob, or a small board's made
    from it; None for a large board whose blob is missing."""
    keys = list(_board_keys(version, shard, window, metric, category))
    return _head(_script(_HEAD)(keys=keys, args=[BLOB_SIZE], client=patient()))


@_translated
def boards_spot_read(
    version: int, shard: int, boards: list[tuple[str, str, str]], spot: int
) -> list[tuple[int, list[tuple[str, int]], dict | None]]:
    """Each board (window, metric, category) of one shard: (its size, `spot` of its members drawn
    at random with their scores (every member of a board of at most `spot`), its head as head_read
    gives it). One round trip on one server; on a Redis Cluster, whose pipelines refuse scripts,
    the boards in one and each head in one of its own."""
    r = patient()
    pipe = r.pipeline(transaction=False)
    for board in boards:
        pipe.zcard(board_key(version, shard, *board))
        pipe.zrandmember(board_key(version, shard, *board), spot, withscores=True)
    script, calls = _script(_HEAD), [list(_board_keys(version, shard, *board)) for board in boards]
    if clustered():
        values = pipe.execute() if boards else []
        heads = [script(keys=keys, args=[BLOB_SIZE], client=r) for keys in calls]
    else:
        for keys in calls:
            script(keys=keys, args=[BLOB_SIZE], client=pipe)
        values = pipe.execute() if boards else []
        values, heads = values[: 2 * len(boards)], values[2 * len(boards) :]
    return [
        (size, _scored(_pairs(drawn)), _head(head))
        for size, drawn, head in zip(values[::2], values[1::2], heads, strict=True)
    ]


def _pairs(drawn: list | None) -> list[tuple[bytes, float]]:
    """ZRANDMEMBER … WITHSCORES as (member, score) pairs: flat under RESP2, pairs under RESP3."""
    if not drawn:
        return []
    if isinstance(drawn[0], list | tuple):
        return [(member, float(score)) for member, score in drawn]
    return [(drawn[i], float(drawn[i + 1])) for i in range(0, len(drawn), 2)]


@_translated
def boards_heads(
    version: int, shard: int, n: int, boards: list[tuple[str, str, str]] | None = None
) -> dict[tuple[str, str, str], tuple[int, list[tuple[str, int]]]]:
    """Boards of a shard, every one or those of `boards` (window, metric, category): each one's
    (size, first n members with scores); an empty board is left out."""
    if boards is None:
        boards = [tuple(key.split(":b:", 1)[1].split(":", 2)) for key in shard_board_keys(version, shard)]
    pipe = patient().pipeline(transaction=False)
    for board in boards:
        key = board_key(version, shard, *board)
        pipe.zcard(key)
        pipe.zrange(key, 0, n - 1, withscores=True)
    values = pipe.execute() if boards else []
    return {
        board: (total, [(m.decode(), int(-s)) for m, s in rows])
        for board, total, rows in zip(boards, values[::2], values[1::2], strict=True)
        if total
    }


@_translated
def memory_by_window(version: int, samples: int = 20) -> dict[str, dict[str, float | bool]]:
    """Per window: board keys and their memory, measured with MEMORY USAGE … SAMPLES 0 on up to
    `samples` keys of a bounded survey (_boards_survey) and extrapolated to the rest (exact when
    the survey saw every key and there are no more board keys than `samples`)."""
    r = patient()
    survey = _boards_survey(r, version)
    keys: dict[str, list[str]] = {}
    for key in survey.keys:
        keys.setdefault(key.split(":b:", 1)[1].split(":", 1)[0], []).append(key)
    out = {}
    for window, window_keys in keys.items():
        sample = window_keys[:samples]
        used = [r.memory_usage(k, samples=0) or 0 for k in sample]
        count = len(window_keys) * survey.scale
        out[window] = {
            "keys": round(count),
            "bytes": sum(used) / len(sample) * count,
            "estimated": survey.estimated,
        }
    return out


# --- split boards: the reads a merge of parts needs (rankings.serving.merge) -------------------

# KEYS: a board, its shard's state. ARGV: a score as stored (negated), a member, then the state's
# fields. The members ordered before (score, member) (see _ORDERED_BEFORE), the board's size and
# the state: what one part adds to a product's rank on a split board.
_PART_BEFORE = (
    _BYTES_BEFORE
    + """
local higher = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
local ties = redis.call('ZCOUNT', KEYS[1], ARGV[1], ARGV[1])
local low, high = 0, ties
while low < high do
  local mid = math.floor((low + high) / 2)
  local member = redis.call('ZRANGE', KEYS[1], higher + mid, higher + mid)[1]
  if bytes_before(member, ARGV[2]) then low = mid + 1 else high = mid end
end
return {higher + low, redis.call('ZCARD', KEYS[1]), redis.call('HMGET', KEYS[2], unpack(ARGV, 3))}
"""
)


@dataclass
class PartBefore:
    as_of: float | None
    total: int
    before: int  # members ordered before the product asked about


@_translated
def parts_before(
    *, version: int, window: str, metric: str, parts: list[tuple[int, str]], score: int, product_id: str
) -> list[PartBefore]:
    """On each board (shard, category), the members ordered before `product_id` were its score
    `score`, with the board's size and its shard's as_of. One round trip on one server; on a Redis
    Cluster, whose pipelines refuse scripts, one per board."""
    args = [-score, product_id, *_STATE_READ]
    replies = _on_boards(_PART_BEFORE, version=version, window=window, metric=metric, parts=parts, args=args)
    return [
        PartBefore(as_of=_as_of(version, shard, state), total=int(total), before=int(before))
        for (before, total, state), (shard, _) in zip(replies, parts, strict=True)
    ]


def _on_boards(
    source: str, *, version: int, window: str, metric: str, parts: list[tuple[int, str]], args: list
):
    """The replies of the script `source` run on each board (shard, category) with its shard's state
    key and `args`: one round trip on one server; on a Redis Cluster, whose pipelines refuse
    scripts, one per board."""
    script = _script(source)
    calls = [[board_key(version, shard, window, metric, category), state_key(version, shard)]
             for shard, category in parts]  # fmt: skip
    if clustered():
        return [script(keys=keys, args=args, client=fast()) for keys in calls]
    pipe = fast().pipeline(transaction=False)
    for keys in calls:
        script(keys=keys, args=args, client=pipe)
    return pipe.execute()


@_translated
def parts_ranges(
    *, version: int, window: str, metric: str, ranges: list[tuple[int, str, int, int]], others: bool
) -> list[BoardSlice]:
    """Ranks start..stop (0-based, inclusive) of several boards ((shard, category, start, stop)
    each), with each board's size and its shard's as_of: one round trip; with `others`, the other
    metric's scores of those members in a second one (else 0, for the caller to ask later)."""
    pipe = fast().pipeline(transaction=False)
    for shard, category, start, stop in ranges:
        key = board_key(version, shard, window, metric, category)
        if stop >= start:
            pipe.zrange(key, start, stop, withscores=True)
        else:
            pipe.zcard(key)  # a place holder: nothing to read from this board
        pipe.zcard(key)
        pipe.hmget(state_key(version, shard), _STATE_READ)
    values = pipe.execute()
    out = []
    for i, (shard, _, start, stop) in enumerate(ranges):
        rows, total, state = values[3 * i : 3 * i + 3]
        rows = rows if stop >= start else []
        out.append(
            BoardSlice(
                as_of=_as_of(version, shard, state),
                total=total,
                rows=[(m.decode(), int(-s), 0) for m, s in rows],
            )
        )
    if others:
        wanted = [
            (shard, category, [m for m, _, _ in found.rows])
            for (shard, category, _, _), found in zip(ranges, out, strict=True)
        ]
        scores = others_scores(version=version, window=window, metric=metric, members=wanted)
        for found, other in zip(out, scores, strict=True):
            found.rows = [(m, s, o) for (m, s, _), o in zip(found.rows, other, strict=True)]
    return out


@_translated
def others_scores(
    *, version: int, window: str, metric: str, members: list[tuple[int, str, list[str]]]
) -> list[list[int]]:
    """The other metric's scores of members of several boards ((shard, category, members) each),
    0 where a member has none: one round trip."""
    asked = [(shard, category, ids) for shard, category, ids in members if ids]
    values = []
    if asked:
        pipe = fast().pipeline(transaction=False)
        for shard, category, ids in asked:
            pipe.zmscore(board_key(version, shard, window, other_metric(metric), category), ids)
        values = pipe.execute()
    found = iter(values)
    return [[int(-o) if o is not None else 0 for o in next(found)] if ids else [] for _, _, ids in members]


@_translated
def parts_histogram(
    *, version: int, window: str, metric: str, parts: list[tuple[int, str]], edges: list[int]
) -> list[Thresholds]:
    """Each board's size, histogram over `edges` and shard's as_of (board_thresholds without ranks):
    one round trip on one server, one per board on a Redis Cluster."""
    args = [0, len(edges), *(-edge for edge in edges), *_STATE_READ]
    replies = _on_boards(_THRESHOLDS, version=version, window=window, metric=metric, parts=parts, args=args)
    return [
        Thresholds(
            as_of=_as_of(version, shard, state), total=int(total), ranks=[], counts=[int(c) for c in counts]
        )
        for (total, _, counts, state), (shard, _) in zip(replies, parts, strict=True)
    ]

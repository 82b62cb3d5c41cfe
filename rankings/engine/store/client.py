"""Connections to Redis, the store's errors, and its Lua scripts: what every other module of the
store builds on. Only the store imports redis; callers see StoreError and its kinds."""

import functools
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.retry import Retry

# Reads for the public must fail fast when Redis is slow or down, so that pages
# can serve the last known answer instead of hanging a worker.
FAST_TIMEOUT = 0.5  # seconds
# The write path and the operators' tools may wait longer: a large batch is one
# Lua call, and a SCAN of every board takes a while.
PATIENT_TIMEOUT = 30  # seconds
# Entries each of the store's memories keeps (one per key prefix, Redis server or version): a
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
UNREACHABLE = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.SlotNotCoveredError,
)
# What the client raises: RedisCluster raises errors of its own outside RedisError, among them
# "cannot be connected" (caused by a connection error) and a command it cannot route (a bug).
ERRORS = (redis.RedisError, redis.exceptions.RedisClusterException)
# What Redis answers when it refuses a command (CONFIG renamed, a script's error_reply).
ResponseError = redis.ResponseError


def store_error(error: Exception) -> StoreError:
    if isinstance(error, UNREACHABLE) or isinstance(error.__cause__, UNREACHABLE):
        return Unreachable(str(error))
    return Refused(str(error))


def translated(func):
    """Redis's exceptions become the store's own (see StoreError)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ERRORS as error:
            raise store_error(error) from error

    return wrapper


# --- what the store remembers of Redis ----------------------------------------------------

# Guards the memories: a server process reads from several threads.
memory_lock = threading.Lock()
_memories: list[Callable[[], None]] = []


def remembered(memory):
    """Register a memory of what Redis holds (anything with clear()): reset_clients empties it."""
    _memories.append(memory.clear)
    return memory


def remember(memory: dict, key, value) -> None:
    """memory[key] = value, in a dict that a reader may read without the lock and that is emptied when full."""
    with memory_lock:
        if len(memory) >= REMEMBERED_PREFIXES:
            memory.clear()
        memory[key] = value


# --- clients ----------------------------------------------------------------------

Client = redis.Redis | RedisCluster

_clients: dict[str, Client] = remembered({})
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
    options: dict[str, float | Retry] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "health_check_interval": 30,
    }
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
    with memory_lock:
        for forget in _memories:
            forget()


# --- scripts ----------------------------------------------------------------------

LUA = Path(__file__).with_name("lua")
# A line of a script that stands for a shared piece of lua/ (a file of local functions).
_INCLUDE = re.compile(r"^--! include (\w+)$", re.MULTILINE)


@functools.cache
def lua_source(name: str) -> str:
    """The text of lua/<name>.lua, each `--! include piece` line replaced by lua/<piece>.lua."""
    return _INCLUDE.sub(lambda line: lua_source(line[1]), (LUA / f"{name}.lua").read_text())


_scripts: dict[str, Script] = remembered({})


def script(name: str) -> Script:
    """The script lua/<name>.lua, loaded into Redis once and then called by its SHA (reloaded if
    Redis forgot it)."""
    found = _scripts.get(name)
    if found is None:
        found = _scripts[name] = patient().register_script(lua_source(name))
    return found


def scripts_run(
    calls: list[tuple[str, list, list]], *, commands: Sequence[tuple] = (), client: Client | None = None
) -> list:
    """The replies of plain `commands` (each a command's words) and then of script calls ((script
    name, keys, args) each), all in one round trip on the fast client: a pipeline of EVALSHA on one
    server, each node's calls at once on a Redis Cluster (_on_nodes). EVALSHA goes as a plain
    command: redis-py's own script call in a pipeline first asks the server, in a round trip of its
    own, whether it knows the scripts (SCRIPT EXISTS), on every call; and the cluster pipeline
    refuses its `evalsha` method. A server or node that does not know a script yet (a restart, a
    new node) is sent it and the calls again: one more round trip, once. An error reply raises, as
    a call of its own would. `client`: the patient one, for an operator's or a task's calls."""
    r = client or fast()
    replies: list = []
    for attempt in range(2):
        words = [
            *commands,
            *(("EVALSHA", script(name).sha, len(keys), *keys, *args) for name, keys, args in calls),
        ]
        found = _on_nodes(r, words) if isinstance(r, RedisCluster) else None
        replies = found if found is not None else _pipelined(r, words)
        unknown = {name for (name, _, _), reply in zip(calls, replies[len(commands) :], strict=True)
                   if isinstance(reply, redis.exceptions.NoScriptError)}  # fmt: skip
        if not unknown or attempt:
            break
        for name in unknown:  # on a cluster, SCRIPT LOAD goes to every primary
            r.script_load(script(name).script)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _pipelined(r: Client, words: list[tuple]) -> list:
    """The replies of commands sent through the client's pipeline, errors as values (one command
    alone sent as it is: a pipeline costs more than its round trip)."""
    if len(words) == 1:
        try:
            return [r.execute_command(*words[0])]
        except redis.ResponseError as refused:
            return [refused]
    pipe = r.pipeline(transaction=False)
    for command in words:
        pipe.execute_command(*command)
    return pipe.execute(raise_on_error=False)


# A reply that says the cluster's layout is not what the client knows: its own pipeline follows it.
_RELAID = (redis.exceptions.AskError, redis.exceptions.TryAgainError, redis.exceptions.ClusterError)


# Commands whose first word after the name is their one key.
_ONE_KEY = frozenset({"HMGET", "HGET", "HGETALL", "GET", "ZSCORE", "ZMSCORE", "ZRANK", "ZCARD"})


def _slot(r: RedisCluster, command: tuple) -> int | None:
    """The slot of a command: its first key's, read where it stands (a script's keys share their
    shard's hash tag), without redis-py's parse of the command, which cost a split board's
    neighbours, a dozen HMGETs of names, more than their round trip; other commands its way."""
    if command[0] == "EVALSHA" and int(command[2]):
        return r.keyslot(command[3])
    if command[0] in _ONE_KEY:
        return r.keyslot(command[1])
    return r.determine_slot(*command)


def _on_nodes(r: RedisCluster, words: list[tuple]) -> list | None:
    """The replies of commands on a Redis Cluster, errors as values, in one round trip: each node's
    commands written at once on a connection of its own, then every reply read. This is what the
    cluster's pipeline does, without its bookkeeping, which costs four times the round trip (a read
    of a split board's parts: 75 µs of this process's time against 320). None when the cluster is
    not laid out as the client knows (a node refused or did not answer in time, a slot moved, a
    failover under way): the caller then sends the commands through the cluster's pipeline, which
    learns the new layout and follows it (a node whose host died, promoted away, times out)."""
    nodes: dict[str, tuple[redis.Redis, list[int]]] = {}
    sent: list[tuple[redis.Redis, redis.Connection, list[int]]] = []
    replies: list = [None] * len(words)
    try:
        for i, command in enumerate(words):
            slot = _slot(r, command)
            if slot is None:  # a command of no key: the pipeline chooses its node
                return None
            node = r.nodes_manager.get_node_from_slot(slot)
            # A node the client has just heard of (a MOVED's) has no client until this makes it.
            nodes.setdefault(node.name, (r.get_redis_connection(node), []))[1].append(i)
        for client, indexes in nodes.values():
            connection = client.connection_pool.get_connection()
            sent.append((client, connection, indexes))
            connection.send_packed_command(connection.pack_commands([words[i] for i in indexes]))
        for _, connection, indexes in sent:
            for i in indexes:
                try:
                    replies[i] = connection.read_response()
                except redis.ResponseError as refused:  # read whole: the connection stays in step
                    replies[i] = refused
    except BaseException as error:
        for _, connection, _ in sent:
            connection.disconnect()  # a reply may be left unread on any of them
        if isinstance(
            error, (redis.ConnectionError, redis.TimeoutError, redis.exceptions.RedisClusterException)
        ):
            return None
        raise
    finally:
        for client, connection, _ in sent:
            client.connection_pool.release(connection)
    if any(isinstance(reply, _RELAID) for reply in replies):
        return None
    return replies


def score_pairs(reply: list | None) -> list[tuple[bytes, float]]:
    """A raw `… WITHSCORES` reply (ZRANGE, ZRANDMEMBER; sent with execute_command, so that redis-py
    reads none of it) as (member, score) pairs: flat under RESP2, pairs under RESP3."""
    if not reply:
        return []
    if isinstance(reply[0], list | tuple):
        return [(member, float(score)) for member, score in reply]
    return [(reply[i], float(reply[i + 1])) for i in range(0, len(reply), 2)]

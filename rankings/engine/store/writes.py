"""The write path's calls: a shard's batches applied exactly once, its clock moved, its boards
replaced whole by a rebuild. Each is one Lua call on the shard's keys (one Redis Cluster slot)."""

import threading
import uuid
from collections.abc import Iterable
from typing import NamedTuple, cast

import msgspec

from rankings.conf import metric_pair, rankings_settings
from rankings.engine.store.client import patient, script, translated
from rankings.engine.store.keys import (
    BLOB_SIZE,
    TEMP_MARK,
    board_key,
    board_keys,
    gen_key,
    pair_keys,
    shard_tag,
    state_key,
)
from rankings.engine.store.versions import SCAN_COUNT, generation_of

# Members written per ZADD when a board is rebuilt: large enough to keep round
# trips few, small enough not to block Redis for long.
REBUILD_CHUNK = 5000


class Change(NamedTuple):
    """A net change of one product's score on one board (a tuple: a tick makes hundreds of thousands)."""

    window: str
    metric: str
    category: str
    product_id: str
    delta: int


@translated
def shard_open(version: int, shard: int) -> tuple[str, dict[str, str]]:
    """The version's generation token (as `generation`) and what Redis holds of the shard's state
    (as `shard_state`), in one round trip: how every shard tick begins."""
    token = uuid.uuid4().hex
    pipe = patient().pipeline(transaction=False)
    pipe.set(gen_key(version), token, nx=True, get=True)
    pipe.hgetall(state_key(version, shard))
    held, raw = pipe.execute()
    return generation_of(held, token), _decoded(raw)


@translated
def shard_state(version: int, shard: int) -> dict[str, str]:
    return _decoded(cast(dict[bytes, bytes], patient().hgetall(state_key(version, shard))))


def _decoded(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


@translated
def batch_apply(
    *, version: int, shard: int, seq: int, as_of: float, gen: str, changes: Iterable[Change]
) -> int:
    """Apply a batch's changes atomically with its sequence number and blobs; see lua/apply.lua."""
    keys, argv = _changes_args(version, shard, changes)
    args: list[str | int | bytes] = [seq, repr(as_of), gen, BLOB_SIZE, msgspec.msgpack.encode(argv)]
    return int(script("apply")(keys=keys, args=args, client=patient()))


def _changes_args(version: int, shard: int, changes: Iterable[Change]) -> tuple[list[str], list]:
    """KEYS (state, then each board's triples) and the change triples (board index, member, increment)
    that apply and apply_routed take as one MessagePack string: a tick over a million categories
    changes 80,000 scores, and the client packed each of their 240,000 words as a word of its own."""
    tag = shard_tag(version, shard)
    keys = [state_key(version, shard)]
    # (window, category, metric) -> the KEYS index of its board's triple
    index: dict[tuple[str, str, str], int] = {}
    argv: list = []
    # Changes are read by position: a batch read back from PostgreSQL holds plain lists.
    for window, metric, category, product_id, delta in changes:
        at = index.get((window, category, metric))
        if at is None:
            # Both metrics' blobs of a pair show both scores: a change to one rewrites both. A batch
            # of views alone rewrites no sales board's blob, and the other way round.
            pair = metric_pair(metric)
            first = len(keys) + 1
            keys.extend(pair_keys(tag, window, category, pair))
            index[(window, category, pair[0])] = first
            index[(window, category, pair[1])] = first + 3
            at = index[(window, category, metric)]
        argv.extend((at, product_id, -delta))
    return keys, argv


@translated
def batch_apply_routed(
    *, version: int, shard: int, source: int, seq: int, as_of: float, gen: str, changes: Iterable[Change]
) -> int:
    """Apply the changes of batch `seq` of the active layout's shard `source` that fall in this shard
    of a version laid out otherwise, exactly once; see lua/apply_routed.lua for the outcome."""
    keys, argv = _changes_args(version, shard, changes)
    args: list[str | int | bytes] = [
        f"from:{source}",
        seq,
        repr(as_of),
        gen,
        BLOB_SIZE,
        msgspec.msgpack.encode(argv),
    ]
    return int(script("apply_routed")(keys=keys, args=args, client=patient()))


@translated
def shard_sources_set(*, version: int, shard: int, gen: str, sources: dict[int, int], replace: bool) -> bool:
    """Record that the shard holds the batches of the active layout's shards up to `sources`
    (shard -> seq); `replace` forgets every other; else a position only grows. False: generation differs."""
    args: list[str | int] = [gen, "replace" if replace else "grow"]
    for source, seq in sources.items():
        args.extend((f"from:{source}", seq))
    return bool(script("sources_set")(keys=[state_key(version, shard)], args=args, client=patient()))


def shard_sources(state: dict[str, str]) -> dict[int, int]:
    """The from:K positions of a shard's state (as shard_state returns it)."""
    return {int(k[5:]): int(v) for k, v in state.items() if k.startswith("from:")}


@translated
def shard_touch(*, version: int, shard: int, seq: int, as_of: float, gen: str) -> bool:
    """Advance a shard's as_of; False when Redis does not hold the shard at `seq` (rebuild it)."""
    args = [str(seq), repr(as_of), gen]
    return bool(script("touch")(keys=[state_key(version, shard)], args=args, client=patient()))


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

    @translated
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


@translated
def boards_swap(load: BoardsLoad, *, shard: int, seq: int, as_of: float, gen: str) -> None:
    """Replace every board of the shard with the boards `load` wrote to it, and its state with
    (seq, as_of, gen), in one step (see lua/swap.lua)."""
    version = load.version
    boards = load.boards.get(shard, set())
    pairs = [
        (load.temporary_key(shard, *board), board_key(version, shard, *board)) for board in sorted(boards)
    ]
    live_keys = {live for _, live in pairs}
    stale = [] if load.fresh else [k for k in shard_board_keys(version, shard) if k not in live_keys]
    stale += [k.replace(":b:", ":t:", 1) for k in stale]
    blob_keys = [k for board in sorted(boards) for k in board_keys(version, shard, *board)]
    keys = [state_key(version, shard)] + [k for pair in pairs for k in pair] + blob_keys + stale
    args: list[int | str] = [seq, repr(as_of), gen, len(pairs), BLOB_SIZE, len(blob_keys) // 3]
    script("swap")(keys=keys, args=args, client=patient())


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


@translated
def shard_board_keys(version: int, shard: int) -> list[str]:
    pattern = f"{shard_tag(version, shard)}:b:*"
    keys = [k.decode() for k in patient().scan_iter(match=pattern, count=SCAN_COUNT)]
    return [k for k in keys if TEMP_MARK not in k]

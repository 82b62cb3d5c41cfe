"""The operators' reads: what a version holds, board by board (status pages, verify, rebuild checks)."""

import json

from rankings.engine.split import PART_MARK, is_part
from rankings.engine.store.client import clustered, fast, patient, script, translated
from rankings.engine.store.keys import (
    BLOB_SIZE,
    TEMP_MARK,
    board_key,
    board_keys,
    board_of_key,
    boards_pattern,
)
from rankings.engine.store.versions import SCAN_COUNT
from rankings.engine.store.writes import shard_board_keys


@translated
def board_read_all(key: str) -> list[tuple[str, int]]:
    """Every member of a board in ranking order, with its (positive) score."""
    return _scored(patient().zrange(key, 0, -1, withscores=True))


def _scored(rows: list[tuple[bytes, float]]) -> list[tuple[str, int]]:
    """A board's members as ZRANGE WITHSCORES gives them, with their (positive) scores."""
    return [(member.decode(), int(-score)) for member, score in rows]


def _head(raw: bytes | None) -> dict | None:
    """A head as the head script gives it: {"total", "rows"}, or None."""
    return json.loads(raw) if raw else None


@translated
def boards_summary(version: int) -> dict[str, dict[str, int]]:
    """Per window: how many boards and members the version holds (one SCAN, one pipeline)."""
    r = fast()
    keys = [k.decode() for k in r.scan_iter(match=boards_pattern(version), count=SCAN_COUNT)]
    keys = [k for k in keys if TEMP_MARK not in k]
    pipe = r.pipeline(transaction=False)
    for key in keys:
        pipe.zcard(key)
    summary: dict[str, dict[str, int]] = {}
    for key, members in zip(keys, pipe.execute(), strict=True):
        window, _, category = board_of_key(key)
        entry = summary.setdefault(window, {"boards": 0, "members": 0})
        # A split board counts once, with its first part.
        entry["boards"] += 1 if not is_part(category) or category.endswith(f"{PART_MARK}0") else 0
        entry["members"] += members
    return summary


@translated
def head_read(version: int, shard: int, window: str, metric: str, category: str) -> dict | None:
    """A board's head as readers get it ({"total", "rows"}): its blob, or a small board's made
    from it; None for a large board whose blob is missing."""
    keys = list(board_keys(version, shard, window, metric, category))
    return _head(script("head")(keys=keys, args=[BLOB_SIZE], client=patient()))


@translated
def boards_read_with_heads(
    version: int, shard: int, boards: list[tuple[str, str, str]]
) -> list[tuple[list[tuple[str, int]], dict | None]]:
    """Each board (window, metric, category) of one shard as board_read_all and head_read give it:
    (every member in ranking order with its score, its head). One round trip on one server; on a
    Redis Cluster, whose pipelines refuse scripts, the boards in one and each head in one of its own."""
    r = patient()
    pipe = r.pipeline(transaction=False)
    for board in boards:
        pipe.zrange(board_key(version, shard, *board), 0, -1, withscores=True)
    head, calls = script("head"), [list(board_keys(version, shard, *board)) for board in boards]
    if clustered():
        members = pipe.execute() if boards else []
        heads = [head(keys=keys, args=[BLOB_SIZE], client=r) for keys in calls]
    else:
        for keys in calls:
            head(keys=keys, args=[BLOB_SIZE], client=pipe)
        values = pipe.execute() if boards else []
        members, heads = values[: len(boards)], values[len(boards) :]
    return [(_scored(rows), _head(head)) for rows, head in zip(members, heads, strict=True)]


@translated
def boards_heads(
    version: int, shard: int, n: int
) -> dict[tuple[str, str, str], tuple[int, list[tuple[str, int]]]]:
    """Every board of a shard: (window, metric, category) -> (size, first n members with scores)."""
    keys = shard_board_keys(version, shard)
    pipe = patient().pipeline(transaction=False)
    for key in keys:
        pipe.zcard(key)
        pipe.zrange(key, 0, n - 1, withscores=True)
    values = pipe.execute()
    heads = {}
    for i, key in enumerate(keys):
        window, metric, category = board_of_key(key)
        total, rows = values[2 * i], values[2 * i + 1]
        heads[(window, metric, category)] = (total, [(m.decode(), int(-s)) for m, s in rows])
    return heads


@translated
def memory_by_window(version: int, samples: int = 20) -> dict[str, dict[str, float]]:
    """Per window: board keys and their memory, measured with MEMORY USAGE … SAMPLES 0 on up to
    `samples` keys and extrapolated to the rest (exact when there are no more keys than that)."""
    r = patient()
    keys: dict[str, list[bytes]] = {}
    for key in r.scan_iter(match=boards_pattern(version), count=SCAN_COUNT):
        window = board_of_key(key.decode())[0]
        keys.setdefault(window, []).append(key)
    out = {}
    for window, window_keys in keys.items():
        sample = window_keys[:samples]
        used = [r.memory_usage(k, samples=0) or 0 for k in sample]
        out[window] = {"keys": len(window_keys), "bytes": sum(used) / len(sample) * len(window_keys)}
    return out

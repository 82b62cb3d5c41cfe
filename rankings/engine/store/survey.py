"""The operators' reads: what a version holds, board by board (status pages, verify, rebuild checks)."""

import json
from dataclasses import dataclass
from typing import cast

from redis.cluster import RedisCluster

from rankings.engine.split import PART_MARK, is_part
from rankings.engine.store.client import Client, clustered, fast, patient, score_pairs, script, translated
from rankings.engine.store.keys import (
    BLOB_SIZE,
    TEMP_MARK,
    board_key,
    board_keys,
    board_of_key,
    version_pattern,
)
from rankings.engine.store.versions import SCAN_COUNT
from rankings.engine.store.writes import shard_board_keys


@translated
def board_read_all(key: str) -> list[tuple[str, int]]:
    """Every member of a board in ranking order, with its (positive) score."""
    return _scored(cast(list[tuple[bytes, float]], patient().zrange(key, 0, -1, withscores=True)))


def _scored(rows: list[tuple[bytes, float]]) -> list[tuple[str, int]]:
    """A board's members as ZRANGE WITHSCORES gives them, with their (positive) scores."""
    return [(member.decode(), int(-score)) for member, score in rows]


def _head(raw: bytes | None) -> dict | None:
    """A head as the head script gives it: {"total", "rows"}, or None."""
    return json.loads(raw) if raw else None


# Keys the status figures survey at most (SCAN steps of SCAN_COUNT): a status read costs the same
# at a million categories (tens of millions of keys) as at ten. Past it, the figures are
# extrapolated from the share of the keyspace seen, which SCAN's hash order spreads evenly.
SURVEY_KEYS = 5_000  # keys


@dataclass
class BoardsSurvey:
    """The board keys of a version among the keys surveyed, how many keys there are in Redis per
    key surveyed, and whether every key was seen (then the figures are exact)."""

    keys: list[str]
    scale: float
    whole: bool

    @property
    def estimated(self) -> bool:
        return not self.whole


def _boards_survey(r: Client, version: int) -> BoardsSurvey:
    """The version's board keys among the first SURVEY_KEYS keys SCAN visits (other prefixes'
    included: they are the share of the keyspace seen)."""
    head, keys = version_pattern(version)[:-1], []
    scanned = r.scan_iter(count=min(SCAN_COUNT, SURVEY_KEYS))
    for seen, raw in enumerate(scanned, start=1):
        key = raw.decode()
        if key.startswith(head) and ":b:" in key and TEMP_MARK not in key:
            keys.append(key)
        if seen >= SURVEY_KEYS:
            if next(scanned, None) is None:  # that was the last key: every one was seen
                break
            # An estimate, whatever the key count says now: other clients may have deleted keys
            # since. A cluster client asks one node unless told otherwise; SCAN visited every primary.
            every = {"target_nodes": RedisCluster.PRIMARIES} if isinstance(r, RedisCluster) else {}
            return BoardsSurvey(keys, max(1.0, r.dbsize(**every) / seen), whole=False)
    return BoardsSurvey(keys, 1.0, whole=True)


@translated
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
        window, _, category = board_of_key(key)
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


@translated
def head_read(version: int, shard: int, window: str, metric: str, category: str) -> dict | None:
    """A board's head as readers get it ({"total", "rows"}): its blob, or a small board's made
    from it; None for a large board whose blob is missing."""
    keys = list(board_keys(version, shard, window, metric, category))
    return _head(script("head")(keys=keys, args=[BLOB_SIZE], client=patient()))


@translated
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
    head, calls = script("head"), [list(board_keys(version, shard, *board)) for board in boards]
    if clustered():
        values = pipe.execute() if boards else []
        heads = [head(keys=keys, args=[BLOB_SIZE], client=r) for keys in calls]
    else:
        for keys in calls:
            head(keys=keys, args=[BLOB_SIZE], client=pipe)
        values = pipe.execute() if boards else []
        values, heads = values[: 2 * len(boards)], values[2 * len(boards) :]
    return [
        (size, _scored(score_pairs(drawn)), _head(head))
        for size, drawn, head in zip(values[::2], values[1::2], heads, strict=True)
    ]


@translated
def boards_heads(
    version: int, shard: int, n: int, boards: list[tuple[str, str, str]] | None = None
) -> dict[tuple[str, str, str], tuple[int, list[tuple[str, int]]]]:
    """Boards of a shard, every one or those of `boards` (window, metric, category): each one's
    (size, first n members with scores); an empty board is left out."""
    if boards is None:
        boards = [board_of_key(key) for key in shard_board_keys(version, shard)]
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


@translated
def memory_by_window(version: int, samples: int = 20) -> dict[str, dict[str, float | bool]]:
    """Per window: board keys and their memory, measured with MEMORY USAGE … SAMPLES 0 on up to
    `samples` keys of a bounded survey (_boards_survey) and extrapolated to the rest (exact when
    the survey saw every key and there are no more board keys than `samples`)."""
    r = patient()
    survey = _boards_survey(r, version)
    keys: dict[str, list[str]] = {}
    for key in survey.keys:
        keys.setdefault(board_of_key(key)[0], []).append(key)
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

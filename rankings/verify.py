"""Compare every board in Redis with the batch recompute from raw sales."""

from dataclasses import dataclass, field

from . import store
from .aggregate import shard_locked
from .models import ShardState
from .recompute import boards_recompute
from .shards import version_shards


@dataclass
class Difference:
    board: tuple[str, str, str]  # (window, metric, category)
    shard: int
    expected: list[tuple[str, int]]
    actual: list[tuple[str, int]]

    def describe(self, limit: int = 5) -> str:
        window, metric, category = self.board
        expected, actual = dict(self.expected), dict(self.actual)
        lines = [f"{category} {window} {metric}: {len(expected)} expected, {len(actual)} in Redis"]
        wrong = sorted(p for p in expected.keys() | actual.keys() if expected.get(p) != actual.get(p))
        for product_id in wrong[:limit]:
            lines.append(
                f"  {product_id}: expected {expected.get(product_id)}, Redis {actual.get(product_id)}"
            )
        if not wrong:
            lines.append("  same scores, different order")
        return "\n".join(lines)


@dataclass
class VerifyReport:
    boards: int = 0
    members: int = 0
    differences: list[Difference] = field(default_factory=list)
    asof: dict[int, float | None] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return not self.differences


def rankings_verify(*, version: int | None = None) -> VerifyReport:
    """Recompute every board as of its shard's instant and compare it with Redis, exactly."""
    version = version or store.active_version(fresh=True)
    shards = version_shards(version)
    report = VerifyReport()
    for shard in range(shards):
        # Between two batches of the shard, so that Redis and the recompute see the same instant.
        with shard_locked(shard):
            _verify_shard(report, version, shard, shards)
    return report


def _verify_shard(report: VerifyReport, version: int, shard: int, shards: int) -> None:
    state = store.shard_state(version, shard)
    if state.get("asof"):
        asof = float(state["asof"])
    else:  # Redis lost the shard: compare with what the last tick made
        last = ShardState.objects.filter(shard=shard).values_list("now", flat=True).first()
        asof = last.timestamp() if last else None
    report.asof[shard] = asof
    expected = boards_recompute(shard=shard, shards=shards, now=asof) if asof is not None else {}
    actual = {}
    for key in store.shard_board_keys(version, shard):
        window, metric, category = key.split(":b:", 1)[1].split(":", 2)
        actual[(window, metric, category)] = store.board_read_all(key)
    for board in sorted(expected.keys() | actual.keys()):
        want, got = expected.get(board, []), actual.get(board, [])
        report.boards += 1
        report.members += len(got)
        if want != got:
            report.differences.append(Difference(board, shard, want, got))
            continue
        blob_difference = _blob_check(version, shard, board, want, expected)
        if blob_difference:
            report.differences.append(blob_difference)


def _blob_check(version, shard, board, want, expected) -> Difference | None:
    """The board's blob must hold its first ranks with both metrics' scores, and its size."""
    window, metric, category = board
    other = dict(expected.get((window, "revenue" if metric == "units" else "units", category), []))
    blob = store.blob_read(store.blob_key(version, shard, window, metric, category))
    head = want[: store.BLOB_SIZE]
    rows = [[product_id, score, other.get(product_id, 0)] for product_id, score in head]
    if (blob or {"total": 0, "rows": []}) == {"total": len(want), "rows": rows}:
        return None
    got = [(row[0], row[1]) for row in (blob or {"rows": []})["rows"]]
    return Difference((window, f"{metric} (top-{store.BLOB_SIZE} blob)", category), shard, head, got)

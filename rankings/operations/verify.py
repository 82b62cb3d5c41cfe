"""Compare boards in Redis with what PostgreSQL says they hold, and rebuild a shard that differs.

Two checks: `rankings_verify` recomputes every board from raw sales (exact,
slow, run by an operator); the sampled verify compares a few categories'
boards with the buckets (cheap, run periodically), so that a board Redis
evicted or lost is found and rebuilt without waiting for an operator.
"""

import datetime as dt
import logging
import random
from collections import defaultdict
from dataclasses import dataclass, field

from django.db import connection
from django.utils import timezone

from catalogue.models import Category
from rankings.conf import METRICS, other_metric, rankings_settings
from rankings.engine import locks, store
from rankings.engine.aggregate import shard_rebuild
from rankings.engine.prune import engine_now
from rankings.engine.recompute import boards_recompute
from rankings.engine.shards import ALL, Layout, version_layout
from rankings.engine.tree import version_tree
from rankings.engine.windows import configured_windows
from rankings.models import ShardState, VerifyLog

log = logging.getLogger(__name__)

# The status page counts the repairs of this span (the log keeps VERIFY_LOG_KEEP_SECONDS).
REPAIRS_SPAN = dt.timedelta(days=7)


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
    as_of: dict[int, float | None] = field(default_factory=dict)
    repaired: list[int] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.differences


def rankings_verify(*, version: int | None = None, repair: bool = False) -> VerifyReport:
    """Recompute every board as of its shard's instant and compare it with Redis, exactly.

    With `repair`, a shard with a difference is rebuilt from the buckets and
    compared again; what still differs then is reported (the buckets
    themselves disagree with the raw sales, which a rebuild cannot mend).
    """
    version = version or store.active_version(fresh=True)
    layout = version_layout(version)
    report = VerifyReport()
    for shard in range(layout.shards):
        # Between two batches of the shard, so that Redis and the recompute see the same instant.
        with locks.shard_lock(shard):
            found = VerifyReport()
            _verify_shard(found, version, shard, layout)
            if repair and found.differences:
                _repair(version, shard, f"{len(found.differences)} boards differ from the raw sales")
                report.repaired.append(shard)
                found = VerifyReport()
                _verify_shard(found, version, shard, layout)
        report.boards += found.boards
        report.members += found.members
        report.differences += found.differences
        report.as_of.update(found.as_of)
    if repair:
        _log_run("verify --repair", report.boards, report.repaired)
    return report


def _repair(version: int, shard: int, reason: str) -> None:
    """Rebuild a shard's boards from the buckets; the caller holds the shard's lock."""
    log.warning("shard %s of version %s: %s; rebuilding it from the buckets", shard, version, reason)
    shard_rebuild(shard=shard, version=version, gen=store.generation(version))


def _log_run(source: str, boards: int, repaired: list[int]) -> None:
    VerifyLog.objects.create(
        at=engine_now() or timezone.now(), source=source, boards=boards, repaired=repaired
    )


def _verify_shard(report: VerifyReport, version: int, shard: int, layout: Layout) -> None:
    state = store.shard_state(version, shard)
    if state.get("asof"):
        as_of = float(state["asof"])
    else:  # Redis lost the shard: compare with what the last tick made
        last = ShardState.objects.filter(shard=shard).values_list("as_of", flat=True).first()
        as_of = last.timestamp() if last else None
    report.as_of[shard] = as_of
    tree = version_tree(version)
    expected = boards_recompute(shard=shard, layout=layout, now=as_of, tree=tree) if as_of is not None else {}
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
    return _blob_compare(shard, board, want, expected, store.head_read(version, shard, *board))


def _blob_compare(shard, board, want, expected, blob: dict | None) -> Difference | None:
    window, metric, category = board
    other = dict(expected.get((window, other_metric(metric), category), []))
    head = want[: store.BLOB_SIZE]
    rows = [[product_id, score, other.get(product_id, 0)] for product_id, score in head]
    if (blob or {"total": 0, "rows": []}) == {"total": len(want), "rows": rows}:
        return None
    got = [(row[0], row[1]) for row in (blob or {"rows": []})["rows"]]
    return Difference((window, f"{metric} (top-{store.BLOB_SIZE} blob)", category), shard, head, got)


# Every metric's board of one category in each window (a row of `w`), from the buckets, as the
# tick's rebuild computes it: cheap, because the buckets are few per product.
_CATEGORY_BUCKET_SUMS = """
SELECT w.name, q.*
FROM unnest(%s::text[], %s::integer[], %s::bigint[], %s::bigint[]) AS w (name, size, first, last)
CROSS JOIN LATERAL (
    SELECT product_id, sum(units)::bigint, sum(revenue_cents)::bigint, sum(views)::bigint,
           sum(wishes)::bigint
    FROM rankings_bucket
    WHERE shard = %s AND size = w.size AND category = %s AND start BETWEEN w.first AND w.last
    GROUP BY product_id
) AS q
"""


@dataclass
class SampleReport:
    categories: list[str] = field(default_factory=list)
    boards: int = 0
    differences: list[Difference] = field(default_factory=list)
    repaired: list[int] = field(default_factory=list)


def sample_categories(n: int) -> list[str]:
    """Up to n categories picked at random; the board of every sale counts as one of them."""
    total = Category.objects.count() + 1
    if n >= total:
        return [ALL, *Category.objects.values_list("slug", flat=True)]
    picked = list(Category.objects.order_by("?").values_list("slug", flat=True)[:n])
    if random.random() < n / total:
        picked[-1] = ALL
    return picked


def verify_sampled(*, sample: int | None = None, categories: list[str] | None = None) -> SampleReport:
    """Compare a few categories' boards with the buckets; rebuild each shard where one differs."""
    version = store.active_version(fresh=True)
    if categories is None:
        categories = sample_categories(
            rankings_settings.VERIFY_SAMPLE_CATEGORIES if sample is None else sample
        )
    report = SampleReport(categories=list(categories))
    layout = version_layout(version)
    by_shard: dict[int, list[str]] = defaultdict(list)
    for category in categories:
        for board in layout.boards_of(category):  # a split category: each of its parts
            by_shard[layout.shard_of(board)].append(board)
    for shard, shard_categories in sorted(by_shard.items()):
        # Between two batches of the shard: Redis and the buckets stand at the same instant.
        with locks.shard_lock(shard):
            found = []
            for category in shard_categories:
                found += _sample_check(report, version, shard, category)
            if found:
                report.differences += found
                _repair(version, shard, f"{len(found)} sampled boards differ from the buckets")
                report.repaired.append(shard)
    _log_run("sampled", report.boards, report.repaired)
    return report


def _sample_check(report: SampleReport, version: int, shard: int, category: str) -> list[Difference]:
    """Every window's and metric's board of one category, and its blob, against the buckets."""
    as_of = ShardState.objects.filter(shard=shard).values_list("as_of", flat=True).first()
    expected = _category_boards(shard, category, as_of) if as_of is not None else {}
    boards = [(w.name, metric, category) for w in configured_windows().values() for metric in METRICS]
    differences = []
    for board, (got, blob) in zip(boards, store.boards_read_with_heads(version, shard, boards), strict=True):
        want = expected.get(board, [])
        report.boards += 1
        if want != got:
            differences.append(Difference(board, shard, want, got))
            continue
        blob_difference = _blob_compare(shard, board, want, expected, blob)
        if blob_difference:
            differences.append(blob_difference)
    return differences


def _category_boards(
    shard: int, category: str, as_of: dt.datetime
) -> dict[tuple[str, str, str], list[tuple[str, int]]]:
    """Every window's and metric's board of one category as of `as_of`, from the buckets, in ranking
    order ((window, metric, category) -> scores); a board with no positive score is absent."""
    windows = list(configured_windows().values())
    bounds = [w.bounds(int(as_of.timestamp())) for w in windows]
    with connection.cursor() as cursor:
        cursor.execute(
            _CATEGORY_BUCKET_SUMS,
            [
                [w.name for w in windows],
                [w.bucket_seconds for w in windows],
                [first for first, _ in bounds],
                [last for _, last in bounds],
                shard,
                category,
            ],
        )
        rows = cursor.fetchall()
    scores: dict[tuple[str, str, str], list[tuple[str, int]]] = defaultdict(list)
    for name, product_id, *values in rows:
        for metric, value in zip(METRICS, values, strict=True):
            if value > 0:
                scores[(name, metric, category)].append((product_id, int(value)))
    return {
        board: sorted(found, key=lambda row: (-row[1], row[0].encode())) for board, found in scores.items()
    }


def redis_safety() -> dict:
    """For the status page: can Redis evict a board, and what the verify runs found and repaired."""
    try:
        policy = store.eviction_policy()
    except store.StoreError:
        policy = None
    last = VerifyLog.objects.filter(source="sampled").first()
    repaired = VerifyLog.objects.filter(at__gte=(engine_now() or timezone.now()) - REPAIRS_SPAN).exclude(
        repaired=[]
    )
    return {
        "evictionPolicy": policy,
        "evictionSafe": store.eviction_policy_safe(policy),
        "lastSampledVerify": last.at if last else None,
        "repairedShards": sum(len(shards) for shards in repaired.values_list("repaired", flat=True)),
    }

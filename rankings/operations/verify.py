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
from django.db.models import Max, Min
from django.utils import timezone

from catalogue.models import Category
from rankings.conf import METRICS, other_metric, rankings_settings
from rankings.engine import locks, store
from rankings.engine.batches import shard_rebuild
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
    version = version or store.served_version(fresh=True)
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
        as_of: float | None = float(state["asof"])
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


# Members of each board whose scores the sampled verify compares, drawn at random: every member of a
# board of at most this many; of a larger one (the board of every sale of ten million products),
# these, beside its size and its first ranks. So a check costs the worker the same whatever the
# board's size; rankings_verify compares every member.
VERIFY_SPOT_MEMBERS = 1_000  # members

_METRIC_SUMS = {"units": "units", "revenue": "revenue_cents", "views": "views", "wishes": "wishes"}
# One category's buckets in one window, per product: what each of its boards holds.
_CATEGORY_SUMS = (
    "SELECT product_id, "
    + ", ".join(f"sum({column})::bigint AS {metric}" for metric, column in _METRIC_SUMS.items())
    + " FROM rankings_bucket WHERE shard = %(shard)s AND size = %(size)s AND category = %(category)s"
    " AND start BETWEEN %(first)s AND %(last)s"
)


def _head_of(metric: str) -> str:
    """A board's size and its first ranks as its blob holds them ([product, score, other score]), in
    ranking order (score descending, then product id by bytes), from the per-product sums `s`."""
    other = other_metric(metric)
    ranked = f"s.{metric} DESC, convert_to(s.product_id, 'UTF8')"
    return (
        f"(SELECT count(*) FROM s WHERE s.{metric} > 0), "
        f"(SELECT coalesce(json_agg(json_build_array(t.product_id, t.{metric}, greatest(t.{other}, 0))"
        f" ORDER BY t.n), '[]') FROM (SELECT s.*, row_number() OVER (ORDER BY {ranked}) AS n FROM s"
        f" WHERE s.{metric} > 0 ORDER BY {ranked} LIMIT %(top)s) AS t)"
    )


# Every board of one category in one window: each metric's size and first ranks, one row.
_CATEGORY_HEADS = f"WITH s AS MATERIALIZED ({_CATEGORY_SUMS} GROUP BY product_id) SELECT " + ", ".join(
    _head_of(metric) for metric in METRICS
)
# Chosen products' sums in one window, through the buckets' index by product.
_PRODUCT_SUMS = f"{_CATEGORY_SUMS} AND product_id = ANY(%(products)s) GROUP BY product_id"


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
    picked = _categories_drawn(n)
    if random.random() < n / total:
        picked[-1] = ALL
    return picked


def _categories_drawn(n: int) -> list[str]:
    """n categories, each the first at or after a key drawn at random: n probes of the key where an
    ORDER BY random() would sort the whole table (a category after a gap in the keys is drawn a
    little more often)."""
    keys = Category.objects.aggregate(low=Min("pk"), high=Max("pk"))
    picked: dict[str, None] = {}
    for _ in range(4 * n):  # draws that find a category already drawn are retried, a few times over
        at = random.randint(keys["low"], keys["high"])
        picked[Category.objects.filter(pk__gte=at).order_by("pk").values_list("slug", flat=True)[0]] = None
        if len(picked) == n:
            break
    return list(picked)


def verify_sampled(*, sample: int | None = None, categories: list[str] | None = None) -> SampleReport:
    """Compare a few categories' boards with the buckets; rebuild each shard where one differs."""
    version = store.served_version(fresh=True)
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
    """Every window's and metric's board of one category against the buckets: its size, its blob
    (its first ranks with both metrics) and the scores of up to VERIFY_SPOT_MEMBERS members."""
    as_of = ShardState.objects.filter(shard=shard).values_list("as_of", flat=True).first()
    boards = [(w.name, metric, category) for w in configured_windows().values() for metric in METRICS]
    read = store.boards_spot_read(version, shard, boards, VERIFY_SPOT_MEMBERS)
    spots = {board: drawn for board, (_, drawn, _) in zip(boards, read, strict=True)}
    expected = _category_expected(shard, category, as_of, spots) if as_of is not None else {}
    differences = []
    for board, (size, drawn, blob) in zip(boards, read, strict=True):
        report.boards += 1
        total, head, scores = expected.get(board, (0, [], {}))
        want_blob = {"total": total, "rows": head}
        if size != total or (blob or {"total": 0, "rows": []}) != want_blob:
            shown = [(row[0], row[1]) for row in (blob or {"rows": []})["rows"]]
            differences.append(Difference(board, shard, [(row[0], row[1]) for row in head], shown))
        elif any(scores.get(product_id, 0) != score for product_id, score in drawn):
            want = [(product_id, scores.get(product_id, 0)) for product_id, _ in drawn]
            differences.append(Difference(board, shard, want, drawn))
    return differences


def _category_expected(
    shard: int, category: str, as_of: dt.datetime, spots: dict[tuple[str, str, str], list]
) -> dict[tuple[str, str, str], tuple[int, list, dict[str, int]]]:
    """Each board of one category as of `as_of`, from the buckets: (its size, its blob's rows, the
    positive scores of the members drawn from it in `spots`). Per window, one statement for the
    sizes and heads (PostgreSQL adds up the category's buckets; only the heads come back) and one
    for the drawn members' sums."""
    expected = {}
    with connection.cursor() as cursor:
        for w in configured_windows().values():
            first, last = w.bounds(int(as_of.timestamp()))
            params: dict[str, int | str] = {"shard": shard, "size": w.bucket_seconds, "category": category}
            params |= {"first": first, "last": last, "top": store.BLOB_SIZE}
            cursor.execute(_CATEGORY_HEADS, params)
            row = cursor.fetchone()
            drawn = sorted({pid for m in METRICS for pid, _ in spots.get((w.name, m, category), [])})
            cursor.execute(_PRODUCT_SUMS, {**params, "products": drawn})
            sums = {product_id: values for product_id, *values in cursor.fetchall()}
            for i, metric in enumerate(METRICS):
                total, head = row[2 * i], row[2 * i + 1]
                scores = {pid: values[i] for pid, values in sums.items() if values[i] > 0}
                expected[(w.name, metric, category)] = (total, [list(r) for r in head], scores)
    return expected


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

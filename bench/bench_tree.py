"""The tick's cost per sale as the category tree deepens: board writes per sale and sales/s.

A sale counts once in each of its categories and in every ancestor, so a deeper
tree means more boards per sale. The demo's catalogue (50 categories, 40% of
sales in cat0, 20% of sales in two categories) is arranged in chains of
`depth` levels, the hot category cat0 at the bottom of its chain (so its sales
climb every level), frozen into the active version by a rebuild, and then the
demo's sales are ingested and ticked in batches of 1,000, as bench_engine (b)
does. Depth 1 is the flat catalogue.
"""

import io
import time

from bench import harness

SALES = 100_000
DEPTHS = (1, 3, 6)
CATEGORIES = 50


def _tree(depth: int) -> dict[str, str]:
    """cat(j·depth + k) under cat(j·depth + k + 1): chains of `depth` levels, cat0 at a bottom."""
    parents = {}
    for first in range(0, CATEGORIES, depth):
        chain = [f"cat{i}" for i in range(first, min(first + depth, CATEGORIES))]
        parents.update(zip(chain, chain[1:], strict=False))
    return parents


def _shop(depth: int) -> None:
    """An empty shop whose active version counts with the demo's catalogue in chains of `depth`."""
    from django.core.management import call_command
    from django.db import connection

    from catalogue.models import Category
    from rankings.engine import store
    from rankings.operations.backfill import version_build

    harness.reset()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE rankings_rankingversion")
    store.reset_clients()
    call_command("seed_demo", "--seed", "1", "--sales", "0", "--no-progress", stdout=io.StringIO())
    ids = dict(Category.objects.values_list("slug", "id"))
    # Parents before children: each chain from its top down, so the database's guard never sees a gap.
    for child, parent in sorted(_tree(depth).items(), key=lambda pair: -int(pair[1][3:])):
        Category.objects.filter(slug=child).update(parent_id=ids[parent])
    version_build(activate=True)


def _tick(depth: int) -> dict:
    """The demo's sales ticked under chains of `depth`: sales, board writes, queue rows, seconds."""
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings
    from django.utils import timezone

    from rankings.engine.tick import tick
    from rankings.models import PendingSale

    _shop(depth)
    now = timezone.now()
    call_command(
        "seed_demo", "--seed", "1", "--sales", str(SALES), "--now", now.isoformat(), "--no-progress",
        stdout=io.StringIO(),
    )  # fmt: skip
    rows = PendingSale.objects.count()
    boards_per_sale = _boards_per_sale()
    with override_settings(RANKINGS={**settings.RANKINGS, "BATCH_SIZE": 1000}):
        started = time.perf_counter()
        report = tick(now=now)
        seconds = time.perf_counter() - started
    return {
        "sales": report.sales,
        "writes": report.redis_writes,
        "queue rows": rows,
        "boards per sale": boards_per_sale,
        "seconds": seconds,
        "rate": report.sales / seconds,
    }


def _boards_per_sale() -> float:
    """Categories a queued sale counts in (ancestors and `all` included), on average."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(cardinality(categories))::float / count(DISTINCT sale_id) FROM rankings_pendingsale"
        )
        return cursor.fetchone()[0]


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    results: dict[int, list[dict]] = {depth: [] for depth in DEPTHS}
    print(
        f"tree: {SALES:,} demo sales ticked under trees {DEPTHS} levels deep, {runs} run(s) each…", flush=True
    )
    for _ in range(runs):
        for depth in DEPTHS:  # the depths alternate, so that a change in the machine's load meets each
            result = _tick(depth)
            results[depth].append(result)
            print(f"    depth {depth}: {result}", flush=True)
    flat = harness.median([r["rate"] for r in results[DEPTHS[0]]])
    for depth in DEPTHS:
        median = sorted(results[depth], key=lambda r: r["rate"])[len(results[depth]) // 2]
        table.add(
            f"tick under a tree {depth} level{'s' * (depth > 1)} deep, demo {SALES:,} sales, batches of 1,000",
            f"{median['rate']:,.0f} sales/s",
            f"{flat:,.0f} sales/s flat" if depth != DEPTHS[0] else "",
            f"{median['rate'] / flat:.2f}x" if depth != DEPTHS[0] else "",
            f"{median['writes'] / median['sales']:.2f} board writes per sale ({median['writes']:,} in all); "
            f"each sale counts in {median['boards per sale']:.2f} boards per window and metric "
            f"(`all` and ancestors included), {median['queue rows'] / median['sales']:.2f} queue rows",
        )
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

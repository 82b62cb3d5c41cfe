"""Split boards: /top and /rank of the demo's board of every sale, whole and split 3 ways, in one run.

The demo data is ticked once with `all` whole (one sorted set); the reads are measured with wrk
through gunicorn; then a rebuild splits `all` into 3 parts (rankings_rebuild --split all:3, each
part on a shard of its own) and is switched to, and the same reads are measured again. The ratio
is split over whole (goal ≥ 0.5x); a row for each layout sets /neighbors against /rank. On one
Redis server the parts share the server: this measures the merge's own cost (the extra commands
and round trips, the k-way merge in the web process), not what spreading the parts over cluster
nodes gains.
"""

import tempfile
from pathlib import Path

from bench import harness
from bench.bench_read import _median_run

# Random requests (a wrk script each): few repeat within a web process's half-second answer cache,
# so these measure the reads themselves; a fixed URL is mostly answered from that cache.
_RANDOM = """
math.randomseed(os.time())
request = function()
    return wrk.format("GET", %s)
end
"""
_RANDOM_PATHS = {
    "rank": '"/v1/products/p" .. math.random(0, 19999) .. "/rank?category=all"',
    "page": '"/v1/categories/all/top?limit=50&offset=" .. math.random(100, 9950)',
    "neighbors": '"/v1/products/p" .. math.random(0, 19999) .. "/neighbors?category=all&n=5"',
}

# (label, path, or the name of a random script)
_READS = [
    ("/top of all, first page (blobs)", "/v1/categories/all/top"),
    ("/top of all, ranks 5,001-5,050", "/v1/categories/all/top?offset=5000&limit=50"),
    ("/top of all, random pages of ranks 101-10,000", "page"),
    ("/rank in all, one product", "/v1/products/{member}/rank?category=all"),
    ("/rank in all, random products of 20,000", "rank"),
    ("/neighbors in all, random products of 20,000", "neighbors"),
]


def _demo() -> str:
    """The demo data ticked once, `all` whole; a product ranked 41st on all's 7d units board."""
    from django.utils import timezone

    from bench.bench_engine import _seed_demo
    from rankings.engine.tick import tick
    from rankings.serving import selectors

    _fresh()
    _seed_demo()
    tick(now=timezone.now())
    board = selectors.board_top(category="all", window="7d", metric="units", limit=1, offset=40)
    return board.items[0].product_id


def _fresh() -> None:
    """An empty shop whose next version is a fresh install's (whole boards): no version is kept."""
    from django.db import connection

    harness.reset()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE rankings_rankingversion")


def _split() -> str:
    """Rebuild with `all` split 3 ways and switch to it; the new layout, described."""
    from rankings.engine.shards import active, layout_plan
    from rankings.operations.backfill import version_build

    layout = layout_plan(active().layout, split={"all": 3})
    version_build(layout=layout, activate=True)
    return layout.describe()


def _measure(url: str, member: str, tmp: str, runs: int) -> dict[str, tuple[float, float, float]]:
    measured = {}
    for label, path in _READS:
        if path in _RANDOM_PATHS:
            script = Path(tmp) / f"random_{path}.lua"
            script.write_text(_RANDOM % _RANDOM_PATHS[path])
            measured[label] = _median_run(f"{url}/v1/categories/all/top", runs, str(script))
        else:
            measured[label] = _median_run(url + path.format(member=member), runs)
    return measured


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    print("split: demo data, wrk on all's board whole, then split 3 ways (rebuild, switch)…", flush=True)
    member = _demo()
    with tempfile.TemporaryDirectory() as tmp:
        with harness.services(worker=False) as url:
            whole = _measure(url, member, tmp, runs)
        layout = _split()
        with harness.services(worker=False) as url:
            split = _measure(url, member, tmp, runs)
    _fresh()  # the groups after this one find whole boards
    for label, _ in _READS:
        rate, p50, p99 = split[label]
        whole_rate, whole_p50, whole_p99 = whole[label]
        table.add(
            f"{label}, split 3 ways",
            f"{rate:,.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms",
            f"whole: {whole_rate:,.0f} req/s, p50 {whole_p50:.1f} ms, p99 {whole_p99:.1f} ms",
            f"{rate / whole_rate:.2f}x",
            "goal ≥ 0.5x; " + layout,
        )
    rank, neighbours = (
        "/rank in all, random products of 20,000",
        "/neighbors in all, random products of 20,000",
    )
    for name, measured in (("whole", whole), ("split 3 ways", split)):
        table.add(
            f"/neighbors (n=5) against /rank in all, random products, {name}",
            f"{measured[neighbours][0]:,.0f} req/s",
            f"rank: {measured[rank][0]:,.0f} req/s",
            f"{measured[neighbours][0] / measured[rank][0]:.2f}x",
            harness.load_average(),
        )
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

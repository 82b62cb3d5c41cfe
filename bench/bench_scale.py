"""The seeds' scale: one board of ten million products, and a million categories (not in CI).

The big board is loaded in bulk, not through the API: SQL writes its products into the
catalogue (and `names_copy` their names into Redis, as an operator does after a bulk load: the
time it takes and the names' memory are reported), then pipelined ZADDs write the `all` board's 7-day units and revenue sorted sets,
product p<i> with the demo's skew (a few best sellers, a long tail of ties at one and two units),
after a tick has made the shop's version and shard states; a real sale in each part and a tick
then write the board's top-100 blobs as the engine does. The board is read through gunicorn with wrk,
whole on the plain Redis, then split 3 ways (a rebuild with the split, switched to) over a
Redis Cluster of three primaries, each part on a node of its own. Beside each read's rate: its
Redis round trips, counted in this process over TRIPS_READS random products (a count the
machine's load does not move), the MOVED/ASK replies the nodes sent during its runs, and the load
average; and a row of neighbours against rank, for each layout.

The million categories are written with SQL (categories, five products each); a sample of
them gets one sale per product through the ingest and a tick, to measure Redis's cost per
category as the engine writes it; then a tick of 5,000 sales spread over all of them, and the
home page and /v1/categories paged through the million; then the tick again with `all` split 4
ways, and with 8 hashed shards and `all` split 8 ways, each with its longest shard's tick alone.

    python -m bench --only scale            (BENCH_SCALE_MEMBERS, BENCH_SCALE_CATEGORIES to resize;
                                             BENCH_SCALE_MEMBERS=0: the categories alone;
                                             BENCH_SCALE_CATEGORIES=0: the board alone)
"""

import datetime as dt
import os
import random
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from bench import harness
from bench.bench_read import _wrk
from rankings.serving.memory import forget_all
from tests.redis_round_trips import RedisRoundTrips

MEMBERS = int(os.environ.get("BENCH_SCALE_MEMBERS", "10000000"))
CATEGORIES = int(os.environ.get("BENCH_SCALE_CATEGORIES", "1000000"))
SAMPLED = min(CATEGORIES, 20_000)  # categories whose boards the engine writes for the memory figure
CHUNK = 100_000  # members written per pipeline: Redis answers others between them
# The million categories' tick is measured with `all` whole, then split this many ways; then with
# twice the hashed shards and `all` split as many ways, each shard holding half as much of the tick.
SPREAD_SPLIT = 4
SPREAD_WIDE = 8

# The catalogue of the big board: product p<i> for i < MEMBERS (a read of a product the catalogue
# does not know answers 404 without touching the board).
_PRODUCTS_SQL = """
INSERT INTO catalogue_product (product_id, name, price_cents, is_placeholder)
SELECT 'p' || g, 'Product ' || g, 199 + g %% 9800, false FROM generate_series(0, %(n)s - 1) AS g
"""


def _random_script(tmp: str, path: str, count: int) -> str:
    script = Path(tmp) / f"random-{abs(hash(path))}.lua"
    script.write_text(
        "math.randomseed(os.time())\n"
        "request = function()\n"
        f'    return wrk.format("GET", string.format("{path}", math.random(0, {count - 1})))\n'
        "end\n"
    )
    return str(script)


def _units(i: int) -> int:
    """Units of product p<i> (0-based popularity order): about 40,000 for the best seller, then a
    long tail of ties; its revenue is a per-product price in cents times the units."""
    return int(40000 / (i + 1) ** 0.75) + 1


def _load(boards: list[tuple[str, str]], layout, slug: str) -> None:
    """MEMBERS products into `boards` ((units key, revenue key) per board of `slug`), each product
    into the board the layout gives it (its part, for a split board)."""
    from rankings.engine import store

    parts = {board: n for n, board in enumerate(layout.boards_of(slug))}
    client = store.patient()
    for first in range(0, MEMBERS, CHUNK):
        members = [[{}, {}] for _ in boards]
        for i in range(first, min(MEMBERS, first + CHUNK)):
            product = f"p{i}"
            units, revenue = members[parts[layout.board_of(slug, product)]]
            units[product] = -_units(i)
            revenue[product] = -_units(i) * (199 + i % 9800)
        pipe = client.pipeline(transaction=False)
        for (units_key, revenue_key), (units, revenue) in zip(boards, members, strict=True):
            pipe.zadd(units_key, units)
            pipe.zadd(revenue_key, revenue)
        pipe.execute()


def _all_split(parts: int, shards: int | None = None) -> None:
    """`all` split `parts` ways (over `shards` hashed shards; default: as now), as an operator splits
    it: a rebuild with the layout, switched to."""
    from rankings.engine.shards import ALL, active, layout_plan
    from rankings.operations.backfill import version_build

    version_build(layout=layout_plan(active().layout, shards=shards, split={ALL: parts}), activate=True)


def _big_board(split: int) -> tuple[int, int]:
    """The `all` 7d boards of MEMBERS products in Redis, whole or split `split` ways (a rebuild with
    the split, switched to, as an operator would), and their names copied to Redis; the bytes the
    units board takes, its parts summed, and the bytes the names take."""
    from django.db import connection
    from django.utils import timezone

    from rankings.engine import store
    from rankings.engine.names_copy import names_copy
    from rankings.engine.shards import ALL, active
    from rankings.engine.tick import tick
    from rankings.ingest.sales import sales_ingest

    _fresh()
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(_PRODUCTS_SQL, {"n": MEMBERS})
        cursor.execute("ANALYZE catalogue_product")
    now = timezone.now().replace(microsecond=0)
    tick(now=now)  # the version, its layout and every shard's state
    if split > 1:
        _all_split(split)
    version, layout = store.served_version(fresh=True), active().layout
    boards = [
        tuple(
            store.board_key(version, layout.shard_of(board), "7d", metric, board)
            for metric in ("units", "revenue")
        )
        for board in layout.boards_of(ALL)
    ]
    _load(boards, layout, ALL)
    loaded = time.perf_counter()
    names_copy()  # as an operator does after a bulk load of products (manage.py names_copy)
    print(
        f"  {MEMBERS:,} products in the catalogue and the boards in {loaded - started:.0f} s,"
        f" their names copied to Redis in {time.perf_counter() - loaded:.0f} s",
        flush=True,
    )
    # A real sale in each part, ticked: the engine writes each part's top-100 blob as it always does.
    sold = {layout.board_of(ALL, f"p{i}"): f"p{i}" for i in range(len(boards) * 20, -1, -1)}
    sales_ingest(
        events=[
            {"id": f"scale-{pid}", "ts": now.isoformat(), "productId": pid, "qty": 1, "amount": "1.99"}
            for pid in sold.values()
        ],
        now=now,
    )
    tick(now=now + dt.timedelta(seconds=1))
    return sum(store.patient().memory_usage(units, samples=0) for units, _ in boards), _names_memory()


def _names_memory() -> int:
    """The bytes Redis's copy of the product names takes: MEMORY USAGE of each bucket."""
    from rankings.engine import store
    from rankings.engine.store.names import names_key

    client, used = store.patient(), 0
    for first in range(0, store.NAMES_BUCKETS, 10_000):
        pipe = client.pipeline(transaction=False)
        for bucket in range(first, min(first + 10_000, store.NAMES_BUCKETS)):
            pipe.memory_usage(names_key(bucket), samples=0)
        used += sum(n or 0 for n in pipe.execute())
    return used


def _fresh() -> None:
    """An empty shop whose next version is a fresh install's (whole boards): no version is kept."""
    from django.db import connection

    harness.reset()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE rankings_rankingversion")


def _read(kind: str):
    """The selector behind a read, called in this process (product p<i>, for a random one)."""
    from rankings.serving import selectors

    board = {"category": "all", "window": "7d", "metric": "units"}
    return {
        "top": lambda i: selectors.board_top(limit=100, offset=0, **board),
        "rank": lambda i: selectors.product_rank(product_id=f"p{i}", **board),
        "neighbors": lambda i: selectors.product_neighbors(product_id=f"p{i}", n=5, **board),
    }[kind]


# (label, path, the read: "top", or "rank"/"neighbors" of a random product)
_READS = [
    ("top-100", "/v1/categories/all/top?limit=100", "top"),
    ("rank of a random product", "/v1/products/p%d/rank?category=all", "rank"),
    ("neighbours of a random product", "/v1/products/p%d/neighbors?category=all&n=5", "neighbors"),
]
TRIPS_READS = 50  # reads of random products whose Redis round trips are counted, in this process


def _round_trips(kind: str) -> float:
    """Redis round trips per read of `kind`, counted in this process over TRIPS_READS random
    products, each read new to the answer memory: what a request waits on Redis for, on any load."""
    read, rng = _read(kind), random.Random(31)
    read(0)  # the version, its layout and the scripts known
    with RedisRoundTrips() as trips:
        for _ in range(TRIPS_READS):
            forget_all("answers")
            read(rng.randrange(MEMBERS))
    return trips.count / TRIPS_READS


def _board_reads(runs: int, split: int) -> tuple[tuple[int, int], dict[str, tuple[float, ...]]]:
    """The big board's memory and its names' and, for each read through gunicorn with wrk: (req/s, p50, p99, Redis
    round trips per request, MOVED/ASK replies during its runs)."""
    memory = _big_board(split)
    measured = {}
    with harness.services(worker=False) as url, tempfile.TemporaryDirectory() as tmp:
        for label, path, kind in _READS:
            script = _random_script(tmp, path, MEMBERS) if kind != "top" else None
            moved = harness.redirections()
            results = [_wrk(url + (path if kind == "top" else path % 0), script) for _ in range(runs)]
            moved = harness.redirections() - moved
            rate, p50, p99 = (harness.median([r[i] for r in results]) for i in range(3))
            measured[label] = (rate, p50, p99, _round_trips(kind), moved)
    _fresh()
    return memory, measured


def _big_boards(table: harness.Table, runs: int) -> None:
    """The board whole on one Redis, then split 3 ways over a Redis Cluster's three primaries."""
    (memory, names), whole = _board_reads(runs, split=1)
    whole_load = harness.load_average()
    table.add(
        f"`all` board of {MEMBERS:,} products: Redis memory",
        f"{memory / MEMBERS:.0f} bytes per member ({memory / 2**20:,.0f} MiB per board)",
        note="goal ≤ 110 bytes per member",
    )
    table.add(
        f"{MEMBERS:,} product names copied to Redis: memory",
        f"{names / MEMBERS:.0f} bytes per product ({names / 2**20:,.0f} MiB)",
    )
    with harness.boards_on_cluster(replicas=0):
        _, split = _board_reads(runs, split=3)
    split_load = harness.load_average()
    for label, _, _ in _READS:
        for name, (rate, p50, p99, trips, moved), base, load in (
            ("one node", whole[label], None, whole_load),
            ("split 3 ways, cluster", split[label], whole[label], split_load),
        ):
            table.add(
                f"`all` board of {MEMBERS:,}, {name}: {label}",
                f"{rate:,.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms",
                f"one node: {base[0]:,.0f} req/s" if base else "",
                f"{rate / base[0]:.2f}x" if base else "",
                "; ".join(
                    [f"{trips:.2f} Redis round trips a read, {moved} MOVED/ASK", load]
                    + ["goal ≥ 0.5x"] * bool(base)
                    + ["goal p99 ≤ 10 ms"] * ("rank" in label)
                ),
            )
    rank, neighbours = _READS[1][0], _READS[2][0]
    for name, measured in (("one node", whole), ("split 3 ways, cluster", split)):
        table.add(
            f"`all` board of {MEMBERS:,}, {name}: neighbours (n=5) against rank, random products",
            f"{measured[neighbours][0]:,.0f} req/s",
            f"rank: {measured[rank][0]:,.0f} req/s",
            f"{measured[neighbours][0] / measured[rank][0]:.2f}x",
            "goal ≥ 0.7x" if name == "one node" else "",
        )


_CATEGORIES_SQL = """
INSERT INTO catalogue_category (slug, name, is_placeholder, has_sales)
SELECT 'c' || lpad(g::text, 7, '0'), 'Category ' || g, false, false FROM generate_series(0, %(n)s - 1) AS g;
INSERT INTO catalogue_product (product_id, name, price_cents, is_placeholder)
SELECT 'q' || g, 'Product ' || g, 199 + g %% 9800, false FROM generate_series(0, %(n)s * 5 - 1) AS g;
INSERT INTO catalogue_product_categories (product_id, category_id)
SELECT p.id, c.id FROM catalogue_product p
JOIN catalogue_category c ON c.slug = 'c' || lpad((substr(p.product_id, 2)::int / 5)::text, 7, '0');
"""


def _spread_ticks(
    table: harness.Table, runs: int, now: dt.datetime, phase: str, laid_out: str
) -> dt.datetime:
    """Ticks of 5,000 sales spread over the million categories (their ids named by `phase`): whole, its
    shards side by side in the machine's threads, then each shard's tick alone, one after another. A
    shard's tick is its worker's, PostgreSQL's and Redis's work in turn, so the longest shard's alone
    bounds from below what a tick could take with a core for each shard; whether it would take that
    little, with the shards sharing PostgreSQL and Redis, is not measured here. Returns the engine's
    instant after them."""
    from rankings.engine.shards import active
    from rankings.engine.tick import tick
    from rankings.ingest.sales import sales_ingest

    def sold(at: dt.datetime, name: str, seed: int) -> dt.datetime:
        spread = random.Random(seed).sample(range(CATEGORIES), 5000)
        sales_ingest(
            events=[
                {"id": f"{phase}-{name}-{c}", "ts": at.isoformat(), "productId": f"q{5 * c}", "qty": 1}
                for c in spread
            ],
            now=at,
        )
        return at + dt.timedelta(seconds=1)

    shards = active().layout.shards
    whole, alone = [], {shard: [] for shard in range(shards)}
    for run_ in range(runs):
        now = sold(now, f"whole{run_}", run_)
        started = time.perf_counter()
        tick(now=now)
        whole.append(time.perf_counter() - started)
    for run_ in range(runs):
        now = sold(now, f"alone{run_}", runs + run_)
        for shard in alone:
            started = time.perf_counter()
            tick(now=now, shards=[shard])
            alone[shard].append(time.perf_counter() - started)
    tick_seconds = harness.median(whole)
    longest = max(harness.median(seconds) for seconds in alone.values())
    table.add(
        f"tick of 5,000 sales over {CATEGORIES:,} categories, {laid_out} ({shards} shards)",
        f"{tick_seconds:.2f} s = {5000 / tick_seconds:,.0f} sales/s",
        note=f"its longest shard's tick alone: {longest:.3f} s",
    )
    return now


def _slug(n: int) -> str:
    """The slug _CATEGORIES_SQL gives category n."""
    return f"c{n:07d}"


def _category_keys_memory() -> tuple[int, int]:
    """The keys of the categories' boards (the shop's `all` left out: it grows with the products,
    not the categories) and their memory, MEMORY USAGE of each (the Redis is shared: its
    used_memory moves with every other user's keys)."""
    from rankings.engine import store

    r = store.patient()
    keys = [k for k in r.scan_iter(match=f"{store.prefix()}:v*:*:c*", count=5000) if not k.endswith(b":all")]
    memory = 0
    for first in range(0, len(keys), 10_000):
        pipe = r.pipeline(transaction=False)
        for key in keys[first : first + 10_000]:
            pipe.memory_usage(key, samples=0)
        memory += sum(pipe.execute())
    return len(keys), memory


def _million_categories(table: harness.Table, runs: int) -> None:
    from django.db import connection
    from django.utils import timezone

    from rankings.conf import MAX_DEPTH
    from rankings.engine.tick import tick
    from rankings.ingest.sales import sales_ingest

    _fresh()  # `all` whole: a split version of an earlier run is not kept
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(_CATEGORIES_SQL, {"n": CATEGORIES})
        cursor.execute("ANALYZE catalogue_category, catalogue_product, catalogue_product_categories")
    print(
        f"  wrote {CATEGORIES:,} categories, {5 * CATEGORIES:,} products in {time.perf_counter() - started:.0f} s"
    )
    forget_all()
    now = timezone.now().replace(microsecond=0)
    tick(now=now)
    # One sale per product of SAMPLED categories, with the catalogue's categories (left out of the event).
    events = [
        {"id": f"m{p}", "ts": now.isoformat(), "productId": f"q{p}", "qty": 1 + p % 3}
        for p in range(5 * SAMPLED)
    ]
    for first in range(0, len(events), 5000):
        sales_ingest(events=events[first : first + 5000], now=now)
    now += dt.timedelta(seconds=1)
    tick(now=now)
    keys, memory = _category_keys_memory()
    table.add(
        f"{CATEGORIES:,} categories of 5 products: Redis memory per category",
        f"{memory / SAMPLED:,.0f} bytes in {keys / SAMPLED:.0f} keys (measured over {SAMPLED:,} categories)",
        note=f"projected for {CATEGORIES:,}: {memory / SAMPLED * CATEGORIES / 2**30:.2f} GiB",
    )
    now = _spread_ticks(table, runs, now, "whole", "`all` whole")
    with harness.services(worker=False) as url:
        for label, path in (
            ("home page, first page", "/"),
            # Past MAX_DEPTH rows a list is paged by cursor: the page after the middle category.
            ("home page, a page deep in the list", f"/?after={_slug(CATEGORIES // 2)}"),
            ("/v1/categories, first page", "/v1/categories"),
            ("/v1/categories, deepest offset", f"/v1/categories?offset={MAX_DEPTH}"),
            ("/v1/categories, a page deep in the list", f"/v1/categories?after={_slug(CATEGORIES - 200)}"),
        ):
            urllib.request.urlopen(url + path).read()  # each worker's first read loads what it caches
            urllib.request.urlopen(url + path).read()
            latencies = []
            for _ in range(50):
                started = time.perf_counter()
                urllib.request.urlopen(url + path).read()
                latencies.append((time.perf_counter() - started) * 1000)
            table.add(
                f"{CATEGORIES:,} categories: {label}",
                f"p50 {statistics.median(latencies):.1f} ms, p99 {harness.percentile(latencies, 99):.1f} ms",
            )
    _all_split(SPREAD_SPLIT)  # then `all` split, each part a shard of its own
    now = _spread_ticks(table, runs, now, "split", f"`all` split {SPREAD_SPLIT} ways")
    _all_split(SPREAD_WIDE, shards=SPREAD_WIDE)
    _spread_ticks(table, runs, now, "wide", f"{SPREAD_WIDE} hashed shards, `all` split {SPREAD_WIDE} ways")
    _fresh()


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    if MEMBERS:
        print(f"scale: one board of {MEMBERS:,} products, whole then split…", flush=True)
        _big_boards(table, runs)
    if CATEGORIES:
        print(f"scale: {CATEGORIES:,} categories…", flush=True)
        _million_categories(table, runs)
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

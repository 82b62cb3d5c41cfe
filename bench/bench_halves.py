"""One client's batches of sales stored in two halves side by side, beside whole (not in `make bench`).

One client waits on each side in turn: Python checks and resolves a batch, then PostgreSQL stores it,
and the machine's second core idles. This trial splits each batch of 1,000 sales in two by a hash of
the event id, so that an id's events stay together, and stores the halves side by side through
`sales_ingest` on two threads, each with a database connection of its own. One half's Python then
runs while the other's statements run in PostgreSQL.

The two ways take turns, each on fresh batches, and are set against the COPY floor of `--only ingest`,
measured in the same round. What the halves would change besides is in docs/architecture.md ("One
client's batch in two halves, tried").
"""

import random
import time
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor

from bench import harness
from bench.bench_ingest import _copy_floor, _events

BATCHES = 20
BATCH = 1000


def _whole(batches: list[list[dict]]) -> float:
    from rankings.ingest.sales import sales_ingest

    started = time.perf_counter()
    for events in batches:
        if sales_ingest(events=events, source="bench").accepted != len(events):
            raise RuntimeError("a batch was not accepted whole")
    return len(batches) * BATCH / (time.perf_counter() - started)


def _halves(batches: list[list[dict]], pool: ThreadPoolExecutor) -> float:
    from rankings.ingest.sales import sales_ingest

    split = []
    for events in batches:
        halves: tuple[list[dict], list[dict]] = ([], [])
        for event in events:
            halves[zlib.crc32(event["id"].encode()) & 1].append(event)
        split.append(halves)
    started = time.perf_counter()
    for halves in split:
        stored = pool.map(lambda half: sales_ingest(events=half, source="bench"), halves)
        if sum(result.accepted for result in stored) != BATCH:
            raise RuntimeError("a batch was not accepted whole")
    return len(batches) * BATCH / (time.perf_counter() - started)


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    from django.core.management import call_command

    table = table or harness.Table()
    harness.reset()
    call_command("seed_demo", "--sales", "0", "--no-progress", verbosity=0)
    rng = random.Random(0)
    rates: dict[str, list[float]] = {"whole": [], "halves": []}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(runs):
            floor = _copy_floor()
            batches = [_events(BATCH, uuid.uuid4().hex[:12], rng) for _ in range(BATCHES)]
            rates["whole"].append(_whole(batches) / floor)
            batches = [_events(BATCH, uuid.uuid4().hex[:12], rng) for _ in range(BATCHES)]
            rates["halves"].append(_halves(batches, pool) / floor)
    whole, halves = harness.median(rates["whole"]), harness.median(rates["halves"])
    table.add(
        "sales_ingest, batches of 1,000 in two halves side by side, one client",
        f"{halves:.3f}x of the COPY floor",
        f"whole: {whole:.3f}x",
        f"{halves / whole:.2f}x",
        "medians of the ratios, each against the floor of its round",
    )
    harness.reset()
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

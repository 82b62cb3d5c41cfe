"""One client's batches of sales stored in two halves side by side, beside whole (not in `make bench`).

One client waits on each side in turn: Python checks and resolves a batch, then PostgreSQL stores it,
and the machine's second core idles. This trial splits each batch of 1,000 sales in two by a hash of
the event id, so that an id's events stay together, and stores the halves side by side through
`sales_ingest` on two threads, each with a database connection of its own. One half's Python then
runs while the other's statements run in PostgreSQL.

Each round measures the COPY floor of `--only ingest`, then both ways on fresh batches, which of them
goes first alternating from round to round. The collector is paused over both, as a request pauses it
over its own batch (one thread's batch would otherwise turn it on while the other's runs), and both
threads' connections are open before the clock starts. What the halves would change besides is in
docs/architecture.md ("One client's batch in two halves, tried").
"""

import gc
import random
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from bench import harness
from bench.bench_ingest import _copy_floor, _events, bench_service

BATCHES = 20
BATCH = 1000


def _halves(pool: ThreadPoolExecutor, rng: random.Random) -> float:
    """Sales/s of BATCHES fresh batches of BATCH, each stored in two halves side by side on the pool's
    two threads (made first, as bench_ingest.bench_service makes its batches before its clock)."""
    from rankings.ingest.sales import sales_ingest

    split = []
    for _ in range(BATCHES):
        halves: tuple[list[dict], list[dict]] = ([], [])
        for event in _events(BATCH, uuid.uuid4().hex[:12], rng):
            halves[zlib.crc32(event["id"].encode()) & 1].append(event)
        split.append(halves)
    started = time.perf_counter()
    for halves in split:
        stored = pool.map(lambda half: sales_ingest(events=half, source="bench"), halves)
        if sum(result.accepted for result in stored) != BATCH:
            raise RuntimeError("a batch was not accepted whole")
    return BATCHES * BATCH / (time.perf_counter() - started)


def _on_both_threads(pool: ThreadPoolExecutor, step: Callable[[], None]) -> None:
    """`step` once on each of the pool's two threads (each waits for the other before it is done)."""
    both = threading.Barrier(2)

    def once(_: int) -> None:
        step()
        both.wait()

    list(pool.map(once, range(2)))


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    from django.core.management import call_command
    from django.db import connection

    table = table or harness.Table()
    harness.reset()
    call_command("seed_demo", "--sales", "0", "--no-progress", verbosity=0)
    rng = random.Random(0)
    rates: dict[str, list[float]] = {"whole": [], "halves": []}
    with ThreadPoolExecutor(max_workers=2) as pool:
        _on_both_threads(pool, lambda: connection.ensure_connection())
        for round_ in range(runs):
            floor = _copy_floor()
            ways: list[tuple[str, Callable[[], float]]] = [
                (
                    "whole",
                    lambda: BATCHES * BATCH / bench_service(batches=BATCHES, batch_size=BATCH, rng=rng),
                ),
                ("halves", lambda: _halves(pool, rng)),
            ]
            for way, stored in ways if round_ % 2 == 0 else reversed(ways):
                gc.disable()
                try:
                    rates[way].append(stored() / floor)
                finally:
                    gc.enable()
                print(
                    f"  round {round_ + 1}, {way}: {rates[way][-1]:.3f}x of {floor:,.0f} rows/s", flush=True
                )
        _on_both_threads(pool, lambda: connection.close())
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

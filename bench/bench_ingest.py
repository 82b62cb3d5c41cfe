"""How fast sale events get in: POST /v1/sales against a running server, import_sales, sales_ingest.

Each measurement is repeated (default 3 runs) and the median is reported, so
one slow run (a checkpoint, another process) does not decide the figure.
Every run sends fresh event ids ("bench-…"), of the demo catalogue's products
(p0…) and categories (cat0…), dated within the last day: they are real sales
in the configured database, counted by the next ticks like any others.

    python -m bench.bench_ingest [--url http://127.0.0.1:8000] [--token KEY] [--runs 3]

Without --token, a user "bench" with permission rankings.add_sale and a token
is created in the configured database (the one the server must be using).
"""

import argparse
import functools
import http.client
import json
import os
import random
import statistics
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path


def _django_setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "salesrank_site.settings")
    import django

    django.setup()


def _events(count: int, tag: str, rng: random.Random) -> list[dict]:
    now = int(time.time())
    events = []
    for i in range(count):
        categories = [f"cat{0 if rng.random() < 0.4 else rng.randrange(1, 50)}"]
        if rng.random() < 0.2:
            categories.append(f"cat{rng.randrange(1, 50)}")
        qty = rng.choice((1, 1, 1, 2, 3))
        events.append(
            {
                "id": f"bench-{tag}-{i}",
                "ts": now - rng.randrange(86400),
                "productId": f"p{min(int(rng.paretovariate(0.6)) - 1, 19999)}",
                "categories": categories,
                "qty": qty,
                "amount": f"{qty * rng.randrange(199, 9999) / 100:.2f}",
            }
        )
    return events


def _bench_token() -> str:
    from rankings.operations.tokens import ingest_token_create

    return ingest_token_create(username="bench", permissions=["add_sale"])


def sales_bodies(*, batches: int, batch_size: int, rng) -> list[bytes]:
    """`batches` request bodies of `batch_size` new sales each."""
    return [
        json.dumps({"events": _events(batch_size, f"{uuid.uuid4().hex[:12]}", rng)}).encode()
        for _ in range(batches)
    ]


def http_send(*, url: str, token: str, bodies: list[bytes], batch_size: int) -> float:
    """Seconds to POST the bodies to /v1/sales one after another, on one connection, each accepted whole."""
    parts = urllib.parse.urlsplit(url)
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=60)
    try:
        start = time.perf_counter()
        for body in bodies:
            connection.request("POST", parts.path.rstrip("/") + "/v1/sales", body, headers)
            reply = connection.getresponse()
            answer = reply.read()
            if reply.status != 200:
                raise RuntimeError(f"POST /v1/sales: {reply.status} {answer[:200]!r}")
            if json.loads(answer)["accepted"] != batch_size:
                raise RuntimeError(f"POST /v1/sales did not accept the whole batch: {answer[:300]!r}")
        return time.perf_counter() - start
    finally:
        connection.close()


def bench_http(*, url: str, token: str, batches: int, batch_size: int, rng) -> float:
    """Seconds to POST `batches` batches of `batch_size` events, one after another, on one connection."""
    bodies = sales_bodies(batches=batches, batch_size=batch_size, rng=rng)
    return http_send(url=url, token=token, bodies=bodies, batch_size=batch_size)


def bench_import(*, events: int, rng) -> float:
    """Seconds for import_sales' service to ingest a JSON-lines file of `events` events."""
    from rankings.ingest.imports import sales_import

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "sales.jsonl"
        with path.open("w") as f:
            for event in _events(events, uuid.uuid4().hex[:12], rng):
                f.write(json.dumps(event) + "\n")
        start = time.perf_counter()
        report = sales_import(path=path)
        elapsed = time.perf_counter() - start
    if report.accepted != events:
        raise RuntimeError(f"import_sales: {report.summary()}")
    return elapsed


def bench_service(*, batches: int, batch_size: int, rng) -> float:
    """Seconds for sales_ingest to take `batches` batches (validation, duplicates check, storage)."""
    from rankings.ingest.sales import sales_ingest

    prepared = [_events(batch_size, uuid.uuid4().hex[:12], rng) for _ in range(batches)]
    start = time.perf_counter()
    for events in prepared:
        result = sales_ingest(events=events, source="bench")
        if result.accepted != batch_size:
            raise RuntimeError(f"sales_ingest did not accept the whole batch: {result.rejected[:3]}")
    return time.perf_counter() - start


def _server_up(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    try:
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=2)
        connection.request("GET", parts.path.rstrip("/") + "/v1/schema")
        connection.getresponse().read()
        connection.close()
        return True
    except OSError:
        return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_ingest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="base URL of the running server")
    parser.add_argument("--token", help="API token of a user with rankings.add_sale (default: user 'bench')")
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement; the median is reported")
    parser.add_argument("--http-batches", type=int, default=20, help="batches of 1,000 events per HTTP run")
    parser.add_argument("--import-events", type=int, default=50_000, help="events in the imported file")
    parser.add_argument(
        "--service-batches", type=int, default=10, help="batches of 5,000 per sales_ingest run"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed of the generated events")
    args = parser.parse_args(argv)
    _django_setup()
    rng = random.Random(args.seed)

    rows = []  # (what, events per run, seconds per run)

    if _server_up(args.url):
        token = args.token or _bench_token()
        seconds = [
            bench_http(url=args.url, token=token, batches=args.http_batches, batch_size=1000, rng=rng)
            for _ in range(args.runs)
        ]
        rows.append((f"POST /v1/sales, batches of 1,000 ({args.url})", args.http_batches * 1000, seconds))
    else:
        print(f"POST /v1/sales: skipped, no server at {args.url} (start one with `make run`)")

    seconds = [bench_import(events=args.import_events, rng=rng) for _ in range(args.runs)]
    rows.append(("import_sales, a JSON-lines file", args.import_events, seconds))

    seconds = [
        bench_service(batches=args.service_batches, batch_size=5000, rng=rng) for _ in range(args.runs)
    ]
    rows.append(("sales_ingest, batches of 5,000", args.service_batches * 5000, seconds))

    print(f"\ningest rates, median of {args.runs} runs")
    print(f"{'path':<58} {'events':>9} {'median s':>9} {'events/s':>10}   runs (events/s)")
    for what, events, runs in rows:
        median = statistics.median(runs)
        each = " ".join(f"{events / s:,.0f}" for s in runs)
        print(f"{what:<58} {events:>9,} {median:>9.2f} {events / median:>10,.0f}   {each}")


def bench_http_clients(*, url: str, token: str, clients: int, batches: int, batch_size: int, rng) -> float:
    """Events/s of `clients` clients each POSTing `batches` batches at once, each on its own connection,
    from the moment they start together (their bodies made before)."""
    from bench import harness

    bodies = [sales_bodies(batches=batches, batch_size=batch_size, rng=rng) for _ in range(clients)]
    seconds = harness.at_once(
        [
            functools.partial(http_send, url=url, token=token, bodies=mine, batch_size=batch_size)
            for mine in bodies
        ]
    )
    return clients * batches * batch_size / seconds


def run(table, runs: int = 3):
    """For `make bench`: the ingest rates, POST through gunicorn started on the benchmark database,
    each against the floor measured in the same run."""
    from bench import harness

    harness.reset()
    from django.core.management import call_command

    call_command("seed_demo", "--sales", "0", "--no-progress", verbosity=0)
    rng = random.Random(0)
    # A worker per client of the four-client figure: what limits it is then the service, not a queue.
    with harness.services(worker=False, web_workers=4) as url:
        token = harness.ingest_token()
        http_rate = 20_000 / statistics.median(
            [bench_http(url=url, token=token, batches=20, batch_size=1000, rng=rng) for _ in range(runs)]
        )
        clients_rate = statistics.median(
            [
                bench_http_clients(url=url, token=token, clients=4, batches=10, batch_size=1000, rng=rng)
                for _ in range(runs)
            ]
        )
    import_rate = 50_000 / statistics.median([bench_import(events=50_000, rng=rng) for _ in range(runs)])
    service_rate = 50_000 / statistics.median(
        [bench_service(batches=10, batch_size=5000, rng=rng) for _ in range(runs)]
    )
    copy_rate = statistics.median([_copy_floor() for _ in range(runs)])
    floor = f"COPY + INSERT ON CONFLICT {copy_rate:,.0f} rows/s"
    for what, rate in (
        ("POST /v1/sales, batches of 1,000, one client", http_rate),
        ("POST /v1/sales, batches of 1,000, four clients", clients_rate),
        ("import_sales, JSON lines", import_rate),
        ("sales_ingest, batches of 5,000", service_rate),
    ):
        table.add(what, f"{rate:,.0f} events/s", floor, f"{rate / copy_rate:.2f}x")
    return table


def _copy_floor(rows: int = 200_000) -> float:
    """Rows/s of the plain bulk insert the ingest path builds on: COPY to a temporary table, then
    INSERT … ON CONFLICT DO NOTHING into a table with a unique key."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMPORARY TABLE floor_target (id varchar(128) PRIMARY KEY, v bigint) ON COMMIT DROP"
        )
        cursor.execute("CREATE TEMPORARY TABLE floor_stage (id varchar(128), v bigint) ON COMMIT DROP")
        prefix = uuid.uuid4().hex
        start = time.perf_counter()
        with cursor.copy("COPY floor_stage (id, v) FROM STDIN") as copy:
            for i in range(rows):
                copy.write_row((f"{prefix}-{i}", i))
        cursor.execute("INSERT INTO floor_target SELECT * FROM floor_stage ON CONFLICT DO NOTHING")
        return rows / (time.perf_counter() - start)


if __name__ == "__main__":
    main()

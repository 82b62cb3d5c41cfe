"""Rank alerts: what judging an hour costs at scale, and how fast firings are delivered.

Judging: the scale benchmark's 20,000 categories of 5 products (bench_history's sales over two days),
the active version's snapshots of every hour from them (history_record), then 100,000 alerts over
the categories (5 each: a product of the category, either window, any metric, any rule), and the
hour judged on every shard as the tick that records it judges it (rankings/engine/alerts.py
`alerts_judge`). The same with 200 categories of 1,000 products each (boards as deep as the
snapshots), 100,000 alerts again. Each figure: milliseconds for the hour, all shards together.

Delivery: 2,000 firings POSTed to local receivers (http.server answering 204), through
`alerts_send` as the worker runs it: to one host (ALERTS_HOST_CONCURRENCY of them at once) and
spread over eight hosts (127.0.0.1 to 127.0.0.8).

    python -m bench --only alerts           (BENCH_ALERTS to resize the 100,000)
"""

import datetime as dt
import os
import random
import subprocess
import sys
import time

from bench import harness
from bench.bench_history import _seed

HOUR = 3600
ALERTS = int(os.environ.get("BENCH_ALERTS", "100000"))
FIRINGS = 2000
RULES = ("enters", "leaves", "climbs", "falls")
METRICS = ("units", "revenue", "views", "wishes")

_DEEP_PRODUCTS_SQL = """
INSERT INTO catalogue_product (product_id, name, price_cents, is_placeholder)
SELECT 'd' || g, 'Product ' || g, 199, false FROM generate_series(0, %(n)s - 1) AS g
"""
# Product d<1000c+p> of category k<c> sells 1 + p % 97 units at an hour of the last day.
_DEEP_SALES_SQL = """
INSERT INTO rankings_sale (event_id, ts, product_id, categories, qty, amount_cents, counted_at, received_at, digest)
SELECT 'k' || c || '-' || p, t, 'd' || (1000 * c + p), ARRAY['k' || c], 1 + p %% 97, 199 * (1 + p %% 97), t, t, ''
FROM generate_series(0, %(categories)s - 1) AS c CROSS JOIN generate_series(0, 999) AS p
CROSS JOIN LATERAL (SELECT to_timestamp(%(clock)s - 3600 * ((c + p) %% 24) - 600) AS t) AS s
"""


# The two hours judged written again, each hour's rows together, as the ticks write them (a rebuild's
# history writes a category's hours together, so that a board's rows of one hour lie apart).
_AS_TICKED = """
CREATE TEMPORARY TABLE judged_hours AS SELECT * FROM rankings_snapshot WHERE at >= to_timestamp(%(first)s);
DELETE FROM rankings_snapshot WHERE at >= to_timestamp(%(first)s);
INSERT INTO rankings_snapshot (version, at, "window", metric, category, products)
SELECT version, at, "window", metric, category, products FROM judged_hours ORDER BY at, category, "window", metric;
DROP TABLE judged_hours;
"""


def _history(clock: int) -> int:
    """The active version's snapshots of every hour up to `clock` from the sales, the last two laid
    out as the ticks lay them out; its number."""
    from django.db import connection

    from rankings.engine.history import history_record
    from rankings.engine.shards import active
    from rankings.engine.tree import EMPTY

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE rankings_sale")
    version, _, layout = active()
    history_record(version=version, tree=EMPTY, layout=layout, clock=dt.datetime.fromtimestamp(clock, dt.UTC))
    with connection.cursor() as cursor:
        cursor.execute(_AS_TICKED, {"first": clock - HOUR})
        cursor.execute("VACUUM ANALYZE rankings_snapshot")
    return version


def _alerts(boards: list[tuple[str, list[str]]], count: int) -> None:
    """`count` alerts over `boards` ((category, its products)), written in one statement."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from rankings.engine.shards import active

    layout = active().layout
    user, _ = get_user_model().objects.get_or_create(username="bench-alerts")
    rows = []
    for i in range(count):
        category, products = boards[i % len(boards)]
        rows.append(
            (
                random.choice(products), category, random.choice(("1d", "7d")), random.choice(METRICS),
                random.choice(RULES), random.randint(1, 5), layout.shard_of(category),
            )
        )  # fmt: skip
    columns = list(zip(*rows, strict=True))
    with connection.cursor() as cursor:
        cursor.execute(
            'INSERT INTO rankings_alert (user_id, product_id, category, "window", metric, rule, number, url, host,'
            " secret, shard, created_at)"
            " SELECT %s, p, c, w, m, r, n, 'https://hooks.example.com/', 'hooks.example.com', 'whsec_x', s, now()"
            " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::int[], %s::int[])"
            " AS a(p, c, w, m, r, n, s)",
            [user.id, *[list(column) for column in columns]],
        )
        cursor.execute("ANALYZE rankings_alert")


def _judge(version: int, hour: int) -> tuple[float, int]:
    """(ms, firings) of judging `hour` on every shard, each in its own transaction, rolled back."""
    from django.db import transaction

    from rankings.engine.alerts import alerts_judge
    from rankings.engine.shards import active

    layout = active().layout
    elapsed, fired = 0.0, 0
    for shard in range(layout.shards):
        with transaction.atomic():
            started = time.perf_counter()
            fired += alerts_judge(shard=shard, version=version, hours=[hour])
            elapsed += time.perf_counter() - started
            transaction.set_rollback(True)
    return elapsed * 1000, fired


def _judging(table: harness.Table, runs: int, label: str, seed, boards_of) -> None:
    from django.db import connection

    clock = int(time.time()) // HOUR * HOUR
    harness.reset()
    seed(clock)
    version = _history(clock)
    _alerts(boards_of(), ALERTS)
    figures = [_judge(version, clock) for _ in range(runs)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM rankings_snapshot WHERE at = to_timestamp(%s)", [clock])
        (boards,) = cursor.fetchone()
    table.add(
        f"alerts judged at the hour, {ALERTS:,} alerts, {label}",
        f"{harness.median([ms for ms, _ in figures]):,.0f} ms",
        note=f"{figures[-1][1]:,} fired; {boards:,} boards snapshotted that hour",
    )


def _shallow(clock: int) -> None:
    _seed(20_000, 2, clock)


def _deep(clock: int) -> None:
    from django.db import connection

    from rankings.engine.partitions import sale_partitions_ensure

    sale_partitions_ensure(
        [dt.datetime.fromtimestamp(clock - 86400, dt.UTC), dt.datetime.fromtimestamp(clock, dt.UTC)]
    )
    with connection.cursor() as cursor:
        cursor.execute(_DEEP_PRODUCTS_SQL, {"n": 200 * 1000})
        cursor.execute(_DEEP_SALES_SQL, {"categories": 200, "clock": clock})


# The receivers, in a process of their own (not competing with the sender's threads for its GIL):
# one ThreadingHTTPServer per address given, each answering every POST with 204; prints the ports.
_RECEIVERS = """
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Answer(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

servers = [ThreadingHTTPServer((address, 0), Answer) for address in sys.argv[1:]]
for server in servers:
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
print(" ".join(str(server.server_address[1]) for server in servers), flush=True)
sys.stdin.read()
"""


def _delivery(table: harness.Table, runs: int, hosts: int) -> None:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import override_settings

    from rankings.models import Alert, AlertFiring
    from rankings.operations.webhooks import alerts_send, secret_new

    addresses = [f"127.0.0.{n + 1}" for n in range(hosts)]
    receivers = subprocess.Popen(
        [sys.executable, "-c", _RECEIVERS, *addresses],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    ports = [int(port) for port in receivers.stdout.readline().split()]  # type: ignore[union-attr]
    rates = []
    try:
        with override_settings(RANKINGS={**settings.RANKINGS, "ALERTS_ALLOW_PRIVATE": True}):
            for _ in range(runs):
                harness.reset()
                user, _ = get_user_model().objects.get_or_create(username="bench-alerts")
                alerts = [
                    Alert.objects.create(
                        user=user, product_id="p1", category="toys", window="1d", metric="units", rule="enters",
                        number=1, url=f"http://{address}:{port}/hook", host=address, secret=secret_new(), shard=0,
                    )
                    for address, port in zip(addresses, ports, strict=True)
                ]  # fmt: skip
                at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
                AlertFiring.objects.bulk_create(
                    AlertFiring(alert=alerts[i % hosts], at=at + dt.timedelta(hours=i), kind="rank.entered",
                                rank=1, next_attempt_at=at)
                    for i in range(FIRINGS)
                )  # fmt: skip
                report = alerts_send(now=at + dt.timedelta(days=400))
                assert report.delivered == FIRINGS, report
                rates.append(FIRINGS / report.seconds)
    finally:
        receivers.communicate("")
    table.add(
        f"alert deliveries to {hosts} local receiver{'s' * (hosts > 1)}",
        f"{harness.median(rates):,.0f} /s",
        note=f"{FIRINGS:,} firings, signed, each attempt recorded; the receivers in a process of their own",
    )


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    random.seed(30)
    print("alerts: judging at 20,000 categories…", flush=True)
    _judging(
        table, runs, "20,000 categories of 5 products", _shallow,
        lambda: [(f"h{c}", [f"q{5 * c + p}" for p in range(5)]) for c in range(20_000)],
    )  # fmt: skip
    print("alerts: judging boards 1,000 deep…", flush=True)
    _judging(
        table, runs, "200 categories of 1,000 products", _deep,
        lambda: [(f"k{c}", [f"d{1000 * c + p}" for p in range(1000)]) for c in range(200)],
    )  # fmt: skip
    print("alerts: deliveries…", flush=True)
    _delivery(table, runs, hosts=1)
    _delivery(table, runs, hosts=8)
    harness.reset()
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

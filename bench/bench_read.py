"""The read path under load: /top and /rank through gunicorn, against two floors measured in the same run.

Floors: a bare Django view (same settings and middleware) that returns a
constant JSON body of the same size, and redis-benchmark on the Redis command
each read needs. Load: wrk on loopback, 2 threads, 16 connections, 10 s.
"""

import os
import re
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from bench import harness
from tests import processes

FLOOR_PORT = harness.PORT + 1
WRK = ["wrk", "-t2", "-c16", "-d10s", "--latency"]
_RANDOM_RANK = """
math.randomseed(os.time())
request = function()
    return wrk.format("GET", "/v1/products/p" .. math.random(0, 19999) .. "/rank?category=all")
end
"""


def _wrk(url: str, script: str | None = None) -> tuple[float, float, float]:
    """Requests/s, p50 and p99 latency (ms) of one wrk run."""
    command = [*WRK]
    if script:
        command += ["-s", script]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return rate, _latency(out, "50%"), _latency(out, "99%")


def _latency(out: str, label: str) -> float:
    value, unit = re.search(rf"{re.escape(label)}\s+([\d.]+)(us|ms|s)", out).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def _redis_benchmark(*command: str) -> float:
    """Requests/s of redis-benchmark running `command` on the boards' server and database, read from
    REDIS_URL as redis-py reads it (host and port or socket, database, user, password, TLS)."""
    from django.conf import settings
    from redis.connection import SSLConnection, parse_url

    given = parse_url(settings.REDIS_URL)
    server = (
        ["-s", given["path"]]
        if "path" in given
        else ["-h", given.get("host", "127.0.0.1"), "-p", str(given.get("port", 6379))]
    )
    if given.get("connection_class") is SSLConnection:
        server.append("--tls")
    if given.get("username"):
        server += ["--user", given["username"]]
    if given.get("password"):
        server += ["-a", given["password"]]
    out = subprocess.run(
        [
            "redis-benchmark",
            *server,
            "--dbnum",  # the boards' database, where _demo_board's keys are
            str(given.get("db", 0)),
            "-c",
            "16",
            "-n",
            "200000",
            "-q",
            *command,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(re.findall(r"([\d.]+) requests per second", out)[-1])


def _median_run(url: str, runs: int, script: str | None = None) -> tuple[float, float, float]:
    results = [_wrk(url, script) for _ in range(runs)]
    return tuple(harness.median([r[i] for r in results]) for i in range(3))


def _floor_server(body_path: str, logs: str) -> processes.Process:
    """The constant-body view under gunicorn, ready (its URL answers 200)."""
    env = {**os.environ, **harness.environment(), "BENCH_FLOOR_BODY": body_path}
    return processes.web(
        logs, env, name="floor", app="bench.floor:application", port=FLOOR_PORT, ready_path="/floor"
    )


def _demo_board() -> tuple[str, str, str]:
    """The demo data ticked once; (board key, blob key, a member ranked 41st) of cat0's 7d units board."""
    from django.utils import timezone

    from bench.bench_engine import _seed_demo
    from rankings.engine import store
    from rankings.engine.shards import active, shard_of
    from rankings.engine.tick import tick

    harness.reset()
    _seed_demo()
    tick(now=timezone.now())
    version = store.served_version(fresh=True)
    shard = shard_of("cat0", active().layout)
    board = store.board_key(version, shard, "7d", "units", "cat0")
    blob = store.blob_key(version, shard, "7d", "units", "cat0")
    return board, blob, store.fast().zrange(board, 40, 40)[0].decode()


def _floors(url: str, member: str, tmp: str, runs: int) -> dict:
    """wrk against the constant view, once with /top's body and once with /rank's."""
    floors = {}
    for name, path in (
        ("top", "/v1/categories/cat0/top"),
        ("rank", f"/v1/products/{member}/rank?category=cat0"),
    ):
        body = Path(tmp) / f"{name}.json"
        body.write_bytes(urllib.request.urlopen(url + path).read())
        server = _floor_server(str(body), tmp)
        try:
            floors[name] = _median_run(f"http://127.0.0.1:{FLOOR_PORT}/floor", runs)
        finally:
            server.stop()
    return floors


def _reads(url: str, member: str, tmp: str, runs: int) -> dict:
    script = Path(tmp) / "random_rank.lua"
    script.write_text(_RANDOM_RANK)
    return {
        "top": _median_run(f"{url}/v1/categories/cat0/top", runs),
        "top-deep": _median_run(f"{url}/v1/categories/cat0/top?offset=200&limit=50", runs),
        "rank": _median_run(f"{url}/v1/products/{member}/rank?category=cat0", runs),
        "rank-random": _median_run(f"{url}/v1/products/p0/rank?category=all", runs, str(script)),
    }


# (label, measured read, its floor, goal, the Redis command it needs)
_ROWS = [
    ("/top first page (blob)", "top", "top", "goal ≥ 0.85x, p99 < 10 ms", "GET blob"),
    ("/top ranks 201-250 (ZRANGE)", "top-deep", "top", "", "ZRANGE 50"),
    ("/rank one product", "rank", "rank", "goal ≥ 0.75x, p99 < 10 ms", "ZRANK"),
    ("/rank random products of 20,000", "rank-random", "rank", "goal ≥ 0.75x, p99 < 10 ms", "ZRANK"),
]


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    table = table or harness.Table()
    print("read: demo data, then wrk against gunicorn (2 sync workers)…", flush=True)
    board, blob, member = _demo_board()
    with harness.services(worker=False) as url, tempfile.TemporaryDirectory() as tmp:
        floors = _floors(url, member, tmp, runs)
        measured = _reads(url, member, tmp, runs)
    redis_rates = {
        "GET blob": _redis_benchmark("GET", blob),
        "ZRANGE 50": _redis_benchmark("ZRANGE", board, "200", "249", "WITHSCORES"),
        "ZRANK": _redis_benchmark("ZRANK", board, member),
    }
    for label, key, floor_key, goal, command in _ROWS:
        rate, p50, p99 = measured[key]
        floor_rate, _, floor_p99 = floors[floor_key]
        table.add(
            label,
            f"{rate:,.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms",
            f"constant view {floor_rate:,.0f} req/s (p99 {floor_p99:.1f} ms); "
            f"redis-benchmark {command} {redis_rates[command]:,.0f}/s",
            f"{rate / floor_rate:.2f}x",
            goal,
        )
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())

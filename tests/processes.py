"""Start real processes for tests and benchmarks: gunicorn, Celery worker and beat, redis-server, commands.

Every service writes its output to a log file of its own and is waited on until
it answers (an HTTP 200, a Redis PONG, Celery's own "ready" line), so a test's
deadlines measure the behaviour under test rather than process start-up. A wait
that runs out, or a process that exits while it is waited on, raises
`ProcessWaitFailed` with the last output of the processes involved: a test never
goes on against a service that did not come up.
"""

import contextlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from rankings.conf import rankings_settings

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
# Long enough for gunicorn or a Celery worker to import Django on a loaded 2-core machine.
READY_SECONDS = 60  # seconds
# Long enough for a warm shutdown to let a running tick finish.
STOP_SECONDS = 20  # seconds
# How often a wait asks its condition again.
POLL_SECONDS = 0.02  # seconds


class ProcessWaitFailed(AssertionError):
    """A wait on a process ran out or the process exited meanwhile; the message holds its output."""


@dataclass
class Process:
    """One started process: its name, what it is (web, worker, beat, redis, ...), its log file."""

    name: str
    kind: str
    popen: subprocess.Popen
    log: Path
    ready: Callable[["Process"], bool] | None = None
    address: str = ""  # host:port for a server, "" otherwise

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def url(self) -> str:
        scheme = "redis" if self.kind == "redis" else "http"
        return f"{scheme}://{self.address}" + ("/0" if self.kind == "redis" else "")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self, chars: int = 4000) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-chars:]

    def said(self, text: str) -> bool:
        """Whether the process has written `text` to its output."""
        return self.log.exists() and text in self.log.read_text(errors="replace")

    def lines(self, text: str) -> list[str]:
        """The lines of its output that contain `text`."""
        if not self.log.exists():
            return []
        return [line for line in self.log.read_text(errors="replace").splitlines() if text in line]

    def wait_ready(self, timeout: float = READY_SECONDS) -> "Process":
        if self.ready is not None:
            wait_until(
                lambda: self.ready(self), timeout=timeout, what=f"{self.name} to be ready", watch=[self]
            )
        return self

    def stop(self, timeout: float = STOP_SECONDS) -> int:
        """SIGTERM (a warm shutdown), then SIGKILL if it has not exited after `timeout`; the exit code."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code, once it has exited."""
        return self.popen.wait(timeout)

    def kill(self) -> int:
        """SIGKILL: no chance to clean up."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        return self.popen.wait()

    def describe(self) -> str:
        code = self.popen.poll()
        state = "running" if code is None else f"exited with {code}"
        return f"--- {self.name} ({state}), {self.log}:\n{self.output()}"


def wait_until(
    condition: Callable[[], object],
    *,
    timeout: float,
    what: str,
    watch: Iterable[Process] = (),
    interval: float = POLL_SECONDS,
):
    """The first true value of `condition()`; fails with the watched processes' output if the
    deadline passes or one of them exits first."""
    watch = list(watch)
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        dead = [p for p in watch if not p.alive()]
        if dead:
            raise ProcessWaitFailed(
                f"{dead[0].name} exited while waiting for {what}\n" + "\n".join(p.describe() for p in watch)
            )
        if time.monotonic() > deadline:
            raise ProcessWaitFailed(
                f"timed out after {timeout:g} s waiting for {what}\n" + "\n".join(p.describe() for p in watch)
            )
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A cluster node also listens on its port + 10000 (the cluster bus), so its port must be at most this.
CLUSTER_PORT_MAX = 55535


def free_cluster_port() -> int:
    """A free port whose cluster bus port (10000 higher) is free as well."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20000, CLUSTER_PORT_MAX)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise ProcessWaitFailed("no free pair of ports for a Redis Cluster node")


def start(
    name: str,
    args: list[str],
    *,
    log_dir: Path,
    env: dict,
    kind: str = "",
    ready: Callable[[Process], bool] | None = None,
    address: str = "",
) -> Process:
    """Start `args` in the project's directory with its output in `log_dir/name.log`; does not wait."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    with log.open("ab") as out:
        popen = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Process(name, kind or name, popen, log, ready, address)


# --- readiness ----------------------------------------------------------------------


def answers_200(path: str) -> Callable[[Process], bool]:
    """Ready when GET `path` on the process's address answers 200."""

    def ready(process: Process) -> bool:
        conn = http.client.HTTPConnection(process.address, timeout=2)
        try:
            conn.request("GET", path)
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False  # not listening yet
        finally:
            conn.close()

    return ready


def says(text: str) -> Callable[[Process], bool]:
    """Ready when the process has written `text` to its output."""
    return lambda process: process.said(text)


def pongs(process: Process) -> bool:
    import redis

    try:
        return redis.Redis.from_url(process.url, socket_timeout=1).ping()
    except redis.RedisError:
        return False


# --- the services ---------------------------------------------------------------------


def web(
    log_dir: Path,
    env: dict,
    *,
    name: str = "web",
    workers: int = 2,
    port: int | None = None,
    app: str = "salesrank_site.wsgi",
    ready_path: str = "/v1/categories",
    wait: bool = True,
) -> Process:
    """gunicorn serving `app`; ready when `ready_path` answers 200."""
    address = f"127.0.0.1:{port or free_port()}"
    args = [str(VENV_BIN / "gunicorn"), app, "--bind", address, "--workers", str(workers)]
    process = start(
        name,
        [*args, "--log-level", "warning"],
        log_dir=log_dir,
        env=env,
        kind="web",
        ready=answers_200(ready_path),
        address=address,
    )
    return process.wait_ready() if wait else process


def celery_worker(
    log_dir: Path, env: dict, *, name: str = "worker", args=(), queues=(), wait: bool = True
) -> Process:
    """A Celery worker of one process (pool solo); ready when Celery says it is, after connecting to its broker.

    It consumes `queues` when given, else the default queue and every tick queue of its settings.
    """
    command = [sys.executable, "-m", "celery", "-A", "salesrank_site", "worker", "--pool", "solo"]
    # INFO, because that is the level of Celery's "<name>@<host> ready." line.
    command += ["-n", f"{name}@%h", "--loglevel", "INFO", *args]
    command += ["--queues", ",".join(queues)] if queues else []
    process = start(name, command, log_dir=log_dir, env=env, kind="worker", ready=says(" ready."))
    return process.wait_ready() if wait else process


# Celery's line for each task the beat sends: its count is how many ticks a beat scheduled.
BEAT_SENT = "Scheduler: Sending due task"


def celery_beat(log_dir: Path, env: dict, *, name: str = "beat", wait: bool = True) -> Process:
    """A Celery beat; ready when it has sent its first task (a tick is due at once)."""
    command = [sys.executable, "-m", "celery", "-A", "salesrank_site", "beat", "--loglevel", "INFO"]
    command += ["--schedule", str(Path(log_dir) / f"{name}-schedule")]
    process = start(name, command, log_dir=log_dir, env=env, kind="beat", ready=says(BEAT_SENT))
    return process.wait_ready() if wait else process


def redis_server(
    log_dir: Path, *, name: str = "redis", wait: bool = True, port: int | None = None
) -> Process:
    """A redis-server of its own on a free port (or `port`: another one's, stopped), without
    persistence; ready when it answers PING."""
    port = port or free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = start(
        name,
        command,
        log_dir=log_dir,
        env=dict(os.environ),
        kind="redis",
        ready=pongs,
        address=f"127.0.0.1:{port}",
    )
    return process.wait_ready() if wait else process


# A node that stops answering is declared failed after this long, and its replica takes over.
CLUSTER_NODE_TIMEOUT_MS = 1000  # milliseconds
# Long enough for six nodes to agree on a new cluster's layout on a loaded 2-core machine.
CLUSTER_READY_SECONDS = 60  # seconds


@dataclass
class RedisCluster:
    """A Redis Cluster on loopback ports: its nodes' processes, three primaries with a replica each at first."""

    nodes: list[Process]

    @property
    def url(self) -> str:
        """The URL of one node, as REDIS_URL names a cluster."""
        return self.nodes[0].url

    def node(self, address: str) -> Process:
        return next(n for n in self.nodes if n.address == address)

    def info(self, node: Process) -> dict:
        """CLUSTER INFO of one node; empty when the node does not answer."""
        import redis

        try:
            return redis.Redis.from_url(node.url, socket_timeout=1).execute_command("CLUSTER INFO")
        except redis.RedisError:
            return {}

    def roles(self) -> dict[str, str]:
        """address -> 'master' or 'slave', as each live node sees itself (CLUSTER NODES)."""
        import redis

        out = {}
        for node in self.nodes:
            if not node.alive():
                continue
            try:
                nodes = redis.Redis.from_url(node.url, socket_timeout=1).execute_command("CLUSTER NODES")
            except redis.RedisError:
                continue
            for about in nodes.values():
                if "myself" in about["flags"]:
                    out[node.address] = "master" if "master" in about["flags"] else "slave"
        return out

    def replicas_in_sync(self) -> bool:
        """Whether every live replica has finished its sync with its primary (its link is up)."""
        import redis

        for node in self.nodes:
            if not node.alive():
                continue
            try:
                info = redis.Redis.from_url(node.url, socket_timeout=1).info("replication")
            except redis.RedisError:
                return False
            if info.get("role") == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    def wait_ok(self, timeout: float = CLUSTER_READY_SECONDS) -> None:
        """Until every live node says cluster_state:ok and sees every slot assigned."""

        def ok() -> bool:
            infos = [self.info(n) for n in self.nodes if n.alive()]
            return bool(infos) and all(
                i.get("cluster_state") == "ok" and int(i.get("cluster_slots_ok", 0)) == 16384 for i in infos
            )

        wait_until(ok, timeout=timeout, what="the Redis Cluster to be ok on every node", interval=0.1)

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()


@contextlib.contextmanager
def boards_on(url: str, *, clustered: bool):
    """The boards of this process, and of every process it starts meanwhile, on the Redis at `url`
    (a node of a Redis Cluster when `clustered`); the Django cache and Celery's broker stay on the
    plain Redis they were on. Everything is as before once the block ends."""
    from django.conf import settings

    from rankings.engine import store

    plain = {
        "CACHE_URL": settings.CACHES["default"]["LOCATION"],
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
    }
    before = settings.REDIS_URL, settings.REDIS_CLUSTER
    with mock.patch.dict(os.environ, REDIS_URL=url, REDIS_CLUSTER=str(clustered).lower(), **plain):
        settings.REDIS_URL, settings.REDIS_CLUSTER = url, clustered
        store.reset_clients()
        try:
            yield
        finally:
            settings.REDIS_URL, settings.REDIS_CLUSTER = before
            store.reset_clients()


def redis_cluster(log_dir: Path, *, primaries: int = 3, replicas: int = 1) -> RedisCluster:
    """A Redis Cluster of its own on free loopback ports, without persistence, ready (cluster_state:ok
    on every node). A node's failure stops only its own slots (cluster-require-full-coverage no)."""
    log_dir = Path(log_dir)
    nodes = []
    for n in range(primaries * (1 + replicas)):
        port = free_cluster_port()
        command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        command += ["--appendonly", "no", "--cluster-enabled", "yes"]
        command += ["--cluster-config-file", str(log_dir / f"cluster-node-{port}.conf")]
        command += ["--cluster-node-timeout", str(CLUSTER_NODE_TIMEOUT_MS)]
        command += ["--cluster-require-full-coverage", "no", "--dir", str(log_dir)]
        # A replica's first sync starts at once rather than after the default 5 s wait for others.
        command += ["--repl-diskless-sync-delay", "0"]
        address = f"127.0.0.1:{port}"
        nodes.append(
            start(
                f"redis-node-{n}",
                command,
                log_dir=log_dir,
                env=dict(os.environ),
                kind="redis",
                ready=pongs,
                address=address,
            )
        )
    cluster = RedisCluster(nodes)
    try:
        wait_all_ready(nodes)
        create = ["redis-cli", "--cluster", "create", *(n.address for n in nodes)]
        create += ["--cluster-replicas", str(replicas), "--cluster-yes"]
        done = subprocess.run(create, capture_output=True, text=True, timeout=CLUSTER_READY_SECONDS)
        if done.returncode != 0:
            raise ProcessWaitFailed(f"redis-cli --cluster create failed:\n{done.stdout}\n{done.stderr}")
        cluster.wait_ok()
        wait_until(
            lambda: (
                sorted(cluster.roles().values()) == ["master"] * primaries + ["slave"] * primaries * replicas
                and cluster.replicas_in_sync()
            ),
            timeout=CLUSTER_READY_SECONDS,
            what="every replica to know its primary and hold its data",
            interval=0.1,
        )
    except BaseException:
        cluster.stop()
        raise
    return cluster


def wait_all_ready(processes: Iterable[Process], timeout: float = READY_SECONDS) -> None:
    """Wait for processes started with wait=False (they start side by side); stop them all if one fails."""
    processes = list(processes)
    try:
        for process in processes:
            process.wait_ready(timeout)
    except BaseException:
        stop_all(processes)
        raise


def stop_all(processes: Iterable[Process], timeout: float = STOP_SECONDS) -> None:
    """SIGTERM to all at once, then wait for each (and SIGKILL what does not exit in time)."""
    processes = list(processes)
    for process in processes:
        if process.alive():
            process.popen.send_signal(signal.SIGTERM)
    for process in processes:
        process.stop(timeout)


# --- Django processes of a test ---------------------------------------------------------


def django_env(rankings: dict | None = None, **extra) -> dict:
    """Environment for a child process that sees exactly what this test sees; `rankings`: engine
    settings of its own (RANKINGS_OVERRIDES)."""
    from django.db import connection

    db = connection.settings_dict
    url = f"postgres://{db.get('USER') or ''}@{db.get('HOST') or ''}:{db.get('PORT') or 5432}/{db['NAME']}"
    if not db.get("HOST"):
        url = f"postgres:///{db['NAME']}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "salesrank_site.settings",
        "DATABASE_URL": url,
        "RANKINGS_KEY_PREFIX": rankings_settings.KEY_PREFIX,
        "RANKINGS_SHARDS": str(rankings_settings.SHARDS),
        "RANKINGS_SPLIT": rankings_settings.SPLIT,
        "SECRET_KEY": "test-only-key",
        "PYTHONPATH": str(ROOT),
    }
    env.update({k: str(v) for k, v in extra.items()})
    if rankings:
        env["RANKINGS_OVERRIDES"] = json.dumps(rankings)
    return env


def manage(*args, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, **popen)


def python(code: str, env: dict, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, **popen)

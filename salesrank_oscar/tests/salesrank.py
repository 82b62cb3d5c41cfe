"""A real salesrank for the app's tests: gunicorn serving salesrank_site, and a Celery worker and beat
ticking every half second, on a PostgreSQL database and a Redis key prefix of their own.

Started from this repository (`tests/processes.py` starts and watches the processes); the shop's
side talks to it over HTTP only, as a shop would.
"""

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis
import requests

from tests import processes

ROOT = processes.ROOT
# A new database, its tables and a token for the shop: what `make run` does, in one process.
SETUP = """
import django
from django.core.management import call_command
django.setup()
call_command("ensure_database", verbosity=0)
call_command("migrate", verbosity=0)
from rankings.operations.tokens import ingest_token_create
print("token", ingest_token_create(username="shop", permissions=[
    "add_sale", "catalogue.change_product", "catalogue.change_category"
]))
"""
# Ticks this often, so that a sale shows within a second.
TICK_SECONDS = 0.5  # seconds
# The longest a sale takes from the outbox to a visible rank on this loaded machine.
VISIBLE_SECONDS = 30  # seconds


@dataclass
class Salesrank:
    log_dir: Path
    env: dict
    database: str
    prefix: str
    port: int = field(default_factory=processes.free_port)
    token: str = ""
    web: processes.Process | None = None
    ticking: list[processes.Process] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def setup(self) -> None:
        done = subprocess.run(
            [sys.executable, "-c", SETUP], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        self.token = done.stdout.split("token ", 1)[1].strip()

    def start(self) -> None:
        """The web process on its port (again, after `stop`)."""
        self.web = processes.web(self.log_dir, self.env, port=self.port, workers=1)

    def stop(self) -> None:
        """The web process stopped: salesrank cannot be reached; its worker and beat go on."""
        assert self.web is not None
        self.web.stop()

    def start_all(self) -> list[processes.Process]:
        """The web process, a worker and a beat, started side by side; not waited for."""
        self.web = processes.web(self.log_dir, self.env, port=self.port, workers=1, wait=False)
        self.ticking = [
            processes.celery_worker(
                self.log_dir, self.env, args=["--without-mingle", "--without-gossip"], wait=False
            ),
            processes.celery_beat(self.log_dir, self.env, wait=False),
        ]
        return [self.web, *self.ticking]

    def close(self) -> None:
        """Everything stopped (killed: nothing of it is kept) and dropped."""
        for process in [self.web, *self.ticking]:
            if process is not None:
                process.kill()
        with psycopg.connect(dbname="postgres", autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        for number in (0, 1):  # the boards' database, and the broker's (the queues of the prefix)
            client = redis.Redis(db=number)
            keys = list(client.scan_iter(f"*{self.prefix}*", count=1000))
            if keys:
                client.delete(*keys)

    def get(self, path: str, **params) -> requests.Response:
        return requests.get(self.url + path, params=params, timeout=5)

    def units(self, product_id: str, category: str = "all") -> int | None:
        """The product's units on salesrank's 1d board of `category`, as served now."""
        reply = self.get(f"/v1/products/{product_id}/rank", category=category, window="1d")
        return reply.json()["units"] if reply.status_code == 200 else None

    def revenue(self, product_id: str, category: str = "all") -> str | None:
        reply = self.get(f"/v1/products/{product_id}/rank", category=category, window="1d")
        return reply.json()["revenue"] if reply.status_code == 200 else None

    def wait_units(self, product_id: str, units: int, category: str = "all") -> None:
        processes.wait_until(
            lambda: self.units(product_id, category) == units,
            timeout=VISIBLE_SECONDS,
            what=f"{units} units of {product_id} in {category} (now {self.units(product_id, category)})",
            watch=[p for p in [self.web, *self.ticking] if p is not None],
            interval=0.1,
        )

    def sales(self, *event_ids: str) -> dict[str, int]:
        """event id -> how many of salesrank's stored sales carry it."""
        with psycopg.connect(dbname=self.database) as connection:
            rows = connection.execute(
                "SELECT event_id, count(*) FROM rankings_sale WHERE event_id = ANY(%s) GROUP BY event_id",
                [list(event_ids)],
            ).fetchall()
        return dict(rows)

    def products(self, *product_ids: str) -> dict[str, tuple]:
        """product id -> (name, price in cents, release, categories' slugs, placeholder?) in
        salesrank's catalogue."""
        with psycopg.connect(dbname=self.database) as connection:
            rows = connection.execute(
                "SELECT p.product_id, p.name, p.price_cents, p.released_at,"
                " array(SELECT c.slug FROM catalogue_product_categories pc JOIN catalogue_category c"
                " ON c.id = pc.category_id WHERE pc.product_id = p.id ORDER BY c.slug), p.is_placeholder"
                " FROM catalogue_product p WHERE p.product_id = ANY(%s)",
                [list(product_ids)],
            ).fetchall()
        return {row[0]: row[1:] for row in rows}

    def categories(self, *slugs: str) -> dict[str, tuple]:
        """slug -> (name, parent's slug, placeholder?) in salesrank's catalogue."""
        with psycopg.connect(dbname=self.database) as connection:
            rows = connection.execute(
                "SELECT c.slug, c.name, parent.slug, c.is_placeholder FROM catalogue_category c"
                " LEFT JOIN catalogue_category parent ON parent.id = c.parent_id WHERE c.slug = ANY(%s)",
                [list(slugs)],
            ).fetchall()
        return {row[0]: row[1:] for row in rows}

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )


def salesrank_made(log_dir: Path) -> Salesrank:
    """A salesrank of its own, its database made, not started yet; `close()` stops it and drops
    what it made."""
    run = uuid.uuid4().hex[:10]
    database, prefix = f"salesrank_oscar_{run}", f"salesrank-oscar-{run}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "salesrank_site.settings",
        "DATABASE_URL": f"postgres:///{database}",
        "RANKINGS_KEY_PREFIX": prefix,
        "RANKINGS_TICK_SECONDS": str(TICK_SECONDS),
        "SECRET_KEY": "test-only-key",
        "READ_DOT_ENV": "0",
        # The tests' reads come from one address, many a second.
        "THROTTLE_READS": "",
        "PYTHONPATH": str(ROOT),
    }
    salesrank = Salesrank(log_dir, env, database, prefix)
    try:
        salesrank.setup()
    except BaseException:
        salesrank.close()
        raise
    return salesrank

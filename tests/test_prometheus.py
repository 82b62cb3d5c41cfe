"""A running site watched as an operator watches it: gunicorn with three workers, a Celery worker
and beat, all logging JSON lines, and Debian's Prometheus scraping /metrics every second with the
shipped alert rules loaded. One of each for the whole module."""

import http.client
import json
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
import redis as redis_lib
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.utils import timezone

from rankings.conf import rankings_settings
from rankings.operations.tokens import token_create

from . import processes
from .processes import ROOT, Process, wait_until

# django_db: the test database exists for the site (each test itself only speaks HTTP).
pytestmark = [pytest.mark.processes, pytest.mark.django_db]

# Long enough for a scrape, a tick and a second scrape on a loaded 2-core machine.
SEEN_SECONDS = 30  # seconds
# The boards trail the clock by a tick's interval (half a second here) and a tick's duration.
FRESH_SECONDS = 5  # seconds
POLL_SECONDS = 0.1  # seconds: a site's read limit is 100 a second per address


@dataclass
class Site:
    web: Process
    worker: Process
    prometheus: Process
    token: str
    # What the ingest replies said so far, over the module's tests.
    said: dict[str, int] = field(default_factory=lambda: {"accepted": 0, "duplicate": 0, "rejected": 0})

    def request(self, method: str, path: str, body: dict | None = None, headers: dict | None = None):
        conn = http.client.HTTPConnection(self.web.address, timeout=30)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            conn.request(
                method, path, body=payload, headers={"Content-Type": "application/json", **(headers or {})}
            )
            reply = conn.getresponse()
            return reply.status, dict(reply.getheaders()), reply.read()
        finally:
            conn.close()

    def send(self, events: list, request_id: str | None = None) -> dict:
        """POST /v1/sales; what its reply said is added to `said`."""
        headers = {
            "Authorization": f"Token {self.token}",
            **({"X-Request-ID": request_id} if request_id else {}),
        }
        status, _, body = self.request("POST", "/v1/sales", {"events": events}, headers)
        assert status == 200, body
        reply = json.loads(body)
        self.said["accepted"] += reply["accepted"]
        self.said["duplicate"] += reply["duplicates"]
        self.said["rejected"] += len(reply["rejected"])
        return reply

    def scraped(self) -> dict[str, float]:
        """The sales totals by outcome as /metrics serves them now."""
        status, _, body = self.request("GET", "/metrics")
        assert status == 200, body
        totals = {}
        for line in body.decode().splitlines():
            if line.startswith('salesrank_sales_ingested_total{outcome="'):
                outcome = line.split('"')[1]
                totals[outcome] = float(line.rsplit(" ", 1)[1])
        return totals

    def query(self, promql: str) -> list[dict]:
        """The result of an instant query of Prometheus's HTTP API."""
        conn = http.client.HTTPConnection(self.prometheus.address, timeout=10)
        try:
            conn.request("GET", "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
            reply = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        assert reply["status"] == "success", reply
        return reply["data"]["result"]

    def ages(self, since: float) -> list[float]:
        """Every scraped value of the boards' age since `since` (epoch seconds), oldest first."""
        window = max(1, int(time.time() - since))
        result = self.query(f"salesrank_boards_age_seconds[{window}s]")
        return [float(value) for _, value in result[0]["values"]] if result else []

    def api(self, path: str) -> dict:
        conn = http.client.HTTPConnection(self.prometheus.address, timeout=10)
        try:
            conn.request("GET", path)
            return json.loads(conn.getresponse().read())["data"]
        finally:
            conn.close()


def _prometheus(log_dir, target: str) -> Process:
    """Debian's prometheus scraping `target` every second, with the shipped rules, on a free port."""
    config = log_dir / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(ROOT / "monitoring" / "alerts.yml")],
                "scrape_configs": [{"job_name": "salesrank", "static_configs": [{"targets": [target]}]}],
            }
        )
    )
    address = f"127.0.0.1:{processes.free_port()}"
    command = ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={log_dir / 'tsdb'}"]
    command += [f"--web.listen-address={address}"]
    return processes.start(
        "prometheus",
        command,
        log_dir=log_dir,
        env={},
        kind="prometheus",
        ready=processes.answers_200("/-/ready"),
        address=address,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory, django_db_setup, django_db_blocker):
    """The site on the test database under a key prefix of its own (the tests' Redis keys are
    emptied after each test), with a token that may send sales; emptied afterwards."""
    log_dir = tmp_path_factory.mktemp("site")
    prefix = f"{rankings_settings.KEY_PREFIX}-site"
    with django_db_blocker.unblock():
        user = get_user_model().objects.create_user("shop")
        user.user_permissions.add(
            Permission.objects.get(codename="add_sale", content_type__app_label="rankings")
        )
        token = token_create(user=user)
        env = processes.django_env(
            rankings={"TICK_SECONDS": 0.5}, LOG_FORMAT="json", RANKINGS_KEY_PREFIX=prefix
        )
    started = [
        processes.web(log_dir, env, workers=3, ready_path="/healthz", wait=False),
        processes.celery_worker(log_dir, env, args=["--without-mingle", "--without-gossip"], wait=False),
        processes.celery_beat(log_dir, env, wait=False),
    ]
    started.append(_prometheus(log_dir, started[0].address))
    processes.wait_all_ready(started)
    yield Site(web=started[0], worker=started[1], prometheus=started[3], token=token)
    processes.stop_all(started)
    with django_db_blocker.unblock():
        call_command("flush", verbosity=0, interactive=False)
    for url in (settings.REDIS_URL, settings.CELERY_BROKER_URL):
        client = redis_lib.Redis.from_url(url)
        keys = list(client.scan_iter(f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)


def _batch(tag: str, n: int) -> list:
    """Two new sales, one of them sent twice, and one invalid event."""
    now = timezone.now().isoformat()
    first = {"id": f"{tag}-{n}-a", "ts": now, "productId": f"p{n % 7}", "categories": ["toys"], "qty": 1}
    second = {**first, "id": f"{tag}-{n}-b", "productId": "p1", "categories": ["books"]}
    return [first, second, first, {**first, "id": f"{tag}-{n}-c", "qty": 0}]


def _json_lines(process: Process) -> list[dict]:
    return [json.loads(line) for line in process.output(chars=10**7).splitlines() if line.startswith("{")]


def test_the_totals_equal_the_replies_across_every_web_process(site):
    """Batches answered by three gunicorn workers at once: /metrics, from whichever worker answers,
    adds up exactly what the replies said, outcome by outcome."""
    # when batches are sent six at a time
    with ThreadPoolExecutor(6) as pool:
        replies = list(pool.map(lambda n: site.send(_batch("across", n)), range(30)))
    assert sum(reply["accepted"] for reply in replies) == 60
    # then several workers answered them
    posted = [line for line in _json_lines(site.web) if line.get("path") == "/v1/sales"]
    assert len({line["process"] for line in posted}) >= 2
    # and the totals, once each worker's second-old scrape is renewed, are what the replies said,
    # whichever worker answers (several scrapes in a row agree)
    wait_until(
        lambda: all(site.scraped() == site.said for _ in range(6)),
        timeout=SEEN_SECONDS,
        what="every worker's totals to be the replies'",
        interval=POLL_SECONDS,
        watch=[site.web],
    )


def test_prometheus_sees_every_sale_accepted_and_boards_a_few_seconds_old(site):
    # given sales sent while Prometheus scrapes every second
    for n in range(5):
        site.send(_batch("scraped", n))
    # then Prometheus's own query API gives the accepted total the replies gave
    accepted = 'max(salesrank_sales_ingested_total{job="salesrank", outcome="accepted"})'
    wait_until(
        lambda: [float(r["value"][1]) for r in site.query(accepted)] == [site.said["accepted"]],
        timeout=SEEN_SECONDS,
        what=f"Prometheus to see {site.said['accepted']} sales accepted",
        interval=POLL_SECONDS,
        watch=[site.prometheus, site.web],
    )
    # and from the first scrape after the first ticks on, over ten scrapes while the beat ticks,
    # the boards were never more than a few seconds old
    wait_until(
        lambda: site.query(f"salesrank_boards_age_seconds < {FRESH_SECONDS}"),
        timeout=SEEN_SECONDS,
        what="a scrape of fresh boards",
        interval=POLL_SECONDS,
        watch=[site.prometheus],
    )
    since = time.time()
    ages = wait_until(
        lambda: (ages := site.ages(since)) and len(ages) >= 10 and ages,
        timeout=SEEN_SECONDS,
        what="ten scrapes of the boards' age",
        interval=POLL_SECONDS,
        watch=[site.prometheus],
    )
    assert 0 <= max(ages) < FRESH_SECONDS, ages


def test_prometheus_evaluates_every_shipped_rule_and_none_fires_on_a_healthy_site(site):
    def evaluated() -> list[dict] | None:
        rules = [rule for group in site.api("/api/v1/rules")["groups"] for rule in group["rules"]]
        return rules if rules and all(rule["health"] == "ok" for rule in rules) else None

    rules = wait_until(
        evaluated, timeout=SEEN_SECONDS, what="every rule to be evaluated", interval=POLL_SECONDS
    )
    assert {rule["name"] for rule in rules if rule["type"] == "alerting"} >= {
        "SalesrankBoardsStale",
        "SalesrankShardFailing",
    }
    assert [alert for alert in site.api("/api/v1/alerts")["alerts"] if alert["state"] == "firing"] == []


def test_a_request_id_reaches_the_tick_its_sales_woke_in_json_logs(site):
    """The request's line and the line of the Celery task its commit woke carry the same id."""

    def woke() -> str | None:
        # A tick already woken and not yet started holds its group's wake: send again until one wakes.
        request_id = str(uuid.uuid4())
        site.send(_batch(request_id, 0), request_id=request_id)
        done = lambda: any(  # noqa: E731
            line.get("request_id") == request_id and line["logger"] == "rankings.tasks"
            for line in _json_lines(site.worker)
        )
        try:
            wait_until(done, timeout=5, what="the woken tick's line", interval=POLL_SECONDS)
        except processes.ProcessWaitFailed:
            return None
        return request_id

    request_id = wait_until(
        woke, timeout=SEEN_SECONDS, what="a sale's tick to log its request's id", interval=0
    )
    # then the request's own line says what it was, with the same id
    (line,) = [line for line in _json_lines(site.web) if line.get("request_id") == request_id]
    assert line["logger"] == "salesrank.requests"
    assert (line["method"], line["path"], line["status"]) == ("POST", "/v1/sales", 200)
    assert line["duration_ms"] > 0
    assert {"time", "level", "message", "process"} <= set(line)
    # and the reply names it too
    status, headers, _ = site.request("GET", "/v1/categories", headers={"X-Request-ID": request_id})
    assert (status, headers["X-Request-ID"]) == (200, request_id)


def test_every_line_the_web_processes_write_is_a_json_object(site):
    text = site.web.output(chars=10**7)
    lines = text.splitlines()
    assert lines
    for line in lines:
        record = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(record), line

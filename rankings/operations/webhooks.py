"""Delivering rank alerts: each firing POSTed to its alert's URL, signed as Standard Webhooks sign.

A sender claims due firings with FOR UPDATE SKIP LOCKED and leases them (their next attempt moved
past the delivery's timeout) in one short transaction, so two senders never send the same attempt
at once and a sender that dies leaves its firings to the next one after the lease. Deliveries run
on ALERTS_SEND_THREADS threads, at most ALERTS_HOST_CONCURRENCY at once to one host, and the sender
claims again as each ends: a receiver that hangs holds a thread for the timeout at most and never
the others. Each attempt is recorded (AlertAttempt) with what the receiver answered; any answer but
2xx, or none within ALERTS_TIMEOUT_SECONDS, is retried with a growing wait (RETRY_WAITS: the first
within a minute) and the same webhook-id, for ALERTS_RETRY_SECONDS after the first attempt; then the
firing is given up and its alert marked failing until a delivery succeeds again.

No delivery goes to a private, loopback, link-local or reserved address unless ALERTS_ALLOW_PRIVATE:
the host is resolved at each attempt, every address it resolves to is checked, and the connection
is made to the address checked (the Host header and TLS's server name are the URL's), so a name
that resolves elsewhere between the check and the connection (DNS rebinding) changes nothing.
Redirects are answers like any other (not 2xx): never followed.
"""

import base64
import contextlib
import datetime as dt
import hashlib
import hmac
import http.client
import ipaddress
import json
import secrets
import socket
import ssl
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from rankings.conf import rankings_settings
from rankings.engine.alerts import firing_payload
from rankings.models import Alert, AlertAttempt, AlertFiring

# Waits before the 2nd, 3rd, … attempt of a refused firing (seconds); the last repeats until the
# retries' period is over, when one last attempt is made at its end.
RETRY_WAITS = (30, 120, 600, 1800, 3600, 7200, 14400, 28800)
# A claimed firing's lease: its delivery's timeout and this, for recording what became of it.
LEASE_MARGIN = 30  # seconds
# How often a sender with deliveries under way looks for newly due firings, when fewer than half
# its threads are free, and how long the end of a delivery waits to be recorded with others.
CLAIM_EVERY = 0.25  # seconds
RECORD_EVERY = 0.2  # seconds
SECRET_BYTES = 24  # random bytes of a signing key: 192 bits
USER_AGENT = "salesrank-alerts/1"


class Refused(Exception):
    """A delivery not attempted: its URL or an address it resolves to is not allowed."""


def secret_new() -> str:
    """A signing key as Standard Webhooks write one: whsec_ and the key's bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signature(*, secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The webhook-signature header: v1, and the base64 HMAC-SHA256 of "id.timestamp.body" keyed by the
    secret's bytes."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


PRIVATE = "a private, loopback, link-local or reserved address"


def address_private(address: str) -> bool:
    """Whether a delivery may not connect to `address`: anything but a public (global unicast) one."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 link-local's zone is not part of it
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def url_refusal(url: str) -> str | None:
    """Why `url` cannot be an alert's webhook URL; None when it can (its addresses are checked again at
    every delivery)."""
    allow_private = rankings_settings.ALERTS_ALLOW_PRIVATE
    if any(c.isspace() or not c.isprintable() for c in url):
        return "may not hold spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        return f"not a URL: {error}"
    schemes = ("https", "http") if allow_private else ("https",)
    if parts.scheme not in schemes:
        return "must be an https URL" + (" (or http)" if allow_private else "")
    host = parts.hostname
    if not host:
        return "names no host"
    if parts.username is not None or parts.password is not None:
        return "may not carry a user name or password"
    if port == 0:
        return "names port 0"
    if allow_private:
        return None
    if host == "localhost" or host.endswith((".localhost", ".local")):
        return f"{host} is a local name"
    try:
        private = address_private(host)
    except ValueError:
        return None  # a name, resolved at each delivery
    return f"{host} is {PRIVATE}" if private else None


@dataclass(frozen=True)
class Message:
    """A claimed firing as it is sent."""

    firing_id: int
    alert_id: int
    url: str
    host: str
    secret: str
    webhook_id: str
    body: bytes
    due: dt.datetime  # its next attempt's time before the claim leased it


@dataclass(frozen=True)
class Outcome:
    status: int | None  # the receiver's answer, if one came
    error: str  # why it failed ("" when it did not)
    duration_ms: float

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class _Pinned:
    """A connection to the address that was checked, for the URL's host: the Host header and the TLS
    server name are the host's, the TCP connection goes to `address` only, and every step of it
    ends by `deadline` (time.monotonic())."""

    def pin(self, address: str, deadline: float) -> None:
        self.address, self.deadline = address, deadline

    def connect(self) -> None:
        raw = socket.create_connection((self.address, self.port), self._left())  # type: ignore[attr-defined]
        raw.settimeout(self._left())
        self.sock = self._wrapped(raw)

    def _left(self) -> float:
        return max(0.001, self.deadline - time.monotonic())

    def _wrapped(self, raw: socket.socket) -> socket.socket:
        return raw

    def abort(self) -> None:
        """End the connection now, from another thread: a blocked read or write returns at once."""
        sock = getattr(self, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):  # closed already
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the TCP socket's, under TLS too


class _PinnedHTTP(_Pinned, http.client.HTTPConnection):
    pass


class _PinnedHTTPS(_Pinned, http.client.HTTPSConnection):
    def _wrapped(self, raw: socket.socket) -> socket.socket:
        return self._context.wrap_socket(raw, server_hostname=self.host)  # type: ignore[attr-defined]


# Certificates checked against the system's authorities and the URL's host name.
_TLS = ssl.create_default_context()


def deliver(message: Message, *, timeout: float) -> Outcome:
    """POST one firing; what the receiver answered, or why nothing came, within `timeout` seconds: the
    connection, the request and the answer's status line share one deadline (a receiver that answers
    byte by byte is cut off at it); only resolving the host name is bounded by the system's resolver."""
    started = time.perf_counter()

    def outcome(status: int | None, error: str) -> Outcome:
        return Outcome(status, error[: AlertAttempt._meta.get_field("error").max_length], _ms(started))

    try:
        status = _post(message, timeout=timeout)
    except Refused as error:
        return outcome(None, f"refused: {error}")
    except TimeoutError:
        return outcome(None, f"no answer within {timeout:g} s")
    except Exception as error:  # a refused connection, a bad certificate, a garbled answer, or worse
        late = time.perf_counter() - started >= timeout
        return outcome(
            None, f"no answer within {timeout:g} s" if late else f"{type(error).__name__}: {error}"
        )
    return outcome(status, "" if 200 <= status < 300 else f"answered {status}")


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _post(message: Message, *, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    parts = urlsplit(message.url)
    refusal = url_refusal(message.url)
    if refusal:
        raise Refused(f"the URL {refusal}")
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    host = parts.hostname or ""
    addresses = [info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    if not rankings_settings.ALERTS_ALLOW_PRIVATE:
        for address in addresses:
            if address_private(str(address)):
                raise Refused(f"{host} resolves to {address}, {PRIVATE}")
    pinned = _PinnedHTTPS(host, port, context=_TLS) if https else _PinnedHTTP(host, port)
    pinned.pin(str(addresses[0]), deadline)
    watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), pinned.abort)
    watchdog.daemon = True
    watchdog.start()
    try:
        stamp = int(time.time())  # the receiver compares it with its own clock
        pinned.request(
            "POST",
            (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
            body=message.body,
            headers={
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
                "webhook-id": message.webhook_id,
                "webhook-timestamp": str(stamp),
                "webhook-signature": signature(
                    secret=message.secret, webhook_id=message.webhook_id, timestamp=stamp, body=message.body
                ),
            },
        )
        return pinned.getresponse().status  # the status line and headers; the body is not read
    finally:
        watchdog.cancel()
        pinned.close()


@dataclass
class SendReport:
    attempts: int = 0
    delivered: int = 0
    refused: int = 0  # attempts that failed (to be retried, or given up)
    given_up: int = 0
    seconds: float = 0.0
    errors: Counter = field(default_factory=Counter)


# The due firings, oldest first, of hosts not already at their limit here: each locked (rows another
# sender holds are skipped) and leased in the same statement. Returns what a delivery needs.
_CLAIM = f"""
UPDATE {AlertFiring._meta.db_table} f SET next_attempt_at = %(lease)s
FROM (
    SELECT f.id, f.next_attempt_at AS due, a.id AS alert_id, a.url, a.host, a.secret, a.product_id,
           a.category, a."window", a.metric
    FROM {AlertFiring._meta.db_table} f JOIN {Alert._meta.db_table} a ON a.id = f.alert_id
    WHERE f.next_attempt_at <= %(now)s AND NOT (a.host = ANY(%(busy)s))
    ORDER BY f.next_attempt_at, f.id
    LIMIT %(limit)s
    FOR UPDATE OF f SKIP LOCKED
) c
WHERE f.id = c.id
RETURNING f.id, c.due, c.alert_id, c.url, c.host, c.secret, f.message_id, f.kind, f.rank, f.rank_before, f.at,
          c.product_id, c.category, c."window", c.metric
"""


def _claim(*, now: dt.datetime, limit: int, busy: list[str]) -> list[Message]:
    lease = now + dt.timedelta(seconds=rankings_settings.ALERTS_TIMEOUT_SECONDS + LEASE_MARGIN)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_CLAIM, {"now": now, "lease": lease, "limit": limit, "busy": busy})
        rows = cursor.fetchall()
    messages = []
    for row in sorted(rows, key=lambda row: (row[1], row[0])):
        firing_id, due, alert_id, url, host, secret, message_id, kind, rank, rank_before, at, *board = row
        product_id, category, window, metric = board
        payload = firing_payload(
            alert_id=alert_id,
            kind=kind,
            product_id=product_id,
            category=category,
            window=window,
            metric=metric,
            rank=rank,
            rank_before=rank_before,
            at=at,
        )
        body = json.dumps(payload, separators=(",", ":")).encode()
        messages.append(Message(firing_id, alert_id, url, host, secret, f"msg_{message_id.hex}", body, due))
    return messages


def _release(messages: list[Message]) -> None:
    """Give claimed firings back as they were (due when they were due), for a later claim."""
    if messages:
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {AlertFiring._meta.db_table} f SET next_attempt_at = r.due"
                " FROM unnest(%s::bigint[], %s::timestamptz[]) AS r(id, due) WHERE f.id = r.id",
                [[m.firing_id for m in messages], [m.due for m in messages]],
            )


def retry_wait(attempts: int) -> int:
    """Seconds before the next attempt of a firing refused `attempts` times."""
    return RETRY_WAITS[min(attempts, len(RETRY_WAITS)) - 1]


def _record(ended: list[tuple[Message, Outcome, dt.datetime]], *, report: SendReport) -> None:
    """Record the attempts (each with the time it ended) and what follows each (delivered, retried
    later, or given up: its alert failing) in one transaction; should an alert have been deleted
    meanwhile (its firings' rows go with it), one attempt at a time, the deleted one's dropped."""
    if not ended:
        return
    try:
        with transaction.atomic():
            counted = _recorded(ended)
    except IntegrityError:  # an alert and its firings were deleted between the read and the commit
        if len(ended) > 1:
            for one in ended:
                _record([one], report=report)
        return
    report.attempts += counted.attempts
    report.delivered += counted.delivered
    report.refused += counted.refused
    report.given_up += counted.given_up
    report.errors.update(counted.errors)


_FIRINGS_UPDATE = f"""
UPDATE {AlertFiring._meta.db_table} f
SET attempts = u.attempts, first_attempt_at = u.first, state = u.state, next_attempt_at = u.next,
    delivered_at = u.delivered
FROM unnest(%s::bigint[], %s::integer[], %s::timestamptz[], %s::text[], %s::timestamptz[], %s::timestamptz[])
     AS u(id, attempts, first, state, next, delivered)
WHERE f.id = u.id
"""


def _recorded(ended: list[tuple[Message, Outcome, dt.datetime]]) -> SendReport:
    firings = AlertFiring.objects.select_for_update().in_bulk([message.firing_id for message, _, _ in ended])
    counted = SendReport()
    attempts, healed, failing = [], {}, {}
    for message, outcome, at in ended:
        firing = firings.get(message.firing_id)
        if firing is None:  # its alert was deleted meanwhile
            continue
        counted.attempts += 1
        attempts.append(
            AlertAttempt(
                firing=firing, alert_id=message.alert_id, at=at, status=outcome.status, error=outcome.error,
                duration_ms=outcome.duration_ms,
            )
        )  # fmt: skip
        first = firing.first_attempt_at = firing.first_attempt_at or at
        firing.attempts += 1
        if outcome.ok:
            firing.state, firing.next_attempt_at, firing.delivered_at = AlertFiring.State.DELIVERED, None, at
            healed[message.alert_id] = at
            counted.delivered += 1
            continue
        counted.refused += 1
        counted.errors[outcome.error.split(":")[0]] += 1
        end = first + dt.timedelta(seconds=rankings_settings.ALERTS_RETRY_SECONDS)
        if at >= end:
            firing.state, firing.next_attempt_at = AlertFiring.State.FAILED, None
            failing[message.alert_id] = at
            counted.given_up += 1
        else:
            firing.next_attempt_at = min(at + dt.timedelta(seconds=retry_wait(firing.attempts)), end)
    AlertAttempt.objects.bulk_create(attempts)
    changed = list(firings.values())
    with connection.cursor() as cursor:  # one statement; the ORM's bulk_update costs more in Python than this
        cursor.execute(
            _FIRINGS_UPDATE,
            [
                [f.id for f in changed],
                [f.attempts for f in changed],
                [f.first_attempt_at for f in changed],
                [f.state for f in changed],
                [f.next_attempt_at for f in changed],
                [f.delivered_at for f in changed],
            ],
        )
    Alert.objects.filter(id__in=healed, failing_since__isnull=False).update(failing_since=None)
    for alert_id, at in failing.items():
        if alert_id not in healed:
            Alert.objects.filter(id=alert_id, failing_since__isnull=True).update(failing_since=at)
    return counted


def alerts_send(*, now: dt.datetime | None = None, budget: float | None = None) -> SendReport:
    """Deliver every firing due as of `now` (default: the clock, read at each claim and attempt), and
    those that fall due meanwhile, until none is left or `budget` seconds (ALERTS_SEND_BUDGET_SECONDS)
    have passed; deliveries under way then finish."""
    return _Sender(now=now, budget=budget).run()


class _Sender:
    """One send: deliveries on a pool of threads, claimed as threads come free, recorded as they end."""

    def __init__(self, *, now: dt.datetime | None, budget: float | None):
        self.now = now
        self.threads = rankings_settings.ALERTS_SEND_THREADS
        self.per_host = rankings_settings.ALERTS_HOST_CONCURRENCY
        self.timeout = rankings_settings.ALERTS_TIMEOUT_SECONDS
        self.budget = rankings_settings.ALERTS_SEND_BUDGET_SECONDS if budget is None else budget
        self.report = SendReport()
        self.in_flight: dict[Future, Message] = {}
        self.hosts: Counter = Counter()  # deliveries under way per host

    def clock(self) -> dt.datetime:
        return self.now or timezone.now()

    def run(self) -> SendReport:
        started = time.monotonic()
        claimed_at = recorded_at = started
        ended: list[tuple[Message, Outcome, dt.datetime]] = []  # deliveries over, not recorded yet
        with ThreadPoolExecutor(self.threads, thread_name_prefix="webhook") as pool:
            while True:
                # A claim (a statement) when half the threads are free, or now and then: not one per delivery.
                free = self.threads - len(self.in_flight)
                now = time.monotonic()
                if (
                    now - started < self.budget
                    and free
                    and (2 * free >= self.threads or now - claimed_at >= CLAIM_EVERY)
                ):
                    self._fill(pool)
                    claimed_at = now
                if not self.in_flight:
                    _record(ended, report=self.report)
                    break
                done, _ = wait(self.in_flight, timeout=CLAIM_EVERY, return_when=FIRST_COMPLETED)
                at = self.clock()
                for future in done:
                    message = self.in_flight.pop(future)
                    self.hosts[message.host] -= 1
                    ended.append((message, future.result(), at))
                # Recorded a wave at a time (a transaction each), within RECORD_EVERY of their end.
                if len(ended) >= self.threads or time.monotonic() - recorded_at >= RECORD_EVERY:
                    _record(ended, report=self.report)
                    ended, recorded_at = [], time.monotonic()
        self.report.seconds = time.monotonic() - started
        return self.report

    def _fill(self, pool: ThreadPoolExecutor) -> None:
        """Claim until the threads are full or nothing is due for a host below its limit: each claim
        fills a thread, finds a host at its limit (left out of the next claim), or finds nothing."""
        while len(self.in_flight) < self.threads:
            busy = sorted(host for host, n in self.hosts.items() if n >= self.per_host)
            claimed = _claim(now=self.clock(), limit=self.threads - len(self.in_flight), busy=busy)
            released = []
            for message in claimed:
                if self.hosts[message.host] >= self.per_host:
                    released.append(message)
                    continue
                self.hosts[message.host] += 1
                self.in_flight[pool.submit(deliver, message, timeout=self.timeout)] = message
            _release(released)
            if not claimed:
                return

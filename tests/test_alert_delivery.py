"""Rank alerts delivered to a real local HTTP receiver: signed as Standard Webhooks sign, retried
with the same id, given up after a day, never sent to a private address unless allowed, and a
receiver that hangs holds up nobody else."""

import base64
import datetime as dt
import hashlib
import hmac
import io
import json
import socket
import ssl
import subprocess
import threading
import time

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from catalogue.models import Category, Product
from rankings.models import Alert, AlertAttempt, AlertFiring
from rankings.operations import webhooks
from rankings.operations.alerts import alert_create
from rankings.operations.webhooks import alerts_send

from .rankings_helpers import START, Shop
from .webhook_receiver import HANG, Receiver

pytestmark = pytest.mark.django_db

T = START + dt.timedelta(hours=1)


@pytest.fixture
def private_allowed(settings):
    """Receivers on this machine (127.0.0.x) may be called, as ALERTS_ALLOW_PRIVATE allows."""
    settings.RANKINGS = {**settings.RANKINGS, "ALERTS_ALLOW_PRIVATE": True}
    return settings


def _user():
    user, _ = get_user_model().objects.get_or_create(username="seller")
    return user


def _alert(url: str, product: str = "p1") -> tuple[Alert, str]:
    """An alert to `url` on toys, made while private addresses are allowed (whatever they are later)."""
    Product.objects.get_or_create(product_id=product, defaults={"name": product})
    Category.objects.get_or_create(slug="toys", defaults={"name": "Toys"})
    with override_settings(RANKINGS={**settings.RANKINGS, "ALERTS_ALLOW_PRIVATE": True}):
        return alert_create(
            user=_user(), product_id=product, category="toys", window="1d", metric="units",
            rule="enters", number=10, url=url,
        )  # fmt: skip


def _fire(
    alert: Alert, at: dt.datetime = START, rank: int | None = 3, before: int | None = None
) -> AlertFiring:
    """A firing as the tick makes it: due at its hour."""
    return AlertFiring.objects.create(
        alert=alert, at=at, kind="rank.entered", rank=rank, rank_before=before, next_attempt_at=at
    )


def _verified(secret: str, received) -> dict:
    """The body, once its signature is checked by the receiver's own HMAC (the docs' recipe)."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = (
        f"{received.headers['webhook-id']}.{received.headers['webhook-timestamp']}.".encode() + received.body
    )
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    signatures = [part.split(",", 1)[1] for part in received.headers["webhook-signature"].split()]
    assert any(hmac.compare_digest(expected, sig) for sig in signatures)
    assert abs(time.time() - int(received.headers["webhook-timestamp"])) < 60
    return json.loads(received.body)


@pytest.mark.django_db(transaction=True)
def test_a_firing_made_by_the_tick_is_posted_signed_and_its_signature_verifies(private_allowed):
    """p2 enters the top 1 of toys at 13:00: the receiver gets one POST whose signature verifies with
    the secret shown at creation and whose body says what happened."""
    with Receiver() as receiver:
        shop = Shop()
        shop.send(shop.sale("p1", qty=5), shop.sale("p2", qty=1))
        alert, secret = alert_create(
            user=_user(), product_id="p2", category="toys", window="1d", metric="units",
            rule="enters", number=1, url=receiver.url("/ranks?shop=7"),
        )  # fmt: skip
        shop.tick()
        shop.send(shop.sale("p2", qty=10))
        shop.advance(hours=1)
        shop.tick()
        report = alerts_send(now=shop.now)
        assert (report.attempts, report.delivered) == (1, 1)
        (received,) = receiver.received
    assert received.path == "/ranks?shop=7"
    assert received.headers["content-type"] == "application/json"
    firing = AlertFiring.objects.get()
    assert received.headers["webhook-id"] == f"msg_{firing.message_id.hex}"
    assert _verified(secret, received) == {
        "type": "rank.entered",
        "alertId": alert.id,
        "productId": "p2",
        "category": "toys",
        "window": "1d",
        "metric": "units",
        "rank": 1,
        "rankBefore": 2,
        "at": "2026-03-02T13:00:00Z",
    }
    assert (firing.state, firing.next_attempt_at, firing.delivered_at) == ("delivered", None, shop.now)
    assert list(AlertAttempt.objects.values_list("status", "error")) == [(200, "")]


def test_a_receiver_answering_500_gets_a_retry_with_the_same_id_within_a_minute(private_allowed):
    with Receiver(answer=lambda n: 500 if n == 0 else 204) as receiver:
        alert, secret = _alert(receiver.url())
        firing = _fire(alert)
        alerts_send(now=T)
        firing.refresh_from_db()
        assert (firing.state, firing.attempts) == ("pending", 1)
        assert T < firing.next_attempt_at <= T + dt.timedelta(minutes=1)
        alerts_send(now=firing.next_attempt_at - dt.timedelta(seconds=1))  # not due yet
        assert len(receiver.received) == 1
        alerts_send(now=firing.next_attempt_at)
        first, second = receiver.received
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == firing.webhook_id
    assert first.body == second.body
    _verified(secret, second)
    firing.refresh_from_db()
    assert firing.state == "delivered"
    assert list(AlertAttempt.objects.order_by("at").values_list("status", "error")) == [
        (500, "answered 500"),
        (204, ""),
    ]


def test_a_day_of_refusals_gives_the_firing_up_and_marks_the_alert_failing_until_one_succeeds(
    private_allowed, api
):
    """Retried with growing waits for a day after the first attempt, the last one at its end; then
    given up and the alert shown failing in the API, until a later firing is delivered."""
    answers = {"status": 503}
    with Receiver(answer=lambda n: answers["status"]) as receiver:
        alert, _ = _alert(receiver.url())
        firing = _fire(alert)
        at = T
        while True:
            alerts_send(now=at)
            firing.refresh_from_db()
            if firing.next_attempt_at is None:
                break
            assert firing.next_attempt_at > at
            at = firing.next_attempt_at
        times = list(AlertAttempt.objects.order_by("at").values_list("at", flat=True))
        assert len(receiver.received) == len(times) > 5
        assert times[-1] - times[0] == dt.timedelta(days=1)
        assert times[1] - times[0] <= dt.timedelta(minutes=1)
        assert firing.state == "failed"
        alert.refresh_from_db()
        assert alert.failing_since == at
        api.force_authenticate(alert.user)
        alert.user.user_permissions.add(*_permission("add_alert"))
        assert api.get("/v1/alerts").json()["items"][0]["failing"] is True
        answers["status"] = 200
        _fire(alert, at=START + dt.timedelta(days=2))
        alerts_send(now=at + dt.timedelta(days=1))
    alert.refresh_from_db()
    assert alert.failing_since is None


def _permission(codename):
    return Permission.objects.filter(codename=codename, content_type__app_label="rankings")


def test_a_hanging_receiver_does_not_delay_another(private_allowed):
    """Four firings to a receiver that never answers, one to another: the other is delivered at once,
    the hanging one holds at most ALERTS_HOST_CONCURRENCY threads for the timeout each."""
    private_allowed.RANKINGS = {
        **private_allowed.RANKINGS,
        "ALERTS_TIMEOUT_SECONDS": 1.5,
        "ALERTS_SEND_THREADS": 3,
        "ALERTS_HOST_CONCURRENCY": 2,
    }
    with Receiver(answer=lambda n: HANG) as hanging, Receiver(address="127.0.0.2") as quick:
        for product in ("p1", "p2", "p3", "p4"):
            _fire(_alert(hanging.url(), product=product)[0])
        _fire(_alert(quick.url(), product="p5")[0], at=START + dt.timedelta(minutes=1))  # due last
        started = time.monotonic()
        report = alerts_send(now=T)
        took = time.monotonic() - started
        (received,) = quick.received
    assert received.at - started < 0.5
    assert (report.attempts, report.delivered) == (5, 1)
    assert 3.0 <= took < 4.5  # two rounds of the hanging host's two threads, 1.5 s each
    errors = set(AlertAttempt.objects.exclude(status=200).values_list("error", flat=True))
    assert errors == {"no answer within 1.5 s"}


def _spied_connections(monkeypatch) -> list:
    """Every TCP connection a delivery opens, recorded (and made)."""
    opened = []
    create = socket.create_connection

    def spy(address, *args, **kwargs):
        opened.append(address)
        return create(address, *args, **kwargs)

    monkeypatch.setattr(webhooks.socket, "create_connection", spy)
    return opened


def _resolving(monkeypatch, name: str, address: str) -> None:
    """`name` resolves to `address`, as a DNS answer changed after the alert was made would."""
    resolve = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host == name:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return resolve(host, port, *args, **kwargs)

    monkeypatch.setattr(webhooks.socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize("how", ["literal", "name"])
def test_a_loopback_address_is_never_called_without_allow_private(how, monkeypatch):
    """Made while private addresses were allowed (or resolving elsewhere then), sent while they are
    not: the receiver on 127.0.0.1 sees no connection, and the attempt says why."""
    opened = _spied_connections(monkeypatch)
    with Receiver() as receiver:
        if how == "name":
            _resolving(monkeypatch, "hooks.shop.test", "127.0.0.1")
        host = "127.0.0.1" if how == "literal" else "hooks.shop.test"
        alert, _ = _alert(receiver.url(host=host, scheme="https"))
        _fire(alert)
        report = alerts_send(now=T)
        assert receiver.connections == 0 and receiver.received == []
    assert opened == [] and report.refused == 1
    (error,) = AlertAttempt.objects.values_list("error", flat=True)
    assert error.startswith("refused:") and "127.0.0.1" in error and "a private, loopback" in error


@pytest.mark.parametrize("how", ["literal", "name"])
def test_a_private_address_gets_no_connection_attempt_at_all(how, monkeypatch):
    """10.0.0.1 (nothing answers there: a connection would wait for the timeout) is refused before any
    connection is tried, at once."""
    opened = _spied_connections(monkeypatch)
    if how == "name":
        _resolving(monkeypatch, "hooks.shop.test", "10.0.0.1")
    alert, _ = _alert(f"https://{'10.0.0.1' if how == 'literal' else 'hooks.shop.test'}/hook")
    _fire(alert)
    started = time.monotonic()
    alerts_send(now=T)
    assert time.monotonic() - started < 1.0
    assert opened == []
    (error,) = AlertAttempt.objects.values_list("error", flat=True)
    assert error.startswith("refused:") and "10.0.0.1" in error and "a private, loopback" in error


def test_https_goes_to_the_address_checked_with_the_urls_host_as_server_name_and_header(
    private_allowed, monkeypatch, tmp_path
):
    """The TCP connection goes to the address the name resolved to (and was checked), while TLS asks
    for the URL's host and checks the certificate against it, and the Host header names it."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", key, "-out", cert,
         "-subj", "/CN=hooks.shop.test", "-addext", "subjectAltName=DNS:hooks.shop.test"],
        check=True, capture_output=True,
    )  # fmt: skip
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    monkeypatch.setattr(webhooks, "_TLS", ssl.create_default_context(cafile=str(cert)))
    _resolving(monkeypatch, "hooks.shop.test", "127.0.0.1")
    opened = _spied_connections(monkeypatch)
    with Receiver(tls=served) as receiver:
        alert, secret = _alert(receiver.url(host="hooks.shop.test", scheme="https"))
        _fire(alert)
        report = alerts_send(now=T)
        (received,) = receiver.received
    assert report.delivered == 1
    assert opened == [("127.0.0.1", receiver.port)]
    assert receiver.server_names == ["hooks.shop.test"]
    assert received.headers["host"] == f"hooks.shop.test:{receiver.port}"
    _verified(secret, received)


def test_a_redirect_is_an_answer_not_followed(private_allowed):
    with Receiver(address="127.0.0.2") as elsewhere:
        with Receiver(answer=lambda n: 302, redirect_to=elsewhere.url()) as receiver:
            alert, _ = _alert(receiver.url())
            firing = _fire(alert)
            alerts_send(now=T)
            assert len(receiver.received) == 1
        assert elsewhere.received == [] and elsewhere.connections == 0
    firing.refresh_from_db()
    assert (firing.state, firing.attempts) == ("pending", 1)
    assert list(AlertAttempt.objects.values_list("status", "error")) == [(302, "answered 302")]


@pytest.mark.django_db(transaction=True)
def test_two_senders_at_once_never_send_the_same_attempt(private_allowed):
    """Two senders claim side by side (each on its own connection): every firing is sent once."""
    private_allowed.RANKINGS = {**private_allowed.RANKINGS, "ALERTS_HOST_CONCURRENCY": 8}

    def slowly(n):
        time.sleep(0.05)
        return 200

    with Receiver(answer=slowly) as receiver:
        for i in range(30):
            _fire(_alert(receiver.url(), product=f"p{i}")[0])

        def send():
            try:
                alerts_send(now=T)
            finally:
                connection.close()

        senders = [threading.Thread(target=send) for _ in range(2)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        ids = [r.headers["webhook-id"] for r in receiver.received]
    # What became of a firing not received, if any (seen once in a loaded run: 29 received).
    failed = list(AlertAttempt.objects.exclude(status=200).values_list("status", "error"))
    assert len(ids) == len(set(ids)) == 30, failed
    assert AlertAttempt.objects.count() == 30
    assert set(AlertFiring.objects.values_list("state", flat=True)) == {"delivered"}


def test_the_command_sends_what_is_due_as_of_its_now(private_allowed):
    with Receiver() as receiver:
        alert, _ = _alert(receiver.url())
        _fire(alert, at=T)
        out = io.StringIO()
        call_command("rankings_alerts_send", "--now", START.isoformat(), stdout=out)  # before it is due
        assert receiver.received == []
        call_command("rankings_alerts_send", "--now", T.isoformat(), stdout=out)
        assert len(receiver.received) == 1
    assert "1 attempts" in out.getvalue() and "1 delivered" in out.getvalue()


def test_a_deleted_alert_s_claimed_firing_is_recorded_nowhere(private_allowed):
    """An alert deleted while its firing is being sent: the attempt is dropped with it, nothing fails."""
    with Receiver() as receiver:
        alert, _ = _alert(receiver.url())
        _fire(alert)
        (message,) = webhooks._claim(now=T, limit=5, busy=[])
        Alert.objects.filter(id=alert.id).delete()
        report = webhooks.SendReport()
        webhooks._record([(message, webhooks.deliver(message, timeout=2), T)], report=report)
    assert report.attempts == 0
    assert AlertAttempt.objects.count() == AlertFiring.objects.count() == 0

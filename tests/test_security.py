"""Security: production settings pass `check --deploy`, ingest needs a permitted token,
throttles answer 429 with Retry-After, bodies have a size limit, admin is staff-only
with CSRF, and no secret is committed."""

import datetime as dt
import json
import os
import re
import secrets
import subprocess
import sys

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.test import Client
from rest_framework.test import APIClient
from rest_framework.throttling import ScopedRateThrottle, SimpleRateThrottle

from rankings.operations.tokens import token_create

from .processes import ROOT
from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db


def _settings_env(**extra) -> dict:
    """An environment with none of the settings' variables but those given."""
    names = {"DEBUG", "SECRET_KEY", "HTTPS", "ALLOWED_HOSTS", "DJANGO_SETTINGS_MODULE"}
    env = {k: v for k, v in os.environ.items() if k not in names and not k.startswith("SECURE_")}
    return {
        **env,
        "DJANGO_SETTINGS_MODULE": "salesrank_site.settings",
        "PYTHONPATH": str(ROOT),
        "READ_DOT_ENV": "0",  # a developer's .env must not fill in what these tests leave out
        **extra,
    }


def _run(args, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


# --- settings ----------------------------------------------------------------------


@pytest.mark.processes
def test_check_deploy_is_clean_with_production_settings():
    """DEBUG unset, a long random SECRET_KEY and HTTPS on: not one warning."""
    env = _settings_env(SECRET_KEY=secrets.token_urlsafe(50), HTTPS="true", ALLOWED_HOSTS="ranks.example.com")

    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.processes
def test_check_deploy_warns_when_https_is_off():
    """The check above is not vacuous: without the production flags it complains."""
    env = _settings_env(SECRET_KEY=secrets.token_urlsafe(50), ALLOWED_HOSTS="ranks.example.com")

    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)

    assert result.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in result.stderr


@pytest.mark.processes
def test_debug_is_off_unless_set():
    env = _settings_env(SECRET_KEY=secrets.token_urlsafe(50))

    result = _run(
        ["-c", "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)"], env
    )

    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.processes
def test_without_debug_the_secret_key_must_come_from_the_environment():
    result = _run(["-c", "import django; django.setup()"], _settings_env())

    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


# --- ingest needs a permitted token ------------------------------------------------


def event(**overrides):
    return {"id": "sec-1", "ts": 1760000000, "productId": "p1", "categories": ["toys"], "qty": 1, **overrides}


def test_a_logged_in_session_cannot_post_sales_without_a_csrf_token(django_user_model):
    """Session authentication is for the admin's pages; a cross-site form post is refused."""
    user = django_user_model.objects.create_user("staff", password="pw-123456", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="add_sale", content_type__app_label="rankings"))
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)

    reply = client.post("/v1/sales", {"events": [event()]}, format="json")

    assert reply.status_code == 403
    assert "CSRF" in reply.json()["error"]


# --- throttling --------------------------------------------------------------------


LOW_RATES = {"ingest": "2/min", "reads": "3/min", "reads-authenticated": "5/min", "pages": "2/min"}


@pytest.fixture
def low_rates(monkeypatch):
    """Rates low enough to reach in a test (DRF reads them once, at import, hence the patch)."""
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", LOW_RATES)
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", LOW_RATES)


def test_reads_beyond_the_rate_get_429_with_retry_after(api, low_rates):
    Shop().tick()

    statuses = [api.get("/v1/categories/all/top").status_code for _ in range(3)]
    refused = api.get("/v1/categories/all/top")

    assert statuses == [200, 200, 200]
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert set(refused.json()) == {"error"}


def test_reads_are_counted_per_client_address(api, low_rates):
    Shop().tick()
    for _ in range(3):
        api.get("/v1/categories", REMOTE_ADDR="10.0.0.1")

    assert api.get("/v1/categories", REMOTE_ADDR="10.0.0.1").status_code == 429
    assert api.get("/v1/categories", REMOTE_ADDR="10.0.0.2").status_code == 200


def test_a_random_x_forwarded_for_does_not_reset_the_read_limit(api, low_rates):
    """With no proxy configured, the header is the client's to invent: only the socket's address counts."""
    Shop().tick()
    for i in range(3):
        api.get("/v1/categories", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}")

    reply = api.get("/v1/categories", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="192.0.2.99")

    assert reply.status_code == 429


def test_behind_one_proxy_the_address_it_forwarded_is_counted(api, low_rates, settings):
    """NUM_PROXIES=1: the last X-Forwarded-For entry (the one the proxy appended) is the client."""
    # given one proxy, 10.0.0.1, in front of the app
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    Shop().tick()
    # when one client behind it uses up its reads
    for _ in range(3):
        api.get("/v1/categories", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="spoofed, 198.51.100.7")
    # then that client is refused, another client through the same proxy is not
    limited = api.get("/v1/categories", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="other, 198.51.100.7")
    other = api.get("/v1/categories", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.8")
    assert (limited.status_code, other.status_code) == (429, 200)


def test_pages_are_throttled_per_address_with_a_429_page(client, low_rates):
    # given a client that used up its pages
    Shop().tick()
    assert [client.get("/c/all/", REMOTE_ADDR="10.0.0.1").status_code for _ in range(2)] == [200, 200]
    # when it asks for more, whatever the page
    refused = [
        client.get(url, REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="192.0.2.1") for url in ("/", "/p/x/")
    ]
    # then a 429 page says so, with Retry-After; another address is served
    for reply in refused:
        assert reply.status_code == 429
        assert 1 <= int(reply["Retry-After"]) <= 60
        assert "Too many requests" in reply.content.decode()
    assert client.get("/c/all/", REMOTE_ADDR="10.0.0.2").status_code == 200


def test_authenticated_readers_have_a_bucket_and_rate_of_their_own(api, ingest_api, low_rates):
    """A shop's servers reading with a token share neither the anonymous limit nor its rate."""
    # given anonymous reads from the shop's address used up
    Shop().tick()
    for _ in range(3):
        api.get("/v1/categories", REMOTE_ADDR="10.0.0.1")
    assert api.get("/v1/categories", REMOTE_ADDR="10.0.0.1").status_code == 429
    # when the shop reads with its token from the same address
    statuses = [ingest_api.get("/v1/categories", REMOTE_ADDR="10.0.0.1").status_code for _ in range(6)]
    # then it gets the authenticated rate (5), counted for its user
    assert statuses == [200] * 5 + [429]


@pytest.mark.parametrize("path", ["/v1/categories/all/top", "/v1/status"])
def test_bogus_tokens_from_one_address_are_refused_with_429_over_the_read_limit(api, low_rates, path):
    """A failed authentication is an anonymous read of its address: it counts against, and is
    refused by, that address's read limit, rather than answering 401 for ever unthrottled."""
    Shop().tick()
    # given an address that sends a new invented key with every request
    replies = [
        api.get(path, REMOTE_ADDR="10.0.0.1", HTTP_AUTHORIZATION=f"Token {secrets.token_urlsafe(32)}")
        for _ in range(4)
    ]
    # then the read limit (3) holds for it: 401 until the limit, 429 with Retry-After after it
    assert [r.status_code for r in replies] == [401, 401, 401, 429]
    assert int(replies[3]["Retry-After"]) >= 1 and set(replies[3].json()) == {"error"}
    # and a malformed header, or a post to ingest, counts the same
    assert api.get(path, REMOTE_ADDR="10.0.0.1", HTTP_AUTHORIZATION="Token").status_code == 429
    assert (
        api.post(
            "/v1/sales", {}, format="json", REMOTE_ADDR="10.0.0.1", HTTP_AUTHORIZATION="Token x"
        ).status_code
        == 429
    )
    # and another address is not affected
    assert api.get(path, REMOTE_ADDR="10.0.0.2", HTTP_AUTHORIZATION="Token nope").status_code == 401


def test_ingest_is_counted_per_token(ingest_api, ingest_user, django_user_model, low_rates):
    # given a second user with the permission and a token of its own
    other = django_user_model.objects.create_user("ingest-other")
    other.user_permissions.add(
        Permission.objects.get(codename="add_sale", content_type__app_label="rankings")
    )
    other_api = APIClient()
    other_api.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=other)}")
    # when the first token posts three batches
    replies = [ingest_api.post("/v1/sales", {"events": [event(id=f"t{i}")]}, format="json") for i in range(3)]
    # then the third is refused with a JSON error and Retry-After, and the other token is unaffected
    assert [r.status_code for r in replies] == [200, 200, 429]
    assert int(replies[2]["Retry-After"]) >= 1 and "error" in replies[2].json()
    assert other_api.post("/v1/sales", {"events": [event(id="o1")]}, format="json").status_code == 200


def test_with_the_throttle_store_unreachable_reads_and_ingest_still_answer(
    api, ingest_api, settings, low_rates
):
    """The throttle counts in Redis; when that Redis is gone, requests go through rather than fail."""
    Shop().tick()
    with socket_closed_port() as port:
        settings.CACHES = {
            "default": {**settings.CACHES["default"], "LOCATION": f"redis://127.0.0.1:{port}/0"}
        }
        reads = [api.get("/v1/categories/all/top").status_code for _ in range(5)]
        posted = ingest_api.post("/v1/sales", {"events": [event()]}, format="json")

    assert reads == [200] * 5  # no counting, so no 429 either
    assert posted.status_code == 200 and posted.json()["accepted"] == 1


class socket_closed_port:
    """A local port that nothing listens on, for as long as the block runs."""

    def __enter__(self) -> int:
        import socket

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        return self._socket.getsockname()[1]

    def __exit__(self, *exc):
        self._socket.close()


def test_the_schema_documents_429_and_503(api):
    schema = api.get("/v1/schema", HTTP_ACCEPT="application/json").json()
    top = schema["paths"]["/v1/categories/{slug}/top"]["get"]["responses"]
    sales = schema["paths"]["/v1/sales"]["post"]["responses"]

    assert {"200", "304", "400", "404", "429", "503"} <= set(top)
    assert {"200", "400", "401", "403", "413", "429"} <= set(sales)


# --- request body size -------------------------------------------------------------


def test_a_body_over_the_limit_is_refused_with_413_json(ingest_api):
    padding = "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    body = json.dumps({"events": [event(pad=padding)]})

    reply = ingest_api.post("/v1/sales", body, content_type="application/json")

    assert reply.status_code == 413
    assert "larger than" in reply.json()["error"]


def test_a_body_over_the_limit_without_a_token_is_refused_before_it_is_read(api):
    body = json.dumps({"events": [event(pad="x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1))]})

    reply = api.post("/v1/sales", body, content_type="application/json")

    assert reply.status_code == 401


def test_a_full_batch_is_well_under_the_limit(ingest_api):
    """5,000 events of the longest allowed ids fit: the limit only stops what is not a batch."""
    events = [
        event(
            id=f"{i:0>128}", productId=f"{i:0>64}", categories=["a" * 50, "b" * 50], amount="123456789012.99"
        )
        for i in range(5000)
    ]

    assert len(json.dumps({"events": events})) < settings.DATA_UPLOAD_MAX_MEMORY_SIZE


# --- admin -------------------------------------------------------------------------


def test_admin_is_for_staff_only(client, django_user_model):
    django_user_model.objects.create_user("customer", password="pw-123456")

    anonymous = client.get("/admin/")
    login = client.post("/admin/login/", {"username": "customer", "password": "pw-123456"})

    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]
    assert login.status_code == 200  # the form again, with an error: not staff
    assert client.get("/admin/").status_code == 302


def test_admin_login_needs_a_csrf_token(django_user_model):
    django_user_model.objects.create_user("boss", password="pw-123456", is_staff=True)
    client = Client(enforce_csrf_checks=True)

    without = client.post("/admin/login/", {"username": "boss", "password": "pw-123456"})
    form = client.get("/admin/login/")
    token = form.cookies["csrftoken"].value
    with_token = client.post(
        "/admin/login/", {"username": "boss", "password": "pw-123456", "csrfmiddlewaretoken": token}
    )

    assert without.status_code == 403
    assert with_token.status_code == 302


def test_admin_actions_need_a_csrf_token(admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    reply = client.post("/admin/auth/user/add/", {"username": "x", "password1": "p", "password2": "p"})

    assert reply.status_code == 403


# --- admin login lockout ---------------------------------------------------------


def _log_in(client, username: str, password: str, address: str):
    """One submission of the admin's login form, as a browser at `address` sends it."""
    return client.post(
        "/admin/login/?next=/admin/", {"username": username, "password": password}, REMOTE_ADDR=address
    )


@pytest.fixture
def boss(django_user_model):
    return django_user_model.objects.create_user("boss", password="pw-123456", is_staff=True)


def test_ten_failed_logins_for_a_username_lock_it_out_from_every_address(client, boss, django_user_model):
    django_user_model.objects.create_user("clerk", password="pw-654321", is_staff=True)
    # given nine wrong passwords for boss, each from another address
    failures = [_log_in(client, "boss", "guess", f"10.0.1.{i}").status_code for i in range(9)]
    assert failures == [200] * 9  # the form again, with its error
    # when the tenth fails too
    _log_in(client, "boss", "guess", "10.0.1.9")
    # then even the right password, from a new address, is refused with 429
    locked = _log_in(client, "boss", "pw-123456", "10.0.2.1")
    assert locked.status_code == 429
    assert client.get("/admin/").status_code == 302  # not logged in
    # and another user logs in from that address
    assert _log_in(client, "clerk", "pw-654321", "10.0.2.1").status_code == 302


def test_ten_failed_logins_from_an_address_lock_it_out_for_every_username(client, boss):
    for i in range(10):
        _log_in(client, f"user{i}", "guess", "10.0.3.1")

    assert _log_in(client, "boss", "pw-123456", "10.0.3.1").status_code == 429
    assert _log_in(client, "boss", "pw-123456", "10.0.3.2").status_code == 302


def test_a_lockout_ends_after_15_minutes_and_its_attempts_are_deleted(client, boss):
    from axes.models import AccessAttempt, AccessLog
    from django.utils import timezone

    # given boss locked out by failures from one address, which goes on trying
    for _ in range(15):
        _log_in(client, "boss", "guess", "10.0.4.1")
    assert _log_in(client, "boss", "pw-123456", "10.0.4.1").status_code == 429
    # then the tries during the lockout are not recorded: neither lengthen it nor grow its row
    assert [(a.failures_since_start, len(a.post_data) < 2000) for a in AccessAttempt.objects.all()] == [
        (10, True)
    ]
    # when the failures are 15 minutes old
    AccessAttempt.objects.update(attempt_time=timezone.now() - dt.timedelta(minutes=15, seconds=1))
    # then the right password logs in, the old attempts are gone, and no login is logged
    assert _log_in(client, "boss", "pw-123456", "10.0.4.1").status_code == 302
    assert not AccessAttempt.objects.exists()
    assert not AccessLog.objects.exists()


def test_nine_failures_do_not_lock_anyone_out(client, boss):
    for _ in range(9):
        _log_in(client, "boss", "guess", "10.0.5.1")

    assert _log_in(client, "boss", "pw-123456", "10.0.5.1").status_code == 302


@pytest.mark.parametrize(
    "forwarded, recorded",
    [
        ("unknown", "10.0.6.1"),
        ("1.2.3.4:5678", "1.2.3.4"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ("2001:db8::2", "2001:db8::2"),
    ],
)
def test_a_login_behind_a_proxy_forwarding_a_non_address_is_recorded_not_a_500(
    client, boss, settings, forwarded, recorded
):
    """The lockout stores an IP: a forwarded entry that is not one falls back to REMOTE_ADDR,
    and an address with a port is recorded without it."""
    from axes.models import AccessAttempt

    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}

    reply = client.post(
        "/admin/login/?next=/admin/",
        {"username": "boss", "password": "guess"},
        REMOTE_ADDR="10.0.6.1",
        HTTP_X_FORWARDED_FOR=forwarded,
    )

    assert reply.status_code == 200  # the form again, with its error
    assert [a.ip_address for a in AccessAttempt.objects.all()] == [recorded]


# --- no secret committed -----------------------------------------------------------

SECRET_PATTERNS = [
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    r"AKIA[0-9A-Z]{16}",  # an AWS access key id
    r"gh[pousr]_[A-Za-z0-9]{36}",  # a GitHub token
    r"xox[abposr]-[A-Za-z0-9-]{10,}",  # a Slack token
    r"SECRET_KEY\s*[=:]\s*['\"][^'\"\s]{20,}['\"]",  # a literal long secret key
    r"(?i)(password|passwd|api_key|apikey|secret)\s*[:=]\s*['\"][A-Za-z0-9+/=_-]{24,}['\"]",
]


def test_no_secret_is_committed():
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    files = [f for f in files if f]

    assert ".env" not in files
    found = []
    for name in files:
        path = ROOT / name
        if not path.is_file() or path.stat().st_size > 1_000_000:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for pattern in SECRET_PATTERNS:
            found += [f"{name}: {m.group(0)[:40]}" for m in re.finditer(pattern, text)]
    assert not found, found

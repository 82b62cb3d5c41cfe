"""POST, GET /v1/alerts and DELETE /v1/alerts/{id}: a token holder's own alerts, every input checked
(400 with the field and the reason, never a 500), a bounded number per user; and the admin's lists."""

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from catalogue.models import Category, Product
from rankings.models import Alert, AlertAttempt, AlertFiring
from rankings.operations.tokens import token_create
from rankings.serving.alerts_api import AlertReply

pytestmark = pytest.mark.django_db

GOOD = {
    "productId": "p1",
    "category": "toys",
    "window": "7d",
    "metric": "units",
    "rule": {"enters": 10},
    "url": "https://hooks.example.com/ranks",
}
AT = dt.datetime(2026, 3, 2, 13, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def catalogue():
    Product.objects.create(product_id="p1", name="Kite")
    Category.objects.create(slug="toys", name="Toys")


def _client(username: str, *permissions: str) -> APIClient:
    user = get_user_model().objects.create_user(username)
    user.user_permissions.add(*Permission.objects.filter(codename__in=permissions))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=user)}")
    return client


@pytest.fixture
def seller():
    return _client("seller", "add_alert")


def test_an_alert_is_made_with_its_secret_shown_once_listed_and_deleted(seller):
    made = seller.post("/v1/alerts", GOOD, format="json")
    assert made.status_code == 201
    alert_id, secret = made.json()["id"], made.json()["secret"]
    assert secret.startswith("whsec_") and len(secret) > 30
    listed = seller.get("/v1/alerts")
    assert listed.status_code == 200
    (item,) = listed.json()["items"]
    assert item == {
        "id": alert_id,
        "productId": "p1",
        "category": "toys",
        "window": "7d",
        "metric": "units",
        "rule": {"enters": 10},
        "url": "https://hooks.example.com/ranks",
        "createdAt": item["createdAt"],
        "failing": False,
        "failingSince": None,
    }
    assert secret not in listed.content.decode()
    assert seller.delete(f"/v1/alerts/{alert_id}").status_code == 204
    assert seller.get("/v1/alerts").json() == {"items": []}
    assert seller.delete(f"/v1/alerts/{alert_id}").status_code == 404


def test_a_caller_sees_and_deletes_only_its_own_alerts(seller):
    other = _client("other", "add_alert")
    theirs = other.post("/v1/alerts", GOOD, format="json").json()["id"]
    assert seller.get("/v1/alerts").json() == {"items": []}
    reply = seller.delete(f"/v1/alerts/{theirs}")
    assert reply.status_code == 404 and reply.json() == {"error": f"no alert {theirs} of yours"}
    assert Alert.objects.filter(id=theirs).exists()


def test_alerts_need_a_token_with_the_permission():
    assert APIClient().post("/v1/alerts", GOOD, format="json").status_code == 401
    assert APIClient().get("/v1/alerts").status_code == 401
    ingest = _client("ingest", "add_sale")
    assert ingest.post("/v1/alerts", GOOD, format="json").status_code == 403
    assert ingest.get("/v1/alerts").status_code == 403
    assert ingest.delete("/v1/alerts/1").status_code == 403


@pytest.mark.parametrize(
    "change, error",
    [
        ({"productId": "nope"}, "productId: unknown product 'nope'"),
        ({"productId": "a b"}, "productId must be 1 to 64 characters of A-Z a-z 0-9 . _ : -"),
        ({"category": "games"}, "category: unknown category 'games'"),
        ({"category": "x" * 51}, "category: Ensure this field has no more than 50 characters."),
        ({"window": "1h"}, 'window: "1h" is not a valid choice.'),
        ({"metric": "likes"}, 'metric: "likes" is not a valid choice.'),
        ({"rule": {"enters": 0}}, "rule: enters must be a whole number from 1 to 1,000"),
        ({"rule": {"falls": 1001}}, "rule: falls must be a whole number from 1 to 1,000"),
        ({"rule": {"enters": 1, "leaves": 2}}, "rule: must be an object with exactly one of"),
        ({"rule": {"rises": 3}}, "rule: must be an object with exactly one of"),
        ({"rule": {"climbs": True}}, "rule: must be an object with exactly one of"),
        ({"rule": {"climbs": "5"}}, "rule: must be an object with exactly one of"),
        ({"rule": 10}, "rule: must be an object with exactly one of"),
        ({"url": "http://hooks.example.com/ranks"}, "url: must be an https URL"),
        ({"url": "https://10.0.0.1/hook"}, "url: 10.0.0.1 is a private, loopback, link-local or reserved"),
        ({"url": "https://[::1]:8443/hook"}, "url: ::1 is a private"),
        ({"url": "https://169.254.169.254/latest"}, "url: 169.254.169.254 is a private"),
        ({"url": "https://localhost/hook"}, "url: localhost is a local name"),
        ({"url": "https://user:pw@hooks.example.com/"}, "url: may not carry a user name or password"),
        ({"url": "https://hooks.example.com:99999/"}, "url: not a URL"),
        ({"url": "hooks.example.com"}, "url: must be an https URL"),
        ({"url": "https:///path"}, "url: names no host"),
        ({"url": "https://x/" + "a" * 2000}, "url: Ensure this field has no more than 2000 characters."),
        ({"url": None}, "url: This field may not be null."),
        ({"url": "https://hooks.example.com/a b"}, "url: may not hold spaces or control characters"),
        ({"url": "https://hooks.example.com/\x7f"}, "url: may not hold spaces or control characters"),
    ],
)
def test_a_bad_field_is_a_400_that_names_it(seller, change, error):
    reply = seller.post("/v1/alerts", {**GOOD, **change}, format="json")
    assert reply.status_code == 400
    assert reply.json()["error"].startswith(error)
    assert not Alert.objects.exists()


@pytest.mark.parametrize("body", [[GOOD], "x", None, {}])
def test_a_body_that_is_not_an_alert_is_a_400(seller, body):
    reply = seller.post("/v1/alerts", body, format="json")
    assert reply.status_code == 400 and "error" in reply.json()


def test_a_url_to_this_machine_is_taken_when_private_addresses_are_allowed(seller, settings):
    settings.RANKINGS = {**settings.RANKINGS, "ALERTS_ALLOW_PRIVATE": True}
    reply = seller.post("/v1/alerts", {**GOOD, "url": "http://127.0.0.1:8765/hook"}, format="json")
    assert reply.status_code == 201
    assert Alert.objects.get().host == "127.0.0.1"


def test_a_split_board_takes_no_alert(seller, settings):
    """`all` split in parts is snapshotted by part: no rank of the whole board is recorded to judge."""
    settings.RANKINGS = {**settings.RANKINGS, "SPLIT": "all:2"}
    reply = seller.post("/v1/alerts", {**GOOD, "category": "all"}, format="json")
    assert reply.status_code == 400 and reply.json()["error"].startswith("category: 'all' is split")


def test_alerts_per_user_are_bounded(seller, settings):
    settings.RANKINGS = {**settings.RANKINGS, "ALERTS_PER_USER": 2}
    for number in (1, 2):
        assert (
            seller.post("/v1/alerts", {**GOOD, "rule": {"enters": number}}, format="json").status_code == 201
        )
    reply = seller.post("/v1/alerts", GOOD, format="json")
    assert reply.status_code == 400
    assert reply.json() == {"error": "alerts: at most 2 alerts per user; delete one to make another"}
    assert len(seller.get("/v1/alerts").json()["items"]) == 2


def test_an_id_too_long_to_be_an_alert_is_a_json_404(seller):
    reply = seller.delete("/v1/alerts/" + "9" * 30)
    assert reply.status_code == 404 and reply.json() == {"error": "no such endpoint or resource"}


def test_deleting_an_alert_deletes_its_firings_and_attempts(seller):
    alert_id = seller.post("/v1/alerts", GOOD, format="json").json()["id"]
    firing = AlertFiring.objects.create(alert_id=alert_id, at=AT, kind="rank.entered", rank=3)
    AlertAttempt.objects.create(firing=firing, alert_id=alert_id, at=AT, status=500)
    assert seller.delete(f"/v1/alerts/{alert_id}").status_code == 204
    assert not AlertFiring.objects.exists() and not AlertAttempt.objects.exists()


def test_listing_a_users_alerts_costs_a_fixed_number_of_queries(seller, settings):
    for number in range(1, 31):
        seller.post("/v1/alerts", {**GOOD, "rule": {"falls": number}}, format="json")
    with CaptureQueriesContext(connection) as queries:
        reply = seller.get("/v1/alerts")
    assert len(reply.json()["items"]) == 30
    assert len(queries) <= 4  # the token, its user's permissions, the page (and at most one token use)


def test_an_alert_is_written_with_exactly_the_fields_its_schema_declares(seller):
    seller.post("/v1/alerts", GOOD, format="json")
    written = AlertReply.wire(Alert.objects.get())
    assert list(written) == list(AlertReply().fields)


def test_the_schema_describes_the_alerts(api):
    schema = api.get("/v1/schema?format=json").json()
    assert {"post", "get"} <= set(schema["paths"]["/v1/alerts"])
    assert "delete" in schema["paths"]["/v1/alerts/{alert_id}"]


# --- the admin ---------------------------------------------------------------------


def _alerts(count: int) -> list[Alert]:
    user = get_user_model().objects.create_user("shop")
    return Alert.objects.bulk_create(
        Alert(user=user, product_id="p1", category="toys", window="1d", metric="units", rule="enters",
              number=i + 1, url="https://hooks.example.com/", host="hooks.example.com", secret="whsec_x", shard=0)
        for i in range(count)
    )  # fmt: skip


def test_the_admin_lists_alerts_with_their_last_answer_in_a_bounded_number_of_queries(admin_client):
    alerts = _alerts(250)
    firing = AlertFiring.objects.create(alert=alerts[-1], at=AT, kind="rank.entered", rank=3)
    AlertAttempt.objects.create(firing=firing, alert=alerts[-1], at=AT, status=503, error="answered 503")
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get("/admin/rankings/alert/")
    assert page.status_code == 200
    assert len(queries) < 15
    text = page.content.decode()
    assert "503" in text and "hooks.example.com" in text


def test_the_admin_shows_an_alerts_latest_attempts_and_lists_every_attempt(admin_client):
    (alert,) = _alerts(1)
    firing = AlertFiring.objects.create(alert=alert, at=AT, kind="rank.entered", rank=3)
    for minute in range(30):
        AlertAttempt.objects.create(
            firing=firing,
            alert=alert,
            at=AT + dt.timedelta(minutes=minute),
            status=500,
            error=f"answered 5{minute:02}",
        )
    page = admin_client.get(f"/admin/rankings/alert/{alert.id}/change/").content.decode()
    assert firing.webhook_id in page
    assert "answered 529" in page and "answered 509" not in page  # the latest 20 only
    assert "whsec_" not in page
    listed = admin_client.get(f"/admin/rankings/alertattempt/?alert__id__exact={alert.id}&outcome=failed")
    assert listed.status_code == 200 and "answered 500" in listed.content.decode()


def test_an_alert_made_in_the_admin_shows_its_secret_once(admin_client):
    user = get_user_model().objects.create_user("shop")
    data = {"user": user.id, "product_id": "p1", "category": "toys", "window": "1d", "metric": "units",
            "rule": "climbs", "number": 5, "url": "https://hooks.example.com/"}  # fmt: skip
    reply = admin_client.post("/admin/rankings/alert/add/", data, follow=True)
    assert reply.status_code == 200
    alert = Alert.objects.get()
    assert alert.secret in reply.content.decode()
    assert (alert.host, alert.shard) == ("hooks.example.com", alert.shard)
    refused = admin_client.post("/admin/rankings/alert/add/", {**data, "url": "https://10.0.0.1/"})
    assert "10.0.0.1 is a private" in refused.content.decode()
    assert Alert.objects.count() == 1


def test_the_admin_deletes_an_alert_with_its_firings(admin_client):
    (alert,) = _alerts(1)
    firing = AlertFiring.objects.create(alert=alert, at=AT, kind="rank.entered", rank=3)
    AlertAttempt.objects.create(firing=firing, alert=alert, at=AT, status=500)
    reply = admin_client.post(f"/admin/rankings/alert/{alert.id}/delete/", {"post": "yes"})
    assert reply.status_code == 302
    assert (
        not Alert.objects.exists() and not AlertFiring.objects.exists() and not AlertAttempt.objects.exists()
    )

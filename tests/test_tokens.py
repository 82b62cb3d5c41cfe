"""API tokens: `manage.py ingest_token` shows a key once, the database keeps only its hash, the
admin lists tokens by prefix and revokes them, and a key stored before hashing keeps working."""

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import BaseBackend
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from rankings.models import ApiToken
from rankings.operations.tokens import token_create

pytestmark = pytest.mark.django_db

SALE = {"id": "tok-1", "ts": 1760000000, "productId": "p1", "categories": ["toys"], "qty": 1}


def _ingest_token(*args) -> str:
    out = io.StringIO()
    call_command("ingest_token", *args, stdout=out)
    return out.getvalue()


def _client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _stored_text() -> str:
    """Every stored token row, as the text a database dump would hold."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(json_agg(t)::text, '') FROM rankings_apitoken t")
        return cursor.fetchone()[0]


def test_ingest_token_prints_a_key_once_that_posts_sales_and_is_stored_only_as_a_hash():
    # given a shop's user made with the permission to post sales
    printed = _ingest_token("shop", "--permission", "add_sale")
    # then the command printed one line, `token <key>`
    assert printed.count("\n") == 1 and printed.startswith("token ")
    key = printed.split()[1]
    assert len(key) >= 40
    # and the key posts sales
    reply = _client(key).post("/v1/sales", {"events": [SALE]}, format="json")
    assert reply.status_code == 200, reply.content
    # and the database holds neither the key nor most of it
    stored = _stored_text()
    assert key not in stored and key[: ApiToken.PREFIX_LENGTH + 4] not in stored
    assert key[: ApiToken.PREFIX_LENGTH] in stored


def test_ingest_token_for_an_existing_user_adds_a_token_and_the_permissions_named():
    user = get_user_model().objects.create_user("reader")
    first = _ingest_token("reader").split()[1]
    second = _ingest_token("reader", "--permission", "view_status", "--permission", "add_engagement").split()[
        1
    ]

    user = get_user_model().objects.get(pk=user.pk)
    assert first != second and user.api_tokens.count() == 2
    assert user.has_perm("rankings.view_status") and user.has_perm("rankings.add_engagement")
    assert not user.has_perm("rankings.add_sale")


def test_ingest_token_refuses_an_unknown_permission_and_makes_nothing():
    with pytest.raises(CommandError, match="no_such_thing"):
        _ingest_token("shop", "--permission", "no_such_thing")
    assert not ApiToken.objects.exists() and not get_user_model().objects.filter(username="shop").exists()


def test_the_first_setup_prints_an_ingest_token_once_and_it_posts_sales():
    first, again = io.StringIO(), io.StringIO()
    call_command("setup_site", "--no-demo", stdout=first)
    call_command("setup_site", "--no-demo", stdout=again)

    key = first.getvalue().split("ingest token (keep it; shown once): ")[1].split()[0]
    assert _client(key).post("/v1/sales", {"events": [SALE]}, format="json").status_code == 200
    assert "token" not in again.getvalue() and ApiToken.objects.count() == 1


@pytest.mark.parametrize(
    "header",
    [
        b"Token not-a-key",
        b"Token " + b"A" * 10_000,
        b"Token abcdefgh\x00ijklmnopqrstuvwxyz0123456789",
        b"Token \xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4\xf3\xf2\xf1\xf0\xef\xee\xed\xec",
        b"Token",
        b"Token a b",
    ],
)
def test_a_malformed_key_is_refused_with_401_json_whatever_its_bytes(api, header):
    token_create(user=get_user_model().objects.create_user("shop"))

    reply = api.post(
        "/v1/sales", {"events": [SALE]}, format="json", HTTP_AUTHORIZATION=header.decode("latin-1")
    )

    assert reply.status_code == 401
    assert set(reply.json()) == {"error"}


def test_a_key_that_shares_its_prefix_with_another_is_told_apart_by_its_hash(ingest_user):
    key = token_create(user=ingest_user)
    # a stored token whose prefix is the same, another user's
    other = get_user_model().objects.create_user("other")
    ApiToken.objects.create(prefix=key[: ApiToken.PREFIX_LENGTH], digest="0" * 64, user=other)
    forged = key[: ApiToken.PREFIX_LENGTH] + "x" * (len(key) - ApiToken.PREFIX_LENGTH)

    assert _client(forged).post("/v1/sales", {"events": [SALE]}, format="json").status_code == 401
    assert _client(key).post("/v1/sales", {"events": [SALE]}, format="json").status_code == 200


def test_authenticating_costs_one_lookup_and_records_use_at_most_hourly(ingest_user):
    key = token_create(user=ingest_user)
    client = _client(key)
    client.get("/v1/status")  # the first use is recorded
    used = ApiToken.objects.get().last_used
    assert used is not None

    with CaptureQueriesContext(connection) as queries:
        assert client.get("/v1/status").status_code == 200

    token_queries = [q["sql"] for q in queries if "rankings_apitoken" in q["sql"]]
    assert len(token_queries) == 1 and token_queries[0].startswith("SELECT")
    assert ApiToken.objects.get().last_used == used


def test_an_inactive_users_token_is_refused(ingest_user):
    key = token_create(user=ingest_user)
    ingest_user.is_active = False
    ingest_user.save()

    reply = _client(key).post("/v1/sales", {"events": [SALE]}, format="json")

    assert reply.status_code == 401


# --- admin -------------------------------------------------------------------------


def test_the_admin_lists_tokens_by_prefix_and_never_shows_a_key(admin_client, ingest_user):
    key = token_create(user=ingest_user)

    listing = admin_client.get("/admin/rankings/apitoken/").content.decode()
    token = ApiToken.objects.get()
    change = admin_client.get(f"/admin/rankings/apitoken/{token.pk}/change/").content.decode()

    assert key[: ApiToken.PREFIX_LENGTH] in listing and "ingest-test" in listing
    for page in (listing, change):
        assert key not in page and token.digest not in page
    assert admin_client.get("/admin/rankings/apitoken/add/").status_code == 403


def test_the_admin_revokes_a_token_and_its_key_stops_working(admin_client, ingest_user):
    key = token_create(user=ingest_user)
    kept = token_create(user=ingest_user)
    revoked = ApiToken.objects.get(prefix=key[: ApiToken.PREFIX_LENGTH])

    reply = admin_client.post(
        "/admin/rankings/apitoken/", {"action": "revoke", "_selected_action": [revoked.pk]}, follow=True
    )

    assert reply.status_code == 200 and "Revoked 1 token" in reply.content.decode()
    assert _client(key).post("/v1/sales", {"events": [SALE]}, format="json").status_code == 401
    assert _client(kept).post("/v1/sales", {"events": [SALE]}, format="json").status_code == 200


# --- tokens made before hashing --------------------------------------------------


BEFORE = [("rankings", "0018_snapshots")]


def _migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.mark.django_db(transaction=True)
def test_a_key_stored_in_the_clear_keeps_working_once_hashed_and_the_clear_copy_is_gone(ingest_user):
    latest = list(MigrationExecutor(connection).loader.graph.leaf_nodes())
    key = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"  # as DRF's authtoken made them: 40 hex digits
    try:
        # given a deployment whose tokens were stored in the clear (DRF's authtoken table)
        _migrate(BEFORE)
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamptz NOT NULL,"
                " user_id integer NOT NULL UNIQUE)"
            )
            cursor.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [key, ingest_user.pk])
        # when it migrates
    finally:
        _migrate(latest)
    # then the same key posts sales, and no table holds it any more
    assert _client(key).post("/v1/sales", {"events": [SALE]}, format="json").status_code == 200
    assert "authtoken_token" not in connection.introspection.table_names()
    assert key not in _stored_text() and json.loads(_stored_text())[0]["user_id"] == ingest_user.pk


PERMISSIONS = [
    "rankings.add_sale",
    "rankings.add_engagement",
    "rankings.view_status",
    "catalogue.change_product",
    "rankings.no_such_permission",
]


def _holder(name: str, *, own=(), through_group=(), superuser=False, active=True):
    """A user holding the `own` permissions itself and `through_group` through a group of its own."""
    user = get_user_model().objects.create_user(name, is_superuser=superuser, is_active=active)
    user.user_permissions.add(*(Permission.objects.get(codename=c) for c in own))
    if through_group:
        group = Group.objects.create(name=f"{name}-group")
        group.permissions.add(*(Permission.objects.get(codename=c) for c in through_group))
        user.groups.add(group)
    return user


@pytest.mark.parametrize(
    "holder",
    [
        {"own": ["add_sale"]},
        {"through_group": ["add_engagement", "view_status"]},
        {"own": ["add_sale"], "through_group": ["add_sale", "change_product"]},
        {"superuser": True},
        {"superuser": True, "active": False},
        {"own": ["add_sale"], "active": False},
        {},
    ],
)
def test_a_token_grants_what_django_grants_its_holder(holder):
    user = _holder("holder", **holder)
    token = ApiToken.objects.of_key(token_create(user=user))

    fresh = get_user_model().objects.get(pk=user.pk)  # no permissions remembered
    assert {p: token.grants(p) for p in PERMISSIONS} == {p: fresh.has_perm(p) for p in PERMISSIONS}


def test_a_permission_held_through_a_group_lets_a_token_post_and_costs_no_statement_of_its_own():
    allowed = _client(token_create(user=_holder("grouped", through_group=["add_sale"])))
    refused = _client(token_create(user=_holder("viewer", own=["view_status"])))

    statements = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    # Recorded as sent: the request's start empties the log CaptureQueriesContext reads.
    with connection.execute_wrapper(record):
        assert allowed.post("/v1/sales", {"events": [SALE]}, format="json").status_code == 200
    assert refused.post("/v1/sales", {"events": [{**SALE, "id": "tok-2"}]}, format="json").status_code == 403

    reading_permissions = [sql for sql in statements if "auth_permission" in sql]
    assert len(reading_permissions) == 1 and "rankings_apitoken" in reading_permissions[0]


class GrantsEverything(BaseBackend):
    """A permission backend of a shop's own, which a token's lookup knows nothing of."""

    def has_perm(self, user_obj, perm, obj=None):
        return True


def test_with_a_backend_of_its_own_a_token_is_answered_by_django(settings):
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, f"{__name__}.GrantsEverything"]
    client = _client(token_create(user=_holder("unlisted")))

    assert client.post("/v1/sales", {"events": [SALE]}, format="json").status_code == 200


def test_a_token_not_found_by_its_key_grants_what_django_grants():
    user = _holder("plain", through_group=["add_sale"])
    token_create(user=user)
    token = ApiToken.objects.get(user=user)  # as the admin reads it: no permissions read with it

    assert token.grants("rankings.add_sale") and not token.grants("rankings.view_status")

"""The operator's admin: status, rebuild, compare, switch; staff only, POST only, each with its permission."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from rankings.engine import store
from rankings.models import RankingVersion
from rankings.operations import backfill

from .rankings_helpers import Shop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def shop():
    shop = Shop()
    shop.send(*[shop.sale(f"p{i % 5}", categories=["toys"], qty=1 + i % 3) for i in range(20)])
    shop.tick()
    return shop


def _staff(*permissions) -> Client:
    user = get_user_model().objects.create_user("operator", password="x", is_staff=True)
    for codename in permissions:
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="rankings")
        )
    client = Client()
    client.force_login(user)
    return client


def test_the_status_page_shows_the_write_path_and_the_chart(admin_client, shop):
    page = admin_client.get("/admin/rankings/rankingversion/status/")

    assert page.status_code == 200
    text = page.content.decode()
    assert "Pending sales" in text and "<svg" in text and "Last ticks" in text


def test_compare_then_switch_from_the_admin(admin_client, shop):
    version = backfill.version_build()

    compared = admin_client.post(f"/admin/rankings/rankingversion/{version.number}/compare/", {"top_n": 10})
    assert compared.status_code == 200
    assert "every one equal" in compared.content.decode()
    switched = admin_client.post(f"/admin/rankings/rankingversion/{version.number}/switch/")
    assert switched.status_code == 302
    assert store.served_version(fresh=True) == version.number
    shop.assert_exact()


def test_a_get_to_an_action_url_changes_nothing(admin_client, shop):
    version = backfill.version_build()
    versions = RankingVersion.objects.count()

    assert admin_client.get(f"/admin/rankings/rankingversion/{version.number}/switch/").status_code == 405
    assert admin_client.get("/admin/rankings/rankingversion/rebuild/").status_code == 405
    assert store.served_version(fresh=True) == 1
    assert RankingVersion.objects.count() == versions


def test_non_staff_are_sent_to_the_login_and_staff_without_the_permission_get_403(shop):
    version = backfill.version_build()
    user = get_user_model().objects.create_user("shopper", password="x")
    client = Client()
    client.force_login(user)
    assert (
        client.post(f"/admin/rankings/rankingversion/{version.number}/switch/").status_code == 302
    )  # to login
    staff = _staff("view_rankingversion")
    assert staff.post(f"/admin/rankings/rankingversion/{version.number}/switch/").status_code == 403
    assert staff.get("/admin/rankings/rankingversion/status/").status_code == 403
    assert staff.post("/admin/rankings/rankingversion/rebuild/").status_code == 403
    assert store.served_version(fresh=True) == 1


def test_a_staff_user_with_the_switch_permission_can_switch(shop):
    version = backfill.version_build()
    staff = _staff("view_rankingversion", "switch_rankings")

    assert staff.post(f"/admin/rankings/rankingversion/{version.number}/switch/").status_code == 302
    assert store.served_version(fresh=True) == version.number


def test_actions_need_the_csrf_token(shop):
    version = backfill.version_build()
    user = get_user_model().objects.create_superuser("boss", "boss@example.com", "x")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)

    assert client.post(f"/admin/rankings/rankingversion/{version.number}/switch/").status_code == 403
    assert store.served_version(fresh=True) == 1


def test_the_versions_list_offers_a_rebuild(admin_client, shop):
    page = admin_client.get("/admin/rankings/rankingversion/")

    assert page.status_code == 200
    assert "Rebuild into a new version" in page.content.decode()


def test_a_rebuild_started_from_the_admin_runs_on_the_worker_and_switches(
    admin_client, shop, worker_and_beat
):
    from .processes import wait_until

    reply = admin_client.post("/admin/rankings/rankingversion/rebuild/", {"activate": "on"})
    assert reply.status_code == 302
    wait_until(
        lambda: store.served_version(fresh=True) == 2, timeout=60, what="the switch", watch=worker_and_beat
    )
    assert RankingVersion.objects.get(number=2).state == RankingVersion.State.ACTIVE
    shop.assert_exact()

"""The admin's lists of facts (engagement events, the ingest log) at the size of a busy shop: each
page reads a bounded number of rows, whatever the table holds."""

import datetime as dt
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from catalogue.admin_lists import CappedCountPaginator
from rankings.engine.tree import TreeChange
from rankings.models import IngestLog

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db


def _page(admin_client, name: str, query: str = "") -> tuple:
    with CaptureQueriesContext(connection) as queries:
        reply = admin_client.get(reverse(f"admin:rankings_{name}_changelist") + query)
    assert reply.status_code == 200
    table = f'"rankings_{name}"'
    return reply, [q["sql"] for q in queries if table in q["sql"]]


def _unbounded(statements: list[str]) -> list[str]:
    """Statements that read every row of the table: a count or a distinct with no LIMIT."""
    return [
        sql
        for sql in statements
        if ("COUNT(" in sql.upper() or "DISTINCT" in sql.upper()) and "LIMIT" not in sql.upper()
    ]


@pytest.fixture
def capped(monkeypatch):
    monkeypatch.setattr(CappedCountPaginator, "cap", 200)


def test_the_engagement_list_reads_a_page_not_the_table(admin_client, capped):
    """Views arrive by the billion: a page of the list counts at most LIST_ROWS_COUNTED events,
    lists no distinct days, and takes the newest by the key each day's partition is indexed on."""
    # given 300 views received
    shop = Shop(now=timezone.now().replace(microsecond=0))
    shop.engage(*(shop.engagement(f"p{i}") for i in range(300)))
    # when the list is shown
    reply, statements = _page(admin_client, "engagement")
    # then
    assert reply.context["cl"].result_count == 201  # the cap and one: "more than 200"
    assert not _unbounded(statements)
    page = [sql for sql in statements if "COUNT(" not in sql.upper()]
    assert page and all('ORDER BY "rankings_engagement"."id" DESC' in sql and "LIMIT" in sql for sql in page)


def test_the_engagement_list_is_narrowed_by_day(admin_client):
    shop = Shop(now=timezone.now().replace(microsecond=0))
    shop.engage(
        shop.engagement("p1"),
        shop.engagement("p2", kind="wish"),
        shop.engagement("p3", ago=dt.timedelta(days=1)),
    )

    # as the day filter's own link says it: the day's first instant, with its offset
    midnight = timezone.localtime(shop.now).replace(hour=0, minute=0, second=0)
    reply, _ = _page(admin_client, "engagement", "?" + urlencode({"ts__gte": midnight.isoformat()}))

    assert reply.context["cl"].result_count == 2


def test_the_ingest_log_reads_a_page_not_the_table(admin_client, capped):
    # given 300 batches logged
    IngestLog.objects.bulk_create(
        [IngestLog(source="api", accepted=1, duplicates=0, rejected=0) for _ in range(300)]
    )
    # when the list is shown, and filtered by source
    reply, statements = _page(admin_client, "ingestlog")
    filtered, more = _page(admin_client, "ingestlog", "?source=api")
    # then
    assert reply.context["cl"].result_count == 201  # the cap and one: "more than 200"
    assert filtered.context["cl"].result_count == 201  # the cap and one: "more than 200"
    assert not _unbounded(statements + more)


def test_the_versions_list_reads_no_tree_of_a_deleted_version_and_a_page_of_pending_moves(
    admin_client, monkeypatch
):
    """At a million categories a version's tree is tens of megabytes and every rebuild leaves a
    row: the list reads the trees of the live versions only (none of the deleted ones, and none
    into Python), and shows a page of the pending moves, not every one."""
    from catalogue.models import Category
    from rankings.models import RankingVersion

    # given the first version active, twenty deleted versions that counted with a tree each
    shop = Shop(now=timezone.now().replace(microsecond=0))
    shop.send(shop.sale("p1"))
    shop.tick()
    tree = {f"c{i}": "root" for i in range(500)}
    RankingVersion.objects.bulk_create(
        [RankingVersion(number=n, state="deleted", shards=4, tree=tree) for n in range(2, 22)]
    )
    # and 120 categories moved under a parent in the catalogue, pending a rebuild
    root = Category.objects.create(slug="root", name="Root")
    Category.objects.bulk_create([Category(slug=f"c{i}", name=f"C {i}", parent=root) for i in range(120)])
    # when the list is shown
    with CaptureQueriesContext(connection) as queries:
        reply = admin_client.get(reverse("admin:rankings_rankingversion_changelist"))
    # then no version's tree came into Python, and only a deleted version's size is not worked out
    assert reply.status_code == 200
    listed = reply.context["cl"].result_list
    assert len(listed) == 21 and all("tree" in v.get_deferred_fields() for v in listed)
    sizes = [q["sql"] for q in queries if "jsonb_object_keys" in q["sql"]]
    assert sizes and all("deleted" in sql for sql in sizes)
    # and the pending moves are shown a page at a time, with how many there are
    page = reply.content.decode()
    assert page.count("<td>c") == TreeChange.SHOWN
    assert f"and {120 - TreeChange.SHOWN} more" in page

"""Engagement: POST /v1/engagements, import_engagements, the views and wishes boards, the retention."""

import datetime as dt
import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from catalogue.models import Category, Product
from rankings.engine.partitions import engagement_partitions
from rankings.engine.prune import engine_now, prune
from rankings.ingest import engagement
from rankings.models import Engagement, EngagementId, IngestLog, PendingEngagement, Sale
from rankings.operations.backfill import version_build
from rankings.operations.tokens import token_create
from rankings.serving import memory

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)

DAY = dt.timedelta(days=1)


@pytest.fixture
def engage_api(db):
    user = get_user_model().objects.create_user("engage-test")
    user.user_permissions.add(
        Permission.objects.get(codename="add_engagement", content_type__app_label="rankings")
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=user)}")
    return client


def view(**overrides):
    return {
        "ts": "2026-11-30T08:53:20Z",
        "productId": "p15",
        "categories": ["toys"],
        "kind": "view",
        **overrides,
    }


# --- the API ---------------------------------------------------------------------------


def test_a_batch_is_stored_and_bad_events_are_rejected_with_index_and_reason(engage_api):
    events = [view(id="v-1"), view(kind="like"), view(id="w-1", kind="wish"), view(productId="a b"), view()]

    reply = engage_api.post("/v1/engagements", {"events": events}, format="json")

    assert reply.status_code == 200
    assert reply.json() == {
        "accepted": 3,
        "duplicates": 0,
        "rejected": [
            {"index": 1, "id": None, "error": "kind must be 'view' or 'wish'"},
            {"index": 3, "id": None, "error": "productId must be 1 to 64 characters of A-Z a-z 0-9 . _ : -"},
        ],
    }
    assert sorted(Engagement.objects.values_list("kind", flat=True)) == ["view", "view", "wish"]


def test_an_event_is_stamped_with_the_time_it_was_stored_not_its_own(engage_api):
    before = dt.datetime.now(dt.UTC)
    engage_api.post("/v1/engagements", {"events": [view(), view(kind="wish")]}, format="json")
    after = dt.datetime.now(dt.UTC)

    stamps = list(Engagement.objects.values_list("received_at", flat=True))
    assert len(stamps) == 2 and all(before <= stamp <= after for stamp in stamps)


def test_an_id_deduplicates_and_no_id_counts_every_event(engage_api):
    engage_api.post("/v1/engagements", {"events": [view(id="v-1"), view()]}, format="json")

    reply = engage_api.post(
        "/v1/engagements", {"events": [view(id="v-1"), view(), view(id="v-1", kind="wish")]}, format="json"
    ).json()

    assert reply["accepted"] == 1 and reply["duplicates"] == 1
    assert reply["rejected"] == [{"index": 2, "id": "v-1", "error": "id already used by a different event"}]
    assert Engagement.objects.count() == 3


def test_each_event_of_a_taken_id_is_judged_against_the_event_stored_under_it(engage_api):
    """An id a batch names once is judged by its claim, one it names twice by a lookup first: either
    way against the stored event, not the batch's first of that id."""
    engage_api.post("/v1/engagements", {"events": [view(id="v-1")]}, format="json")

    def post(*events):
        return engage_api.post("/v1/engagements", {"events": list(events)}, format="json").json()

    assert post(view(id="v-1")) == {"accepted": 0, "duplicates": 1, "rejected": []}
    reused = {"id": "v-1", "error": "id already used by a different event"}
    assert post(view(id="v-1", kind="wish")) == {
        "accepted": 0,
        "duplicates": 0,
        "rejected": [{"index": 0, **reused}],
    }
    assert post(view(id="v-1", kind="wish"), view(id="v-1", kind="wish"), view(id="v-2")) == {
        "accepted": 1,
        "duplicates": 0,
        "rejected": [{"index": 0, **reused}, {"index": 1, **reused}],
    }
    assert sorted(Engagement.objects.values_list("event_id", "kind")) == [("v-1", "view"), ("v-2", "view")]


def test_an_event_whose_id_another_holds_makes_no_category_and_no_product(engage_api):
    engage_api.post("/v1/engagements", {"events": [view(id="v-1")]}, format="json")

    reply = engage_api.post(
        "/v1/engagements",
        {"events": [view(id="v-1", productId="p-new", categories=["brand-new"])]},
        format="json",
    ).json()

    assert reply["rejected"] == [{"index": 0, "id": "v-1", "error": "id already used by a different event"}]
    assert not Category.objects.filter(slug="brand-new").exists()
    assert not Product.objects.filter(product_id="p-new").exists()


def test_an_id_longer_than_128_characters_is_rejected(engage_api):
    reply = engage_api.post("/v1/engagements", {"events": [view(id="x" * 129)]}, format="json").json()

    assert reply["rejected"] == [
        {"index": 0, "id": None, "error": "id must be a string of 1 to 128 characters"}
    ]


def test_a_batch_over_10000_events_is_413(engage_api):
    reply = engage_api.post("/v1/engagements", {"events": [view()] * 10_001}, format="json")

    assert reply.status_code == 413
    assert "error" in reply.json()
    assert not Engagement.objects.exists()


def test_a_batch_of_10000_events_is_taken(engage_api):
    reply = engage_api.post("/v1/engagements", {"events": [view()] * 10_000}, format="json")

    assert reply.status_code == 200 and reply.json()["accepted"] == 10_000


def test_without_a_token_or_the_permission_the_batch_is_refused(api, django_user_model):
    assert api.post("/v1/engagements", {"events": [view()]}, format="json").status_code == 401
    # given a user who may add sales but not engagement
    user = django_user_model.objects.create_user("sales-only")
    user.user_permissions.add(Permission.objects.get(codename="add_sale", content_type__app_label="rankings"))
    api.credentials(HTTP_AUTHORIZATION=f"Token {token_create(user=user)}")

    reply = api.post("/v1/engagements", {"events": [view()]}, format="json")

    assert reply.status_code == 403 and set(reply.json()) == {"error"}
    assert not Engagement.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"{}",
        b'{"events": 3}',
        b'{"events": [1, "x", null, [], {"kind": "view"}]}',
        b"{not json",
        b'{"events": [{"ts": "2026-11-30T08:53:20", "productId": "p", "kind": "view"}]}',
        b'{"events": [{"ts": 1e400, "productId": "p", "kind": "view", "categories": "toys"}]}',
        b'{"events": [{"ts": 1, "productId": "p", "kind": "view", "id": 7}]}',
    ],
)
def test_bad_input_is_never_a_500(engage_api, body):
    reply = engage_api.generic("POST", "/v1/engagements", body, content_type="application/json")

    assert reply.status_code in (200, 400)
    assert "error" in reply.json() or "rejected" in reply.json()


def test_engagement_never_counts_as_a_sale(engage_api):
    engage_api.post("/v1/engagements", {"events": [view()]}, format="json")

    assert not Sale.objects.exists()


def test_a_new_product_seen_first_in_views_is_filed_under_its_first_events_categories():
    """As with sales (docs/api.md, Placeholders): the other events' categories count, and link nothing."""
    shop = Shop()

    shop.engage(
        shop.engagement("wide", categories=["c1", "c0"]),
        *[shop.engagement("wide", kind="wish", categories=[f"d{i}", f"e{i}"]) for i in range(30)],
    )

    linked = Product.objects.get(product_id="wide").categories.values_list("slug", flat=True)
    assert sorted(linked) == ["c0", "c1"]
    assert Category.objects.filter(slug="e29").exists()


def test_a_batch_of_one_view_of_a_product_with_no_categories_is_queued_for_all_alone():
    """The queue's row names no category, and the view counts in `all` only."""
    shop = Shop()

    shop.engage(shop.engagement("bare", categories=[]))

    assert list(PendingEngagement.objects.values_list("product_id", "named")) == [("bare", [])]
    shop.tick()
    assert Engagement.objects.get().categories == []
    shop.assert_exact()


def test_each_field_of_a_view_is_stored_as_sent(engage_api):
    """The raw rows go in PostgreSQL's binary format: ids of any printable character, instants to the
    microsecond before 2000 and after, lists of categories of none, one and several, each as sent."""
    events = [
        view(id="vue-é-☃", ts="2026-11-30T08:53:20.123456Z", categories=["toys", "games", "a" * 50]),
        view(id='q"\\n\\', ts="1999-12-31T23:59:59.999999Z", kind="wish"),
        view(ts=1_764_492_800.5, productId="P.9_x:y-z", categories=["toys", "toys"]),
        view(ts=-1.25, categories=[]),
        view(id="z" * 128, productId="a" * 64, categories=["games"]),
    ]

    reply = engage_api.post("/v1/engagements", {"events": events}, format="json")

    assert reply.json() == {"accepted": 5, "duplicates": 0, "rejected": []}
    stored = Engagement.objects.order_by("id").values_list(
        "event_id", "ts", "product_id", "kind", "categories"
    )
    utc = dt.UTC
    assert list(stored) == [
        (
            "vue-é-☃",
            dt.datetime(2026, 11, 30, 8, 53, 20, 123456, tzinfo=utc),
            "p15",
            "view",
            ["toys", "games", "a" * 50],
        ),
        ('q"\\n\\', dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=utc), "p15", "wish", ["toys"]),
        (None, dt.datetime(2025, 11, 30, 8, 53, 20, 500000, tzinfo=utc), "P.9_x:y-z", "view", ["toys"]),
        (None, dt.datetime(1969, 12, 31, 23, 59, 58, 750000, tzinfo=utc), "p15", "view", []),
        ("z" * 128, dt.datetime(2026, 11, 30, 8, 53, 20, tzinfo=utc), "a" * 64, "view", ["games"]),
    ]
    again = engage_api.post("/v1/engagements", {"events": events[:2]}, format="json")
    assert again.json() == {"accepted": 0, "duplicates": 2, "rejected": []}


def test_a_view_too_far_ahead_in_a_batch_of_usual_views_is_rejected_alone():
    """A batch read a field at a time whose latest view is past the future limit is read again one
    view at a time: that view is rejected at its index, the others stored."""
    now = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)
    at = now.timestamp()
    events = [view(ts=at - 60), view(ts=at + 301, kind="wish"), view(ts=at, categories=["games"])]

    result = engagement.engagements_ingest(events=events, now=now)

    assert (result.accepted, result.rejected) == (
        2,
        [{"index": 1, "id": None, "error": "ts is more than 5 minutes in the future"}],
    )
    assert sorted(Engagement.objects.values_list("kind", "categories")) == [
        ("view", ["games"]),
        ("view", ["toys"]),
    ]


# --- the boards --------------------------------------------------------------------------


@pytest.mark.parametrize("events", [8, 9, 10])
def test_a_batch_sent_to_postgresql_in_pieces_is_stored_whole_and_once(monkeypatch, events):
    """A batch's raw rows go to PostgreSQL a few at a time as they are made: every piece, the last
    one whole, short or only the format's end, is stored, none twice."""
    monkeypatch.setattr(engagement, "COPY_ROWS", 3)
    shop = Shop()
    shop.engage(*[shop.engagement(f"p{i % 4}", kind="wish" if i % 5 == 0 else "view") for i in range(events)])

    shop.tick()

    assert Engagement.objects.count() == events
    assert sum(views for _, views in shop.top(metric="views")) == events - (events + 4) // 5
    shop.assert_exact()


def test_views_and_wishes_rank_products_apart_from_sales():
    shop = Shop()
    shop.send(shop.sale("p1", qty=5))
    shop.engage(
        *[shop.engagement("p2") for _ in range(3)],
        shop.engagement("p1"),
        shop.engagement("p1", kind="wish"),
        shop.engagement("p3", kind="wish", categories=()),
    )

    shop.tick()

    assert shop.top(metric="views") == [("p2", 3), ("p1", 1)]
    assert shop.top(metric="wishes") == [("p1", 1)]
    assert shop.top(category="all", metric="wishes") == [("p1", 1), ("p3", 1)]
    assert shop.top(metric="units") == [("p1", 5)]
    shop.assert_exact()


def test_an_event_older_than_the_retention_is_counted_too_old_and_not_stored():
    # given an engine clock
    shop = Shop()
    shop.tick()

    result = shop.engage(shop.engagement("p1", ago=36 * DAY), shop.engagement("p1", ago=34 * DAY))

    assert result.accepted == 2
    assert Engagement.objects.count() == 1
    assert IngestLog.objects.get().too_old == 1


@pytest.mark.usefixtures("partitions_dropped")
def test_retention_drops_old_days_and_boards_stay_exact():
    """Moving the engine's clock past the retention drops whole days of raw events (and their ids);
    every board still equals the recompute, and a rebuild from what is left matches the live one."""
    # given views spread over 40 days, some with ids, boards built
    shop = Shop()
    shop.engage(
        *[
            shop.engagement(
                f"p{d % 3}", ago=d * DAY, event_id=f"v{d}" if d % 2 else None, categories=["toys"]
            )
            for d in range(40)
        ]
    )
    shop.tick()
    shop.assert_exact()
    days_before = len(engagement_partitions())

    # when the clock passes the retention of the oldest days, and the prune runs
    shop.advance(days=10)
    shop.tick()
    report = prune()

    # then the days older than 35 days behind the engine's clock are gone, whole
    cutoff = engine_now() - dt.timedelta(days=35)
    assert report.dropped
    assert len(engagement_partitions()) == days_before - len(report.dropped)
    assert all(day is None or day + DAY > cutoff for _, day in engagement_partitions())
    assert not Engagement.objects.filter(ts__lt=cutoff - DAY).exists()
    assert not EngagementId.objects.filter(ts__lt=cutoff).exists()
    shop.assert_exact()
    # and a rebuild from the raw events kept matches the live boards
    version = version_build(activate=True)
    assert version.state == "active"
    shop.assert_exact()


def test_a_resend_within_the_retention_is_a_duplicate():
    shop = Shop()
    event = shop.engagement("p1", event_id="v-1", ago=30 * DAY)
    shop.engage(event)
    shop.tick()

    result = shop.engage(event)

    assert (result.accepted, result.duplicates) == (0, 1)


def test_a_burst_of_views_is_one_write_per_board_member():
    """Coalesced: 1,000 views of one product make one change per board of it, not 1,000."""
    shop = Shop()
    shop.engage(*[shop.engagement("hot") for _ in range(1000)])

    report = shop.tick()

    windows = 4
    boards = 2  # toys and all, views only
    assert report.redis_writes == windows * boards
    assert not PendingEngagement.objects.exists()


# --- the import --------------------------------------------------------------------------


def test_import_engagements_reads_json_lines_and_csv(tmp_path):
    jsonl = tmp_path / "views.jsonl"
    jsonl.write_text("\n".join(json.dumps(view(id=f"v{i}")) for i in range(3)) + "\n" + '{"kind": "x"}\n')
    csv = tmp_path / "wishes.csv"
    csv.write_text("ts,productId,kind,categories\n2026-11-30T08:00:00Z,p1,wish,toys|gifts\n")

    call_command("import_engagements", str(jsonl), "--no-progress")
    call_command("import_engagements", str(csv), "--no-progress")

    assert Engagement.objects.count() == 4
    assert (tmp_path / "views.jsonl.rejected.jsonl").exists()
    assert Engagement.objects.get(kind="wish").categories == ["toys", "gifts"]


# --- reads and pages ---------------------------------------------------------------------


def _viewed_shop():
    shop = Shop()
    shop.send(shop.sale("p1", qty=2, amount="10.00"), shop.sale("p2", qty=1, amount="3.00"))
    shop.engage(
        *[shop.engagement("p2") for _ in range(5)],
        *[shop.engagement("p1") for _ in range(2)],
        shop.engagement("p1", kind="wish"),
    )
    shop.tick()
    return shop


def test_every_read_takes_metric_views_or_wishes(api):
    _viewed_shop()

    top = api.get("/v1/categories/toys/top?metric=views&window=1h").json()
    rank = api.get("/v1/products/p1/rank?category=toys&metric=wishes&window=1h").json()
    ranks = api.get("/v1/products/p1/ranks?metric=views&window=1h").json()
    neighbors = api.get("/v1/products/p1/neighbors?category=toys&metric=views&window=1h&n=1").json()

    assert [(i["productId"], i["views"], i["wishes"], i["units"], i["revenue"]) for i in top["items"]] == [
        ("p2", 5, 0, 1, "3.00"),
        ("p1", 2, 1, 2, "10.00"),
    ]
    assert (rank["rank"], rank["wishes"], rank["views"], rank["units"]) == (1, 1, 2, 2)
    assert ranks["metric"] == "views"
    assert [i["productId"] for i in neighbors["items"]] == ["p2", "p1"]
    sales_top = api.get("/v1/categories/toys/top?window=1h").json()
    assert "views" not in sales_top["items"][0]


def test_the_category_page_switches_to_most_viewed_and_the_product_page_shows_view_ranks(client):
    _viewed_shop()

    category = client.get("/c/toys/?metric=views&window=1h").content.decode()
    product = client.get("/p/p1/?window=1h").content.decode()

    assert "Most viewed" in category and "Most wished for" in category
    assert category.index("p2") < category.index("p1")
    assert "Most viewed" in product and "#2</strong> in" in product


def test_the_demo_sends_views_and_wishes_with_the_sales_skew():
    from rankings.operations.demo import DemoShape, demo_seed

    shape = DemoShape(sales=1000, days=1, categories=5, products=100)

    report = demo_seed(shape=shape, seed=1, now=dt.datetime(2026, 3, 2, tzinfo=dt.UTC))

    events = Engagement.objects.count()
    assert report.engagement.accepted == events == round(1000 * 20.1)
    assert 50 <= Engagement.objects.filter(kind="wish").count() <= 150  # 100 expected
    hot = Engagement.objects.filter(categories__contains=["cat0"]).count() / events
    assert 0.37 <= hot <= 0.43  # 40% drawn in the hot category, as the sales are
    # a second run finds only duplicates
    again = demo_seed(shape=shape, seed=1, now=dt.datetime(2026, 3, 2, tzinfo=dt.UTC))
    assert again.engagement.duplicates == events


def test_the_status_shows_engagement_rate_lag_and_retention(admin_client):

    shop = Shop(dt.datetime.now(dt.UTC))  # the status's rates are by the wall clock
    shop.engage(*[shop.engagement("p1", ago=d * DAY) for d in range(3)])
    shop.tick()
    shop.engage(shop.engagement("p2"))
    memory.forget_all("status")

    figures = admin_client.get("/v1/status").json()

    engagement = figures["engagement"]
    assert engagement["pending"] == 1 and engagement["lagSeconds"] >= 0
    assert engagement["accepted"] == 4 and figures["accepted"] == 0  # sales' figures count no views
    assert engagement["retentionDays"] == 35
    # the oldest day kept holds the oldest view (or an older day other tests left, as partitions outlive rows)
    assert engagement["oldestDayKept"] <= (shop.now - 2 * DAY).date().isoformat()
    assert engagement["oldestDayKept"] == min(d for _, d in engagement_partitions() if d).date().isoformat()
    assert (
        "Engagement (views and wishes)" in admin_client.get(reverse("admin:rankings_status")).content.decode()
    )


def test_the_admin_lists_engagement_events(admin_client):
    shop = Shop()
    shop.engage(shop.engagement("p-admin", kind="wish"))

    page = admin_client.get(reverse("admin:rankings_engagement_changelist") + "?kind=wish")

    assert page.status_code == 200 and "p-admin" in page.content.decode()


def test_views_queued_across_a_reshard_are_counted_once_in_each_board():
    """A switch to another shard count re-keys the engagement queue: rows split by the new layout,
    and the rows of one group that meet on one new shard count once."""
    from rankings.engine.shards import Layout, active

    # given views counted, and more queued in several categories each
    shop = Shop()
    views = [shop.engagement(f"p{i % 5}", categories=[f"c{i % 7}", f"c{(i + 3) % 7}"]) for i in range(60)]
    shop.engage(*views)
    shop.tick()
    shop.engage(
        *views, *[shop.engagement("p9", kind="wish", categories=["c1", "c2", "c3"]) for _ in range(5)]
    )
    # when a version with 16 shards is built and switched to while they wait
    version = version_build(layout=Layout(16), activate=True)
    assert (active().number, active().layout) == (version.number, Layout(16))
    # then the next tick counts each of them once on each of its boards
    shop.advance(seconds=30)
    shop.tick()
    assert not PendingEngagement.objects.exists()
    shop.assert_exact()
    assert shop.top(category="all", window="1h", metric="views")[0] == ("p0", 24)


def test_the_ids_tables_keep_no_index_that_no_query_reads():
    """Each index on an ids' table is written for every event ingested: their keys serve the duplicate
    checks (and the admin's search by a sale id's beginning, in the C collation), the engagement ids'
    ts index the prune; a pattern-ops copy of a key serves nothing."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_opclass o ON o.oid = ANY (i.indclass)"
            " WHERE i.indrelid = ANY (%s::regclass[]) AND o.opcname LIKE '%%pattern_ops'",
            [[EngagementId._meta.db_table, "rankings_saleid"]],
        )
        assert cursor.fetchall() == []

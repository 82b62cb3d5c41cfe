"""History from the sales: a rebuild records every hour of its version's history, each
equal to the recompute as of its hour from every sale known; a switch serves it, live ticks carry it
on, a switch back restores the old one; where no snapshot exists, replies and pages say so."""

import datetime as dt
import time

import psycopg
import pytest
from django.db import connection
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from catalogue.models import Category, Product
from rankings.conf import rankings_settings
from rankings.engine import history, hourly
from rankings.engine.prune import prune
from rankings.engine.readers import own_transaction, snapshot_export
from rankings.engine.recompute import boards_recompute, snapshots_recompute
from rankings.engine.shards import ALL, Layout, active, layout_plan, part_name, version_layout
from rankings.engine.tree import version_tree
from rankings.models import Sale, Snapshot, SnapshotHour
from rankings.operations import backfill
from rankings.operations.status import status_read
from rankings.serving import memory

from .rankings_helpers import START, Shop

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = 3600


def _iso(t: int) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat().replace("+00:00", "Z")


def _stored(version: int) -> dict:
    return {
        (int(at.timestamp()), window, metric, category): products
        for at, window, metric, category, products in Snapshot.objects.filter(version=version).values_list(
            "at", "window", "metric", "category", "products"
        )
    }


def _hours_of(version: int) -> list[int]:
    return sorted(
        int(at.timestamp())
        for at in SnapshotHour.objects.filter(version=version).values_list("at", flat=True)
    )


def _last_sale_id() -> int:
    return Sale.objects.order_by("-id").values_list("id", flat=True).first() or 0


def _catalogue():
    toys = Category.objects.create(slug="toys", name="Toys")
    games = Category.objects.create(slug="games", name="Games")
    for i in range(12):
        product = Product.objects.create(product_id=f"p{i}", name=f"Thing {i}", price_cents=250)
        product.categories.set([toys] if i % 3 else [toys, games])


def _three_days_imported(shop: Shop):
    """Three days of sales before the install (some exactly on an hour, some returned), views and
    wishes, one tick; then late sales of two days before and a tick an hour and a half on."""
    _catalogue()
    events = []
    for h in range(72):
        for i in range(12):
            if (h * 7 + i * 3) % 5 == 0:
                ago = dt.timedelta(hours=h, minutes=0 if (h + i) % 4 == 0 else 7 * i % 60)
                events.append(
                    shop.sale(
                        f"p{i}", categories=["toys"], qty=1 + (h + i) % 6, ago=ago, event_id=f"o{h}-{i}"
                    )
                )
    shop.send(*events)
    returned = [events[0], events[len(events) // 2], events[-1]]
    shop.send(*[shop.sale(e["productId"], categories=["toys"], qty=-1, returnOf=e["id"]) for e in returned])
    shop.engage(*[shop.engagement(f"p{i}", kind="view", ago=dt.timedelta(hours=i * 2)) for i in range(10)])
    shop.engage(shop.engagement("p3", kind="wish", ago=dt.timedelta(hours=30)))
    shop.tick()  # the install: 12:00, its first snapshot
    shop.advance(hours=1, minutes=30)
    shop.send(
        shop.sale(
            "p11", categories=["toys", "games"], qty=40, ago=dt.timedelta(hours=49)
        ),  # late, of two days before
        shop.sale("p10", categories=["toys"], qty=2, ago=dt.timedelta(minutes=50)),
    )
    shop.tick()  # 13:30: takes 13:00


def _rank(snapshots: dict, at: int, window: str, metric: str, category: str, product: str) -> int | None:
    products = snapshots.get((at, window, metric, category), [])
    return products.index(product) + 1 if product in products else None


def test_a_rebuild_records_the_history_of_every_hour_from_the_sales_and_a_switch_back_restores_the_old(api):
    shop = Shop()
    _three_days_imported(shop)
    live = _stored(1)
    assert _hours_of(1) == [int(START.timestamp()), int(START.timestamp()) + HOUR]

    backfill.version_build(activate=True)
    memory.forget_all()
    first_sale = min(Sale.objects.values_list("counted_at", flat=True))
    first = -(-int(first_sale.timestamp()) // HOUR) * HOUR
    hours = list(range(first, int(START.timestamp()) + HOUR + 1, HOUR))
    assert len(hours) >= 72
    # every hour, every board of 1d and 7d, every metric: the recompute as of that hour of every sale
    expected = snapshots_recompute(hours=hours, earlier_sale_id=0)
    assert _stored(2) == expected
    assert _hours_of(2) == hours
    # the late sale of two days before is in the history, though no tick saw it by then
    late_hour = int(START.timestamp()) - 47 * HOUR  # the first hour after it
    assert "p11" in expected[(late_hour, "1d", "units", "games")]

    # what the API serves is that history
    latest = hours[-1]
    for product in ("p0", "p3", "p11"):
        points = api.get(f"/v1/products/{product}/history?category=toys&window=7d&days=32").json()["points"]
        assert points == [
            {"at": _iso(h), "rank": _rank(expected, h, "7d", "units", "toys", product)} for h in hours
        ]
    then = latest - 24 * HOUR
    now_t = shop.now.timestamp()
    for window, metric, category in (
        ("1d", "units", "toys"),
        ("7d", "revenue", "games"),
        ("1d", "views", "toys"),
    ):
        board = [
            pid
            for pid, _ in boards_recompute(shard=0, layout=Layout(1), now=now_t).get(
                (window, metric, category), []
            )
        ]
        then_ranks = {pid: i + 1 for i, pid in enumerate(expected.get((then, window, metric, category), []))}
        top = api.get(f"/v1/categories/{category}/top?window={window}&metric={metric}&limit=100").json()
        assert [(i["productId"], i["rankThen"]) for i in top["items"]] == [
            (p, then_ranks.get(p)) for p in board
        ]
        movers = api.get(f"/v1/categories/{category}/movers?window={window}&metric={metric}&limit=100").json()
        assert movers["then"] == _iso(then)
        moved = [
            (r, p, then_ranks.get(p)) for r, p in enumerate(board[: rankings_settings.SNAPSHOT_DEPTH], 1)
        ]
        moved = [m for m in moved if m[2] is None or m[2] > m[0]]
        moved.sort(key=lambda m: (m[2] is not None, -((100 * (m[2] - m[0])) // m[0] if m[2] else 0), m[0]))
        assert [(i["rank"], i["productId"], i["rankThen"]) for i in movers["items"]] == moved

    # live ticks go on from there: the next hours, none missing, none twice, the rebuilt ones untouched
    earlier = _last_sale_id()
    shop.advance(hours=2)
    shop.send(
        *[
            shop.sale(f"p{i}", categories=["toys"], qty=i + 1, ago=dt.timedelta(minutes=11 * i))
            for i in range(8)
        ]
    )
    shop.tick()  # 15:30: takes 14:00 and 15:00
    shop.assert_exact()
    more = [latest + HOUR, latest + 2 * HOUR]
    assert _hours_of(2) == hours + more
    ticked = snapshots_recompute(hours=more, earlier_sale_id=earlier)
    assert _stored(2) == {**expected, **ticked}

    # a switch back serves the old version's history again, carried on with the hours ticked since
    backfill.version_switch(number=1)
    memory.forget_all()
    assert _hours_of(1) == [int(START.timestamp()), int(START.timestamp()) + HOUR, *more]
    assert _stored(1) == {**live, **ticked}
    points = api.get("/v1/products/p3/history?category=toys&window=7d&days=32").json()["points"]
    assert [p["at"] for p in points] == [_iso(h) for h in _hours_of(1)]


def test_a_rebuild_s_history_cuts_each_board_at_the_depth_ties_in_product_order(settings):
    """Boards longer than the snapshot depth, ties at the cut: the first DEPTH ranks, as the recompute."""
    settings.RANKINGS = {**settings.RANKINGS, "SNAPSHOT_DEPTH": 4}
    shop = Shop()
    _three_days_imported(shop)
    backfill.version_build(activate=True)
    hours = _hours_of(2)
    expected = snapshots_recompute(hours=hours, earlier_sale_id=0)
    assert _stored(2) == expected
    assert max(len(products) for products in expected.values()) == 4
    # the boards are longer than the depth (and some tie at the cut: keeping only the products that
    # score above the 4th's drops one of them)
    settings.RANKINGS = {**settings.RANKINGS, "SNAPSHOT_DEPTH": 1000}
    longer = snapshots_recompute(hours=hours, earlier_sale_id=0)
    assert any(len(rows) > 4 for rows in longer.values())


def test_a_rebuild_s_history_counts_each_sale_in_its_categories_ancestors_once_and_by_part_where_split():
    """Games under toys: a sale in both counts once in toys; `all` and toys split by product."""
    shop = Shop()
    _three_days_imported(shop)
    Category.objects.filter(slug="games").update(parent=Category.objects.get(slug="toys"))
    shop.send(shop.sale("g1", categories=["games"], qty=3, ago=dt.timedelta(hours=5)))
    layout = layout_plan(active().layout, split={ALL: 3, "toys": 2})
    backfill.version_build(layout=layout)
    hours = _hours_of(2)
    expected = snapshots_recompute(
        hours=hours, earlier_sale_id=0, tree=version_tree(2), layout=version_layout(2)
    )
    assert _stored(2) == expected
    boards = {category for _, _, _, category in expected}
    assert {part_name(ALL, 0), part_name("toys", 1), "games"} <= boards and "toys" not in boards
    # a sale that names games alone counts in toys too
    assert any(
        "g1" in products for (_, _, _, category), products in expected.items() if category.startswith("toys")
    )


def test_where_no_snapshot_exists_replies_and_pages_say_so(api, client):
    _catalogue()
    shop = Shop()
    shop.send(*[shop.sale(f"p{i}", qty=i + 1) for i in range(4)])
    shop.tick()
    shop.advance(hours=5)
    shop.send(shop.sale("p0", qty=9))
    shop.tick()
    movers = api.get("/v1/categories/toys/movers?window=1d").json()
    assert movers["then"] is None
    assert [(i["rank"], i["rankThen"], i["gainPercent"]) for i in movers["items"]] == [
        (1, None, None),
        (2, None, None),
        (3, None, None),
        (4, None, None),
    ]
    assert all(i["rankThen"] is None for i in api.get("/v1/categories/toys/top?window=1d").json()["items"])
    page = client.get("/c/toys/movers/?window=1d").content.decode()
    assert "no ranks from 24 hours before yet" in page and "previously unranked" not in page
    listed = client.get("/c/toys/?window=1d")
    assert [row.move for row in listed.context["items"]] == [None] * 4


def test_a_versions_history_is_deleted_with_it_and_pruned_after_32_days(admin_client):
    _catalogue()
    shop = Shop()
    shop.send(*[shop.sale(f"p{i}", qty=i + 1, ago=dt.timedelta(hours=i * 5)) for i in range(8)])
    shop.tick()
    backfill.version_build(activate=True)
    assert SnapshotHour.objects.filter(version=2).count() == 36  # 12:00 35 hours before to 12:00
    assert status_read()["snapshots"]["firstAt"] == START - dt.timedelta(hours=35)
    assert (
        "Rank history reaches back to"
        in admin_client.get("/admin/rankings/rankingversion/status/").content.decode()
    )
    backfill.version_build(activate=True)  # 3 active, 2 retired, 1 retired
    assert backfill.versions_expire(now=dt.datetime.now(dt.UTC) + dt.timedelta(days=30)) == [1, 2]
    assert set(Snapshot.objects.values_list("version", flat=True)) == {3}
    assert set(SnapshotHour.objects.values_list("version", flat=True)) == {3}
    # 32 days on, the hours more than 32 days behind the clock go
    shop.advance(days=32, hours=-20)
    shop.tick()
    prune()
    kept = SnapshotHour.objects.filter(version=3).order_by("at").values_list("at", flat=True)
    assert kept[0] >= shop.now - dt.timedelta(days=32)
    assert Snapshot.objects.filter(at__lt=shop.now - dt.timedelta(days=32)).count() == 0
    assert Snapshot.objects.filter(version=3, at__lt=START).exists()  # of the rebuild, within 32 days


def test_a_rebuild_s_history_keeps_product_ids_an_array_literal_would_misread():
    """`NULL` and `null` are product ids like any other: the recorded ranks hold them as strings."""
    shop = Shop()
    toys = Category.objects.create(slug="toys", name="Toys")
    ids = ["NULL", "null", "a:b", "x.y-z_1"]
    for pid in ids:
        Product.objects.create(product_id=pid, name=pid, price_cents=250).categories.set([toys])
    shop.send(
        *[
            shop.sale(pid, categories=["toys"], qty=1 + i, ago=dt.timedelta(hours=3 + i), event_id=f"e{i}")
            for i, pid in enumerate(ids)
        ]
    )
    shop.tick()
    backfill.version_build(activate=True)
    hours = _hours_of(2)
    expected = snapshots_recompute(hours=hours, earlier_sale_id=0)
    assert _stored(2) == expected
    assert {pid for products in expected.values() for pid in products} == set(ids)


def test_a_snapshots_ranks_are_stored_compressed_with_lz4():
    """A rebuild writes tens of thousands of snapshot rows at once; LZ4 compresses them several
    times faster than PostgreSQL's default (pglz)."""
    from django.db import connection

    products = [f"product-{n:06d}" for n in range(1000)]  # 15 kB: compressed, not kept inline
    Snapshot.objects.create(
        version=1, at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), window="1d", metric="units", category="all",
        products=products,
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_column_compression(products), products FROM rankings_snapshot")
        assert cursor.fetchall() == [("lz4", " ".join(products))]


def test_a_rebuild_s_history_ranks_tied_products_in_byte_order():
    """Products tied on every board are ranked by their ids' bytes (punctuation and digits before
    upper case, `_` between upper and lower case), as the live boards rank them."""
    shop = Shop()
    toys = Category.objects.create(slug="toys", name="Toys")
    ids = ["b", "B", "a", "Z", "a0", "_x", ".y", "-z", ":w", "9"]
    for pid in ids:
        Product.objects.create(product_id=pid, name=pid, price_cents=250).categories.set([toys])
    shop.send(
        *[
            shop.sale(pid, categories=["toys"], qty=2, ago=dt.timedelta(hours=3), event_id=f"e{i}")
            for i, pid in enumerate(ids)
        ]
    )
    shop.tick()
    backfill.version_build(activate=True)
    hours = _hours_of(2)
    stored = _stored(2)
    assert stored == snapshots_recompute(hours=hours, earlier_sale_id=0)
    assert stored[(hours[-1], "1d", "units", "toys")] == [
        "-z",
        ".y",
        "9",
        ":w",
        "B",
        "Z",
        "_x",
        "a",
        "a0",
        "b",
    ]


@pytest.mark.parametrize("at_once_cells", [0, history.AT_ONCE_CELLS], ids=["hour_by_hour", "at_once"])
def test_a_rebuild_s_history_fills_the_ranks_the_leaders_leave_with_products_below_them(
    settings, monkeypatch, at_once_cells
):
    """Depth 2: the day's leader leaves the window while the second and a product far below it stay,
    sold no more: the hour's two ranks are those two, as the recompute has them, though only one
    product reaches the score the last hour was cut at; ranked hour by hour or every hour at once."""
    settings.RANKINGS = {**settings.RANKINGS, "SNAPSHOT_DEPTH": 2}
    monkeypatch.setattr(history, "AT_ONCE_CELLS", at_once_cells)
    shop = Shop()
    toys = Category.objects.create(slug="toys", name="Toys")
    for pid in "abc":
        Product.objects.create(product_id=pid, name=pid, price_cents=250).categories.set([toys])
    shop.send(
        shop.sale("a", categories=["toys"], qty=9, ago=dt.timedelta(hours=30)),
        shop.sale("c", categories=["toys"], qty=2, ago=dt.timedelta(hours=20)),
        shop.sale("b", categories=["toys"], qty=8, ago=dt.timedelta(hours=10)),
    )
    shop.tick()
    backfill.version_build(activate=True)
    stored = _stored(2)
    assert stored == snapshots_recompute(hours=_hours_of(2), earlier_sale_id=0)
    days = [products for (_, window, metric, category), products in sorted(stored.items())
            if (window, metric, category) == ("1d", "units", "toys")]  # fmt: skip
    assert ["a", "b"] in days and ["b", "c"] in days


def test_a_rebuild_s_progress_through_the_history_is_seen_by_others_as_it_goes():
    """The admin reads a build's progress from another connection: each category's step of the
    history shows there at once, not when the history commits."""
    shop = Shop()
    _three_days_imported(shop)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    seen = []
    with psycopg.connect(**params, autocommit=True) as other:

        def progress(fraction: float, message: str) -> None:
            if message.startswith("recorded the hourly history"):
                (shown,) = other.execute(
                    "SELECT progress FROM rankings_rankingversion WHERE number = 2"
                ).fetchone()
                seen.append((fraction, shown))

        backfill.version_build(progress=progress)
    # toys, games and `all`, each seen by the other connection as it was reported
    assert len(seen) == 3
    assert all(shown == pytest.approx(fraction) for fraction, shown in seen)
    assert seen[-1][0] == pytest.approx(backfill.PROGRESS_NAMES)


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    first=st.integers(0, 60 * 24),
    widest=st.integers(0, 7 * 24),
    before=st.integers(0, 40 * 24),
    hours=st.integers(0, 60 * 24),
)
def test_the_facts_are_read_in_spans_that_cover_the_hours_once_and_share_the_sales_alike(
    first, widest, before, hours
):
    """Whatever the hours (the earliest sale's hour `before` hours before the history's first, perhaps
    before the read begins a window's length ahead of it), the spans cover the read from its start to
    one past the last hour, each once and in order, each cut on an hour; from the earliest sale on,
    no span holds more than its share of the hours and one, so no reader waits on a span three times
    another's."""
    start, begin, end = (first - widest) * HOUR, (first - before) * HOUR, (first + hours) * HOUR + 1
    spans = hourly.spans(start, begin, end)
    assert spans[0][0] == start and spans[-1][1] == end
    assert all(lo < hi and hi == next_lo for (lo, hi), (next_lo, _) in zip(spans, spans[1:], strict=False))
    assert all(lo % HOUR == 0 for lo, _ in spans[1:])
    sales_from = max(start, begin)
    share = (end - sales_from) / hourly.SPANS + HOUR
    assert all(hi - max(lo, sales_from) <= share for lo, hi in spans)


@pytest.mark.django_db
def test_a_span_that_fails_ends_the_read_at_once_with_its_own_error_and_no_query_left_running(monkeypatch):
    """One reader's query fails while the other's sleeps, two spans still to read: the read raises
    that failure, not what a span on its aborted connection would, at once, the sleeping query
    cancelled rather than waited for, and no other span begun."""
    # The second of four spans of an hour each fails after 0.2 s; the others sleep 20 s.
    monkeypatch.setattr(
        hourly,
        "_HOURLY",
        "SELECT pg_sleep(CASE WHEN %(lo)s::bigint = 3600 THEN 0.2 ELSE 20 END),"
        " 1 / (CASE WHEN %(lo)s::bigint = 3600 THEN 0 ELSE 1 END)",
    )
    with own_transaction() as own, own.cursor() as cursor:
        snapshot = snapshot_export(cursor)
        started = time.monotonic()
        with pytest.raises(psycopg.errors.DivisionByZero):
            hourly.Hourly.read(snapshot, 0, 4 * HOUR, earliest=None)
        assert time.monotonic() - started < 10
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep%%' AND state = 'active'"
        )
        assert cursor.fetchone() == (0,)

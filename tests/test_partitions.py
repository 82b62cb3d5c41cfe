"""Raw sales are partitioned by month of counted_at; event ids stay unique across every month."""

import datetime as dt
import threading
import time

import pytest
from django.db import connection, transaction

from rankings import tasks
from rankings.engine import partitions, recompute
from rankings.engine.partitions import partition_name, sale_partitions
from rankings.engine.tree import EXPAND_SQL, NAMED_SQL, Tree
from rankings.ingest.sales import DUPLICATE_ID, sales_ingest
from rankings.models import Sale, SaleId
from rankings.operations import backfill

from .rankings_helpers import Shop

NOW = dt.datetime(2026, 6, 15, 12, 0, tzinfo=dt.UTC)


@pytest.mark.django_db
def test_a_batch_within_known_months_asks_nothing_and_one_across_an_unknown_month_makes_it(
    monkeypatch, django_assert_num_queries
):
    """A batch's least and greatest instants tell when every month between them is known; a month
    between two known ones that is not is still made."""
    january, february, march = (dt.datetime(2031, month, 1, tzinfo=dt.UTC) for month in (1, 2, 3))
    monkeypatch.setattr(partitions, "_known", {january, march})
    within = [january + dt.timedelta(days=day, hours=hour) for day in range(31) for hour in (0, 23)]
    with django_assert_num_queries(0):
        assert partitions.sale_partitions_ensure(within) == []
    across = [january + dt.timedelta(days=4), march + dt.timedelta(days=2), february + dt.timedelta(days=9)]
    assert partitions.sale_partitions_ensure(across) == [partition_name(february)]


def _partition_of(event_id: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM rankings_sale WHERE event_id = %s", [event_id])
        return cursor.fetchone()[0]


def _sale(event_id, ts, qty=1, **extra):
    return {
        "id": event_id,
        "ts": ts.isoformat(),
        "productId": "p",
        "categories": ["toys"],
        "qty": qty,
        **extra,
    }


@pytest.mark.django_db
def test_a_sale_is_stored_in_the_partition_of_the_month_it_counts_in():
    """New months get their partition on demand; a return counts, and is stored, in its original's month."""
    # when sales of three months arrive, and in June a return of a March sale
    result = sales_ingest(
        events=[
            _sale("march", dt.datetime(2026, 3, 31, 23, 59, tzinfo=dt.UTC), qty=2),
            _sale("april", dt.datetime(2026, 4, 1, tzinfo=dt.UTC)),
            _sale("june", NOW),
            _sale("june-return", NOW, qty=-1, returnOf="march"),
            _sale("ancient", dt.datetime(1999, 12, 31, tzinfo=dt.UTC)),
        ],
        now=NOW,
    )
    # then
    assert result.accepted == 5, result.rejected
    assert [_partition_of(e) for e in ("march", "april", "june", "june-return", "ancient")] == [
        "rankings_sale_p2026_03",
        "rankings_sale_p2026_04",
        "rankings_sale_p2026_06",
        "rankings_sale_p2026_03",
        "rankings_sale_p_before",
    ]
    assert sorted(SaleId.objects.values_list("event_id", flat=True)) == sorted(
        Sale.objects.values_list("event_id", flat=True)
    )


@pytest.mark.django_db
def test_an_id_reused_in_another_month_is_still_told_apart_from_a_resend():
    """Uniqueness of event ids spans every partition: a resend is a duplicate, a reuse is rejected."""
    # given a sale in January
    january = dt.datetime(2026, 1, 10, tzinfo=dt.UTC)
    sales_ingest(events=[_sale("x", january)], now=NOW)
    # when the same event is resent, and its id reused for a sale in June
    result = sales_ingest(events=[_sale("x", january), _sale("x", NOW)], now=NOW)
    # then
    assert (result.accepted, result.duplicates) == (0, 1)
    assert result.rejected == [{"index": 1, "id": "x", "error": DUPLICATE_ID}]
    assert Sale.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_reusing_an_id_in_different_months_store_one_sale():
    """The second batch waits on the first's id, then sees it committed and rejects its reuse."""
    # given a batch that has stored id "x" in January and has not committed yet
    stored, results = threading.Event(), {}

    def first():
        try:
            with transaction.atomic():
                results["first"] = sales_ingest(
                    events=[_sale("x", dt.datetime(2026, 1, 10, tzinfo=dt.UTC))], now=NOW
                )
                stored.set()
                time.sleep(0.5)
        finally:
            connection.close()

    def second():
        try:
            stored.wait(10)
            results["second"] = sales_ingest(events=[_sale("x", NOW)], now=NOW)
        finally:
            connection.close()

    # when a second batch reuses "x" for a June sale meanwhile
    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    # then
    assert results["first"].accepted == 1
    assert results["second"].rejected == [{"index": 0, "id": "x", "error": DUPLICATE_ID}]
    assert list(Sale.objects.values_list("event_id", "counted_at")) == [
        ("x", dt.datetime(2026, 1, 10, tzinfo=dt.UTC))
    ]


def _explain(query: str, params) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + query, params)
        return "\n".join(line for (line,) in cursor.fetchall())


def _partitions_in(plan: str) -> set[str]:
    return {name for name in sale_partitions() if f" {name} " in plan or plan.endswith(f" {name}")}


@pytest.mark.django_db
def test_a_rebuild_over_the_last_30_days_reads_only_the_recent_partitions():
    """The rebuild's and the recompute's scans of the windows prune every older month."""
    # given sales in each of the last seven months
    shop = Shop(NOW)
    shop.send(*(shop.sale("p", ago=dt.timedelta(days=30 * months)) for months in range(7)))
    assert len(sale_partitions()) >= 8  # seven months and the catch-all of old sales
    recent = {partition_name(dt.datetime(2026, m, 1, tzinfo=dt.UTC)) for m in (5, 6)}
    stop = NOW + dt.timedelta(hours=1)
    oldest = NOW - dt.timedelta(days=30)
    # when the rebuild's queries are planned for the 30-day window (a category tree's too)
    tree = Tree({"board-games": "toys"}).sql_params()
    for query in (
        backfill._aggregate_statement(["count(*)"], NAMED_SQL),
        backfill._aggregate_statement(["count(*)"], EXPAND_SQL),
        backfill._PENDING.format(sums="count(*)"),
    ):
        params = {"all": "all", "oldest": oldest, "stop": stop, "parts": 2, "part": 0, **tree}
        plan = _explain(query, params)
        # then only May and June are read
        assert _partitions_in(plan) == recent, plan
    # and the recompute's
    plan = _explain(
        recompute._RECOMPUTE,
        {
            "all": "all",
            "first": oldest.timestamp(),
            "stop": stop.timestamp(),
            "categories": ["toys"],
            "shard": 0,
            **tree,
        },
    )
    assert _partitions_in(plan) <= recent, plan


@pytest.mark.django_db
def test_the_prune_task_creates_this_and_next_months_partitions_ahead_of_need():
    """So that a live ingest never has to create one itself."""
    # when
    tasks.prune()
    # then
    today = dt.datetime.now(dt.UTC)
    this_month = dt.datetime(today.year, today.month, 1, tzinfo=dt.UTC)
    following = (this_month + dt.timedelta(days=32)).replace(day=1)
    assert {partition_name(this_month), partition_name(following)} <= set(sale_partitions())

"""Ingest under attack and under load: bounded sums, returns checked as stored, no deadlock, database checks."""

import datetime as dt
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import IntegrityError, OperationalError, connection, connections, transaction
from django.db.models import ProtectedError
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from psycopg import errors as pg_errors
from rest_framework.test import APIClient

from catalogue.models import Category, Product
from rankings.engine.partitions import sale_partitions_ensure
from rankings.ingest import sales as ingest_module
from rankings.ingest.sales import MAX_PRODUCT_TOTAL, sales_ingest
from rankings.models import ProductTotal, Sale
from tests.rankings_helpers import Shop

NOW = dt.datetime(2026, 10, 11, 10, 0, tzinfo=dt.UTC)
MAX_AMOUNT = "999999999999.99"


def event(event_id, product="p1", qty=1, **extra):
    base = {
        "id": event_id,
        "ts": "2026-10-11T09:00:00Z",
        "productId": product,
        "categories": ["toys"],
        "qty": qty,
    }
    return base | extra


# --- point 1: what one product can hold stays exact --------------------------------------------


@pytest.mark.django_db
def test_sales_past_the_exact_bound_of_a_product_are_rejected_and_ticks_go_on():
    """A product's lifetime revenue stays at most 2^53 − 1 cents, so every board sum is exact."""
    # given a shop and 92 sales of the largest amount for one product
    shop = Shop()
    events = [shop.sale("p1", amount=MAX_AMOUNT) for _ in range(92)]

    # when they are sent
    result = sales_ingest(events=events, now=shop.now)

    # then the first 90 fit under the bound and the two past it are rejected, each with the limit
    assert result.accepted == 90
    limit = f"{MAX_PRODUCT_TOTAL // 100}.{MAX_PRODUCT_TOTAL % 100:02d}"
    assert [(r["index"], r["id"]) for r in result.rejected] == [(90, "s91"), (91, "s92")]
    for rejection in result.rejected:
        assert rejection["error"] == (
            f"the lifetime revenue of product p1 would pass {limit}, the most a ranking can count exactly"
        )
    assert ProductTotal.objects.get(product_id="p1").revenue_cents == 90 * 99999999999999
    # and a tick folds the accepted ones and every board equals the recompute
    shop.tick()
    shop.assert_exact()
    assert shop.top("toys", "1h", "revenue") == [("p1", 90 * 99999999999999)]


@pytest.mark.django_db
def test_units_past_the_exact_bound_of_a_product_are_rejected():
    # given a product whose lifetime units are 5 short of the bound
    ProductTotal.objects.create(product_id="p1", units=MAX_PRODUCT_TOTAL - 5, revenue_cents=0)

    # when 5 units and then 1 more are sold
    result = sales_ingest(events=[event("a", qty=5, amount="0"), event("b", qty=1, amount="0")], now=NOW)

    # then the 5 fit and the one past the bound is rejected
    assert result.accepted == 1
    assert result.rejected == [
        {
            "index": 1,
            "id": "b",
            "error": f"the lifetime units of product p1 would pass {MAX_PRODUCT_TOTAL}, "
            "the most a ranking can count exactly",
        }
    ]
    assert ProductTotal.objects.get(product_id="p1").units == MAX_PRODUCT_TOTAL


@pytest.mark.django_db(transaction=True)
def test_a_concurrent_batch_that_takes_a_total_to_the_bound_gets_the_next_sale_rejected(monkeypatch):
    """Totals are read unlocked; a batch whose sum passes the bound once a concurrent one commits is
    made again with the totals locked, and then rejects its sale as if it had come second all along."""
    # given a product 5 units short of the bound, and batch A selling those 5 without committing yet
    Category.objects.create(slug="toys", name="Toys", has_sales=True)
    Product.objects.create(product_id="p1", name="Kite", price_cents=0)
    ProductTotal.objects.create(product_id="p1", units=MAX_PRODUCT_TOTAL - 5, revenue_cents=0)
    sale_partitions_ensure([NOW])  # so that B waits for A nowhere before the totals
    reads = []
    real_totals = ingest_module._ledger_totals

    def spied_totals(product_ids, *, lock):
        reads.append(lock)
        return real_totals(product_ids, lock=lock)

    monkeypatch.setattr(ingest_module, "_ledger_totals", spied_totals)

    # when batch B sells 1 more unit, runs into A, and A commits
    result_a, result_b = _race([event("a", qty=5, amount="0")], [event("b", qty=1, amount="0")])

    # then B was checked unlocked, then again with the totals locked (the premise), and its sale rejected
    assert reads == [False, False, True]
    assert result_a.accepted == 1
    assert (result_b.accepted, result_b.rejected) == (
        0,
        [
            {
                "index": 0,
                "id": "b",
                "error": f"the lifetime units of product p1 would pass {MAX_PRODUCT_TOTAL}, "
                "the most a ranking can count exactly",
            }
        ],
    )
    assert ProductTotal.objects.get(product_id="p1").units == MAX_PRODUCT_TOTAL
    assert not Sale.objects.filter(event_id="b").exists()


@pytest.mark.django_db
def test_the_ledger_counts_accepted_sales_only_and_returns_do_not_reduce_it():
    # given
    sales_ingest(
        events=[
            event("a", qty=3, amount="30.00"),
            event("a", qty=3, amount="30.00"),  # a duplicate
            event("b", qty=0),  # invalid
            event("r", qty=-1, returnOf="a"),
            event("c", product="p2", qty=2, amount="1.50"),
        ],
        now=NOW,
    )

    # then
    totals = {t.product_id: (t.units, t.revenue_cents) for t in ProductTotal.objects.all()}
    assert totals == {"p1": (3, 3000), "p2": (2, 150)}


# --- point 2: a return is checked against its original as stored --------------------------------


class Session(threading.Thread):
    """A database session of its own, running one step at a time on the driving test's word."""

    def __init__(self):
        super().__init__(daemon=True)
        self._steps = []
        self._ready = threading.Condition()
        self.outcome = None
        self.pid = None
        self.start()

    def run(self):
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._steps)
                step, done, box = self._steps.pop(0)
            if step is None:
                connection.close()
                done.set()
                return
            try:
                box.append(step())
            except BaseException as error:
                box.append(error)
            done.set()

    def submit(self, step) -> tuple[threading.Event, list]:
        done, box = threading.Event(), []
        with self._ready:
            self._steps.append((step, done, box))
            self._ready.notify()
        return done, box

    def do(self, step):
        done, box = self.submit(step)
        assert done.wait(timeout=30), "stuck"
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def close(self):
        self.do_quietly(None)

    def do_quietly(self, step):
        done, _ = self.submit(step)
        done.wait(timeout=30)


def _open_and_ingest(session: Session, events):
    """Ingest in a transaction that stays open until `commit` is called on the session."""

    def step():
        session.atomic = transaction.atomic()
        session.atomic.__enter__()
        session.pid = connection.connection.info.backend_pid
        return sales_ingest(events=events, now=NOW)

    return session.do(step)


def _commit(session: Session):
    session.do(lambda: session.atomic.__exit__(None, None, None))


def _wait_until_blocked(pid_holder: Session, timeout=10.0):
    """Until some session is waiting for a lock that `pid_holder` holds."""
    deadline = time.monotonic() + timeout
    with connections["default"].cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                [pid_holder.pid],
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.02)
    raise AssertionError("the second batch never waited for the first")


def _race(first_batch, second_batch):
    """The first batch stores and stays open; the second runs into it; then the first commits."""
    first, second = Session(), Session()
    try:
        first_result = _open_and_ingest(first, first_batch)
        done, box = second.submit(lambda: sales_ingest(events=second_batch, now=NOW))
        _wait_until_blocked(first)
        _commit(first)
        assert done.wait(timeout=30), "the second batch is stuck"
        if isinstance(box[0], BaseException):
            raise box[0]
        return first_result, box[0]
    finally:
        first.close()
        second.close()


def _net_units(original_id) -> int:
    original = Sale.objects.get(event_id=original_id)
    returned = sum(Sale.objects.filter(return_of=original_id).values_list("qty", flat=True))
    return original.qty + returned


@pytest.mark.django_db(transaction=True)
def test_a_return_is_checked_against_the_original_as_stored_not_its_rejected_copy():
    """A: {o1 qty 1}; B: {o1 qty 100}, {return of 100}. A stores o1 first, so B's return exceeds it."""
    # given batch A stores o1 with 1 unit and has not committed yet
    a = [event("o1", qty=1, amount="1.00")]
    b = [event("o1", qty=100, amount="100.00"), event("r1", qty=-100, returnOf="o1")]

    # when batch B, with another o1 and a return of 100 units of it, runs into A and A commits
    _, result_b = _race(a, b)

    # then B's o1 is rejected as a reused id, and its return is checked against A's o1: too many units
    assert result_b.accepted == 0
    assert result_b.rejected == [
        {"index": 0, "id": "o1", "error": "id already used by a different event"},
        {"index": 1, "id": "r1", "error": "return of 100 units exceeds the 1 not yet returned"},
    ]
    assert _net_units("o1") == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_batches_never_return_more_than_was_sold():
    """Both batches carry the same original and return 6 of its 10 units: only one return gets in."""
    # given
    o1 = event("o1", qty=10, amount="10.00")
    a = [o1, event("r1", qty=-6, returnOf="o1")]
    b = [o1, event("r2", qty=-6, returnOf="o1")]

    # when
    result_a, result_b = _race(a, b)

    # then
    assert result_a.accepted == 2
    assert (result_b.accepted, result_b.duplicates) == (0, 1)
    assert result_b.rejected == [
        {"index": 1, "id": "r2", "error": "return of 6 units exceeds the 4 not yet returned"}
    ]
    assert _net_units("o1") == 4


@pytest.mark.django_db(transaction=True)
def test_a_return_of_an_original_resent_concurrently_counts_in_the_stored_categories():
    """B resends A's o1, which takes the catalogue's categories; the catalogue changes in between."""
    # given a product in 'toys', and batch A storing o1 (no categories: the catalogue's) without committing
    toys = Category.objects.create(slug="toys", name="Toys")
    games = Category.objects.create(slug="games", name="Games")
    Product.objects.create(product_id="p1", name="Kite", price_cents=100).categories.add(toys)
    o1 = event("o1", qty=2, amount="2.00", categories=None)
    first, second = Session(), Session()
    try:
        _open_and_ingest(first, [o1])
        # and the product moved to 'games' before B comes
        Product.objects.get(product_id="p1").categories.set([games])

        # when B resends o1 with a return of it, runs into A, and A commits
        done, box = second.submit(
            lambda: sales_ingest(events=[o1, event("r1", qty=-1, returnOf="o1", categories=None)], now=NOW)
        )
        _wait_until_blocked(first)
        _commit(first)
        assert done.wait(timeout=30), "the second batch is stuck"
        result_b = box[0]
    finally:
        first.close()
        second.close()

    # then B's o1 is a duplicate, and its return counts where the stored o1 counts
    assert (result_b.accepted, result_b.duplicates, result_b.rejected) == (1, 1, [])
    assert Sale.objects.get(event_id="r1").categories == ["toys"]


# --- a product and its sales: no foreign key in the database, no sale left without its product -----


@pytest.mark.django_db
def test_a_product_with_sales_cannot_be_deleted_and_its_sales_are_not_read():
    sales = [event(f"s{i}", amount="1.00") for i in range(200)]
    assert sales_ingest(events=sales, now=NOW).accepted == 200

    with CaptureQueriesContext(connection) as queries:
        with pytest.raises(ProtectedError), transaction.atomic():
            Product.objects.get(product_id="p1").delete()
        with pytest.raises(ProtectedError), transaction.atomic():
            Product.objects.filter(product_id="p1").delete()

    assert Product.objects.filter(product_id="p1").exists()
    # one probe for a sale per delete, whatever the product's sales: none of them is read
    reads = [q["sql"] for q in queries.captured_queries if "FROM rankings_sale" in q["sql"]]
    assert len(reads) == 2 and all(sql.startswith("SELECT EXISTS") for sql in reads), reads


@pytest.mark.django_db(transaction=True)  # as a request runs: no transaction around the admin's
def test_the_admin_refuses_to_delete_a_product_with_sales(admin_client):
    assert sales_ingest(events=[event("s1", amount="1.00")], now=NOW).accepted == 1
    product = Product.objects.get(product_id="p1")

    one = admin_client.post(reverse("admin:catalogue_product_delete", args=[product.pk]), {"post": "yes"})
    bulk = admin_client.post(
        reverse("admin:catalogue_product_changelist"),
        {"action": "delete_selected", "_selected_action": [product.pk], "post": "yes"},
    )

    assert (one.status_code, bulk.status_code) == (403, 403)
    assert Product.objects.filter(product_id="p1").exists()


@pytest.mark.django_db(transaction=True)
def test_a_product_deleted_while_its_first_sale_is_stored_is_kept():
    """The delete's own check of the sales cannot see a batch still storing one: it waits for it."""
    # given a product without sales, and a batch storing its first sale that has not committed yet
    Product.objects.create(product_id="p1", name="Pen", price_cents=100)
    batch, deleter = Session(), Session()
    try:
        _open_and_ingest(batch, [event("s1", amount="1.00")])

        # when the product is deleted meanwhile, and the batch commits
        done, box = deleter.submit(lambda: Product.objects.get(product_id="p1").delete())
        _wait_until_blocked(batch)
        _commit(batch)
        assert done.wait(timeout=30), "the delete is stuck"
    finally:
        batch.close()
        deleter.close()

    # then the delete is refused, and the sale keeps its product
    assert isinstance(box[0], ProtectedError), box[0]
    assert Product.objects.get(product_id="p1").name == "Pen"
    assert Sale.objects.get(event_id="s1").product_id == "p1"


@pytest.mark.django_db(transaction=True)
def test_a_sale_of_a_product_being_deleted_waits_and_makes_it_again():
    # given a product without sales, deleted in a transaction that has not committed yet
    Product.objects.create(product_id="p1", name="Pen", price_cents=100)
    deleter, batch = Session(), Session()
    try:

        def delete_and_stay_open():
            deleter.atomic = transaction.atomic()
            deleter.atomic.__enter__()
            deleter.pid = connection.connection.info.backend_pid
            Product.objects.get(product_id="p1").delete()

        deleter.do(delete_and_stay_open)

        # when a sale of it arrives meanwhile, and the delete commits
        done, box = batch.submit(lambda: sales_ingest(events=[event("s1", amount="1.00")], now=NOW))
        _wait_until_blocked(deleter)
        _commit(deleter)
        assert done.wait(timeout=30), "the batch is stuck"
    finally:
        deleter.close()
        batch.close()

    # then the sale is stored, and its product is there again, a placeholder
    assert box[0].accepted == 1, box[0]
    assert Product.objects.get(product_id="p1").is_placeholder
    assert Sale.objects.get(event_id="s1").product_id == "p1"


# --- point 6: concurrent ingests never deadlock ------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_many_clients_sending_overlapping_batches_in_any_order_never_get_a_500(ingest_user):
    """Eight clients send the same events in shuffled, overlapping batches: every id is stored once."""
    from rankings.operations.tokens import token_create

    token = token_create(user=ingest_user)
    ids = [f"e{i:03d}" for i in range(120)]
    # an event's content is fixed by its id, so a resend is a duplicate
    content = {
        i: event(
            i, product=f"p{n % 7}", qty=1 + n % 3, amount=f"{n}.00", categories=[f"c{n % 5}", f"d{n % 4}"]
        )
        for n, i in enumerate(ids)
    }
    rng = random.Random(9)
    batches = []
    for _ in range(48):
        chosen = rng.sample(ids, 60)
        rng.shuffle(chosen)
        batches.append([content[i] for i in chosen])

    def send(batch):
        client = APIClient(raise_request_exception=False)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        try:
            reply = client.post("/v1/sales", {"events": batch}, format="json")
            return reply.status_code, reply.json() if reply.status_code == 200 else reply.content
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=8) as pool:
        replies = list(pool.map(send, batches))

    assert [status for status, _ in replies] == [200] * len(batches), [r for r in replies if r[0] != 200][:1]
    bodies = [body for _, body in replies]
    assert all(body["rejected"] == [] for body in bodies)
    sent = {i for batch in batches for i in (e["id"] for e in batch)}
    assert sum(body["accepted"] for body in bodies) == len(sent) == Sale.objects.count()
    assert sum(body["duplicates"] for body in bodies) == sum(map(len, batches)) - len(sent)


@pytest.mark.django_db
@pytest.mark.parametrize("sqlstate_error", [pg_errors.DeadlockDetected, pg_errors.SerializationFailure])
def test_a_deadlock_or_serialization_failure_is_retried_inside_the_service(monkeypatch, sqlstate_error):
    # given storage that fails once as if PostgreSQL had chosen this batch as a deadlock victim
    real_store = ingest_module.SaleIngest.store
    failures = []

    def failing_once(self, rows, result):
        if not failures:
            failures.append(1)
            raise OperationalError("victim") from sqlstate_error("victim")
        return real_store(self, rows, result)

    monkeypatch.setattr(ingest_module.SaleIngest, "store", failing_once)

    # when
    result = sales_ingest(events=[event("a"), event("b")], now=NOW)

    # then the batch was stored on the second attempt, once
    assert failures == [1]
    assert (result.accepted, result.rejected) == (2, [])
    assert Sale.objects.count() == 2


@pytest.mark.django_db
def test_sales_are_inserted_in_id_order_whatever_the_order_given():
    """A fixed order is what keeps two batches with the same new ids from waiting on each other."""
    sales_ingest(events=[event(f"e{i}") for i in (3, 1, 2)], now=NOW)

    assert list(Sale.objects.order_by("id").values_list("event_id", flat=True)) == ["e1", "e2", "e3"]


# --- point 3: the database refuses what no code path may store ----------------------------------


def _refused(statement, params=()):
    with (
        pytest.raises(IntegrityError, match="violates check constraint"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement, params)


@pytest.mark.django_db
def test_a_negative_price_is_refused_by_the_database():
    _refused(
        "INSERT INTO catalogue_product (product_id, name, price_cents, is_placeholder) VALUES ('p', 'p', -1, false)"
    )


_SALE_INSERT = """
INSERT INTO rankings_sale
    (event_id, ts, product_id, categories, qty, amount_cents, return_of, counted_at, received_at, digest)
VALUES ('x', now(), 'p1', '{toys}', %s, %s, %s, now(), now(), 'd')
"""


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("qty", "amount_cents", "return_of"),
    [
        pytest.param(1, -1, None, id="negative amount"),
        pytest.param(0, 100, None, id="zero qty"),
        pytest.param(-1, 100, None, id="negative qty without returnOf"),
        pytest.param(1, 100, "o1", id="positive qty with returnOf"),
    ],
)
def test_an_impossible_sale_is_refused_by_the_database(qty, amount_cents, return_of):
    from rankings.engine.partitions import sale_partitions_ensure

    Product.objects.create(product_id="p1", name="p1")
    sale_partitions_ensure([timezone.now()])
    # a valid row goes in, so the refusals below are the constraint's, not the statement's
    with connection.cursor() as cursor:
        cursor.execute(_SALE_INSERT.replace("'x'", "'ok'"), [1, 100, None])

    _refused(_SALE_INSERT, [qty, amount_cents, return_of])


@pytest.mark.django_db
@pytest.mark.parametrize(("units", "revenue_cents"), [(-1, 0), (0, -1)])
def test_a_negative_ledger_total_is_refused_by_the_database(units, revenue_cents):
    _refused(
        "INSERT INTO rankings_producttotal (product_id, units, revenue_cents) VALUES ('p', %s, %s)",
        [units, revenue_cents],
    )


@pytest.mark.django_db
def test_the_admin_shows_an_error_for_a_negative_price(admin_client):
    # given
    product = Product.objects.create(product_id="p1", name="Kite", price_cents=100)

    # when an editor sets a negative price
    reply = admin_client.post(
        reverse("admin:catalogue_product_change", args=[product.pk]),
        {"name": "Kite", "price_cents": -500, "categories": [], "_save": "Save"},
    )

    # then the form comes back with the reason, and the price is unchanged
    assert reply.status_code == 200
    assert "Ensure this value is greater than or equal to 0." in reply.content.decode()
    product.refresh_from_db()
    assert product.price_cents == 100

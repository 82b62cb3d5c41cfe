"""The claim by snapshot (rankings.engine.claims): a transaction left open elsewhere holds back
only its own sales; they are claimed once, after it commits, by whichever tick comes next."""

import datetime as dt
import queue
import threading

import pytest
from django.db import connection, transaction
from django.db.models import Sum

from catalogue.models import Category, Product
from rankings.engine.partitions import sale_partitions_ensure
from rankings.engine.shards import ALL, active
from rankings.engine.tick import tick
from rankings.ingest.sales import sales_ingest
from rankings.models import Bucket, PendingSale, Sale
from rankings.operations.verify import rankings_verify

pytestmark = pytest.mark.django_db(transaction=True)

# Two minutes before an hour: the ticks cross it, claiming first only what counts by then.
START = dt.datetime(2026, 3, 2, 12, 58, tzinfo=dt.UTC)


class Session(threading.Thread):
    """A database session of its own (Django gives each thread a connection), run a step at a time."""

    def __init__(self):
        super().__init__(daemon=True)
        self.steps: queue.Queue = queue.Queue()
        self.start()

    def run(self):
        while True:
            step, done, outcome = self.steps.get()
            try:
                outcome.append(step() if step else None)
            except BaseException as error:  # handed to the driving thread
                outcome.append(error)
            done.set()
            if step is None:
                connection.close()
                return

    def do(self, step=None):
        done, outcome = threading.Event(), []
        self.steps.put((step, done, outcome))
        assert done.wait(timeout=60), "the session is stuck"
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]


def _sale(event_id: str, product: str, qty: int, at: dt.datetime) -> dict:
    return {"id": event_id, "ts": at.isoformat(), "productId": product, "categories": ["toys"], "qty": qty}


def _units() -> dict[str, int]:
    """Each product's units in `all`'s hour buckets."""
    return dict(
        Bucket.objects.filter(category=ALL, size=3600)
        .values("product_id")
        .annotate(units=Sum("units"))
        .values_list("product_id", "units")
    )


def test_a_transaction_left_open_is_claimed_once_after_it_commits_and_holds_back_no_other(settings):
    # given small claims (several a tick, and a tick that crosses an hour claims first the sales
    # counted by then, then the others) and a catalogue made beforehand, so that the open
    # transaction holds no row the others wait on
    settings.RANKINGS = {**settings.RANKINGS, "SHARDS": 2, "BATCH_SIZE": 2}
    Category.objects.create(slug="toys", name="toys", has_sales=True)
    for product_id in ("late", "early"):
        Product.objects.create(product_id=product_id, name=product_id)
    sale_partitions_ensure([START - dt.timedelta(days=1), START + dt.timedelta(days=1)])
    active()
    # and a session that ingests sales and leaves its transaction open
    other = Session()
    around = transaction.atomic()
    try:
        other.do(around.__enter__)
        other.do(
            lambda: sales_ingest(events=[_sale(f"late-{n}", "late", 1, START) for n in range(3)], now=START)
        )
        # when sales of this session commit and ticks run, several, while the other stays open
        now = START
        for round_ in range(4):
            events = [
                _sale(f"early-{round_}-{n}", "early", 2, now + dt.timedelta(seconds=40 * n)) for n in range(3)
            ]
            assert sales_ingest(events=events, now=now).accepted == 3
            now += dt.timedelta(minutes=1)
            tick(now=now, log_tick=False)
            # then each tick has claimed this session's sales (the open one's wait, unseen)
            assert _units() == {"early": 6 * (round_ + 1)}
        assert not PendingSale.objects.exists()
        # when the other commits, its sales are pending until a tick claims them, once
        other.do(lambda: around.__exit__(None, None, None))
        layout = active().layout
        shards = {*layout.shards_of(ALL), *layout.shards_of("toys")}
        assert PendingSale.objects.filter(sale__product_id="late").count() == 3 * len(shards)
        for _ in range(3):
            now += dt.timedelta(minutes=1)
            tick(now=now, log_tick=False)
            assert _units() == {"early": 24, "late": 3}
    finally:
        other.do()
    # then nothing waits, and every board equals the recompute from the raw sales
    assert not PendingSale.objects.exists()
    assert Sale.objects.count() == 15
    assert rankings_verify().exact

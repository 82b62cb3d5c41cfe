"""The outbox's throughput: order lines per second from the shop to a visible rank.

`.venv/bin/python -m pytest -c salesrank_oscar/pyproject.toml -s salesrank_oscar/tests/measure_throughput.py`
places ORDERS orders of LINES lines each through Oscar's OrderCreator, then runs `salesrank_send`
and waits until salesrank's boards show every unit; it prints the lines per second of the send
alone and of the send up to the visible ranks.
"""

import io
import os
import time
from decimal import Decimal as D

import pytest
from django.core.management import call_command
from oscar.test.factories import create_product

from salesrank_oscar.models import Kind, OutboxEntry
from tests import processes

from .shop_side import order_placed

ORDERS = int(os.environ.get("ORDERS", 250))
LINES = int(os.environ.get("LINES", 4))
PRODUCTS = 20

pytestmark = pytest.mark.django_db


def test_measure(wired):
    products = [create_product(title=f"P{n}", price=D("5.00"), num_in_stock=10**6) for n in range(PRODUCTS)]
    units = dict.fromkeys(products, 0)
    started = time.monotonic()
    for n in range(ORDERS):
        lines = [(products[(n + k) % PRODUCTS], 1 + k % 3) for k in range(LINES)]
        order_placed(*lines)
        for product, quantity in lines:
            units[product] += quantity
    placed = time.monotonic() - started

    OutboxEntry.objects.exclude(kind=Kind.EVENT).delete()  # the lines are what is measured
    started = time.monotonic()
    call_command("salesrank_send", stdout=io.StringIO())
    sent = time.monotonic() - started
    processes.wait_until(
        lambda: all(wired.units(str(p.pk)) == u for p, u in units.items()),
        timeout=120,
        what="every unit on the boards",
        interval=0.05,
    )
    visible = time.monotonic() - started

    lines = ORDERS * LINES
    print(
        f"\n{ORDERS} orders of {LINES} lines ({lines} lines) placed through Oscar in {placed:.1f} s"
        f" ({lines / placed:.0f} lines/s);\n"
        f"sent in {sent:.2f} s ({lines / sent:.0f} lines/s); all visible on the boards {visible:.2f} s"
        f" after the send began ({lines / visible:.0f} lines/s from the outbox to a visible rank)"
    )

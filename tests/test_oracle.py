"""The served boards against the tests' own reference (tests/oracle.py) at every window's edges.

A sale in the oldest bucket a window holds, one a second before it, one a
moment ahead of the clock in the bucket of now, a return of an old sale, and a
sale naming a category and its parent: after each tick, and after the clock
crosses a minute and an hour, every board is the reference's. A window one
bucket too wide or too narrow in the engine fails here.
"""

import datetime as dt

import pytest

from catalogue.models import Category
from rankings.conf import rankings_settings
from rankings.operations import backfill

from .rankings_helpers import START, Shop

PARENTS = {"toys": None, "lego": "toys"}
NOW = START + dt.timedelta(minutes=30, seconds=17)


def _edges(shop: Shop) -> list[dict]:
    """For each window, a sale in its oldest bucket and one a second before that bucket."""
    now = int(shop.now.timestamp())
    events = []
    for name, (size, count) in rankings_settings.WINDOWS.items():
        oldest = now - now % size - (count - 1) * size
        for label, at in (("first", oldest), ("before", oldest - 1)):
            ago = dt.timedelta(seconds=now - at)
            events.append(shop.sale(f"{name}-{label}", categories=["lego"], amount="2.50", ago=ago))
    return events


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("partitions_dropped")
def test_served_boards_are_the_reference_s_at_every_window_edge():
    for slug, parent in PARENTS.items():
        Category.objects.create(slug=slug, name=slug, parent=Category.objects.filter(slug=parent).first())
    backfill.version_build(activate=True)
    shop = Shop(NOW)
    shop.send(
        *_edges(shop),
        shop.sale("ahead", categories=["lego"], ago=dt.timedelta(seconds=-30)),
        shop.sale(
            "both",
            categories=["lego", "toys"],
            qty=3,
            amount="9.00",
            event_id="b1",
            ago=dt.timedelta(hours=5),
        ),
    )
    shop.send({"id": "r1", "ts": shop.now.isoformat(), "productId": "both", "qty": -1, "returnOf": "b1"})
    shop.engage(shop.engagement("ahead", kind="wish", categories=["lego"], ago=dt.timedelta(minutes=59)))
    for step in (dt.timedelta(0), dt.timedelta(minutes=1), dt.timedelta(hours=1)):
        shop.now += step
        shop.tick()
        shop.assert_served_exact(PARENTS)

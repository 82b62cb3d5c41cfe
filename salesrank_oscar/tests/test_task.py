"""The Celery task, run by the example shop's own worker: queued when an order commits, and tried
again with backoff while salesrank is down, one retry waiting however many orders come meanwhile."""

import pytest

from tests import processes

from .shop_side import order_placed

pytestmark = pytest.mark.django_db(transaction=True)


def test_orders_committed_while_salesrank_is_down_are_sent_by_the_tasks_retry_once_it_is_back(
    catalogue, wired, shop_worker, settings
):
    # given: the worker sends on commit
    settings.SALESRANK_SEND_ON_COMMIT = True
    chess = str(catalogue["chess"].pk)
    order_placed((catalogue["chess"], 1))
    wired.wait_units(chess, 1)
    # when: salesrank stops and two orders commit
    waited, retried = len(shop_worker.lines("the outbox waits")), len(shop_worker.lines("next try in"))
    wired.stop()
    order_placed((catalogue["chess"], 2))
    order_placed((catalogue["chess"], 3))
    # then: the worker tries, finds it down and waits with one retry, however many orders came
    processes.wait_until(
        lambda: len(shop_worker.lines("the outbox waits")) >= waited + 2,
        timeout=30,
        what="both sends to find salesrank down",
        watch=[shop_worker],
    )
    assert len(shop_worker.lines("next try in")) == retried + 1
    # when: salesrank is back
    wired.start()
    # then: the retry sends both, each counted once
    wired.wait_units(chess, 6)

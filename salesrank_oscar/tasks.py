"""The Celery task that sends the outbox: queued when an order (or a refund, a product, a
category) commits, and run by the shop's beat as often as it likes."""

import logging

from celery import shared_task
from django.core.cache import cache

logger = logging.getLogger(__name__)

# While salesrank cannot be reached, the task tries again after a wait that doubles each time,
# from RETRY_FIRST up to RETRY_MOST, for as long as it takes.
RETRY_FIRST = 5  # seconds
RETRY_MOST = 600  # seconds
# The mark of a retry waiting: the sends queued meanwhile (one per order) leave it to that one.
RETRY_MARK = "salesrank_oscar:retry-waiting"


@shared_task(bind=True, ignore_result=True, max_retries=None)
def send_outbox(self):
    from .sending import outbox_send

    outcome = outbox_send()
    if not outcome.failure:
        return
    wait = min(RETRY_MOST, RETRY_FIRST * 2**self.request.retries)
    if not cache.add(RETRY_MARK, True, wait):
        logger.warning("salesrank: the outbox waits (%s); a retry is waiting already", outcome.failure)
        return
    logger.warning("salesrank: the outbox waits (%s); next try in %s s", outcome.failure, wait)
    raise self.retry(countdown=wait)

"""Writing to the outbox, in the transaction of the change it records; and the send that follows it."""

import logging

from django.db import transaction

from . import events
from .conf import setting
from .models import Kind, OutboxEntry

logger = logging.getLogger(__name__)


def sale_record(*, line) -> None:
    """Write the sale event of an order line just placed."""
    _event_record(events.sale_event(line))


def return_record(*, line_quantity) -> None:
    """Write the return event of a refund recorded on an order line."""
    _event_record(events.return_event(line_quantity))


def _event_record(event: dict) -> None:
    # The event's id is unique in the outbox: a line or a refund written again is written once.
    OutboxEntry.objects.bulk_create(
        [OutboxEntry(kind=Kind.EVENT, key=event["id"], payload=event)], ignore_conflicts=True
    )
    send_after_commit()


def object_record(*, kind: Kind, pk: int) -> None:
    """Note that a product or a category changed: the outbox sends it as it stands then."""
    OutboxEntry.objects.create(kind=kind, key=str(pk))
    send_after_commit()


def send_after_commit() -> None:
    """Send the outbox once the current transaction commits (at once outside one): one task per
    transaction, however many rows it wrote."""
    if not setting("SALESRANK_SEND_ON_COMMIT"):
        return
    connection = transaction.get_connection()
    if any(entry[1] is _send_soon for entry in connection.run_on_commit):
        return
    transaction.on_commit(_send_soon)


def _send_soon() -> None:
    from .tasks import send_outbox

    try:
        send_outbox.apply_async(retry=False)
    except Exception:  # the broker is down: the rows wait in the outbox for the beat or the command
        logger.warning("salesrank: could not queue the outbox's send; it stays in the outbox", exc_info=True)

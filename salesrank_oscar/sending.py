"""Sending the outbox: a batch at a time in the order written, each row marked by salesrank's reply.

A batch is claimed with `FOR UPDATE SKIP LOCKED` and held until salesrank's reply is written down,
so two senders (the task, the command) never send the same rows at once, and a sender that dies
mid-way leaves its rows waiting. A row is marked sent only when the reply counts it accepted or a
duplicate; a resend of a batch whose reply was lost (a timeout after salesrank stored it) is
harmless, because salesrank counts an event id it already has as a duplicate.
"""

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from oscar.core.loading import get_model

from . import client, events
from .conf import setting
from .models import Kind, OutboxEntry, State

# salesrank refuses an event (a product) that would take a batch past its bound on new categories
# with a reason that ends so: the item is fine, and waits to be sent in another batch.
SEND_AGAIN = "again in another batch"
# Rows deleted by one statement of the prune.
PRUNE_CHUNK = 5000  # rows


@dataclass
class Outcome:
    """What a send did: rows marked sent and rejected, rows left to be sent again, and why salesrank
    could not take the rest ("" when it took everything it was sent)."""

    sent: int = 0
    rejected: int = 0
    again: int = 0
    failure: str = ""


@dataclass
class Batch:
    """The entries of one POST, and for each the outbox rows it stands for (a product saved three
    times is sent once for its three rows); `gone`: rows of objects deleted since, or not sent."""

    entries: list[dict] = field(default_factory=list)
    rows: list[list[OutboxEntry]] = field(default_factory=list)
    gone: list[OutboxEntry] = field(default_factory=list)


def outbox_send() -> Outcome:
    """Send every row waiting now: categories first, then products, then sales and returns. An
    endpoint that refuses its requests stops only its own rows; salesrank unreachable stops all."""
    outcome = Outcome()
    outbox_prune()
    failures = []
    for kind, (path, key, build, counts) in STREAMS.items():
        try:
            _stream_send(kind, path, key, build, counts, outcome)
        except client.Refused as error:  # this endpoint refuses (a permission missing): the others may not
            failures.append(str(error))
        except client.Unreachable as error:
            failures.append(str(error))
            break
    outcome.failure = "; ".join(failures)
    return outcome


def _stream_send(kind, path, key, build, counts, outcome: Outcome) -> None:
    # The run goes through the rows waiting once, in the order written: a row salesrank asks for
    # again is left for the next run rather than sent again in a loop.
    after = 0
    while True:
        with transaction.atomic():
            rows = list(
                OutboxEntry.objects.select_for_update(skip_locked=True)
                .filter(kind=kind, state=State.PENDING, id__gt=after)
                .order_by("id")[: setting("SALESRANK_BATCH_SIZE")]
            )
            if not rows:
                return
            after = rows[-1].id
            batch = build(rows)
            rejected = {}
            if batch.entries:
                reply = client.post(path, {key: batch.entries})
                rejected = _rejections(path, reply, len(batch.entries), counts)
            _mark(batch, rejected, outcome)


def _rejections(path: str, reply: object, sent: int, counts: tuple[str, str]) -> dict[int, str]:
    """index -> reason of each entry the reply rejects; a reply whose counts do not add up to what
    was sent is not salesrank's answer to it, and nothing is marked."""
    if not isinstance(reply, dict) or not isinstance(reply.get("rejected"), list):
        raise client.Refused(f"POST {path}: a reply without its rejected list: {str(reply)[:300]}")
    rejected = {
        item["index"]: str(item.get("error", ""))
        for item in reply["rejected"]
        if isinstance(item, dict) and isinstance(item.get("index"), int)
    }
    counted = [n for n in (reply.get(name) for name in counts) if isinstance(n, int)]
    if len(counted) != len(counts) or sum(counted) + len(rejected) != sent:
        raise client.Refused(
            f"POST {path}: the reply counts {counted} and {len(rejected)} rejected of {sent} sent"
        )
    return rejected


def _mark(batch: Batch, rejected: dict[int, str], outcome: Outcome) -> None:
    sent = [row.pk for row in batch.gone]
    again = []
    for index, rows in enumerate(batch.rows):
        reason = rejected.get(index)
        if reason is None:
            sent += [row.pk for row in rows]
        elif SEND_AGAIN in reason:
            again += [row.pk for row in rows]
        else:
            OutboxEntry.objects.filter(pk__in=[row.pk for row in rows]).update(
                state=State.REJECTED, reason=reason
            )
            outcome.rejected += len(rows)
    OutboxEntry.objects.filter(pk__in=sent).update(state=State.SENT, sent_at=timezone.now())
    OutboxEntry.objects.filter(pk__in=again).update(attempts=F("attempts") + 1)
    outcome.sent += len(sent)
    outcome.again += len(again)


def _events(rows: list[OutboxEntry]) -> Batch:
    return Batch(entries=[row.payload or {} for row in rows], rows=[[row] for row in rows])


def _by_object(rows: list[OutboxEntry]) -> dict[int, list[OutboxEntry]]:
    owners: dict[int, list[OutboxEntry]] = {}
    for row in rows:
        owners.setdefault(int(row.key), []).append(row)
    return owners


def _objects(rows: list[OutboxEntry], found: list, entries: Callable[[list], list[dict]]) -> Batch:
    owners = _by_object(rows)
    batch = Batch(entries=entries(found), rows=[owners.pop(obj.pk) for obj in found])
    batch.gone = [row for left in owners.values() for row in left]
    return batch


def _products(rows: list[OutboxEntry]) -> Batch:
    Product = get_model("catalogue", "Product")
    found = list(
        Product.objects.filter(pk__in=_by_object(rows), parent=None)
        .prefetch_browsable_categories()
        .prefetch_related("stockrecords", "children__stockrecords")
        .order_by("pk")
    )
    return _objects(rows, found, events.product_entries)


def _categories(rows: list[OutboxEntry]) -> Batch:
    # Only the categories a shopper can browse: a hidden one (or one under a hidden one) is not sent.
    Category = get_model("catalogue", "Category")
    found = list(Category.objects.browsable().filter(pk__in=_by_object(rows)).order_by("path"))
    return _objects(rows, found, events.category_entries)


# kind -> (the endpoint, the key of the body's list, the batch's entries, the reply's counts of
# the entries it took).
STREAMS = {
    Kind.CATEGORY: ("/v1/catalogue/categories", "categories", _categories, ("created", "updated")),
    Kind.PRODUCT: ("/v1/catalogue/products", "products", _products, ("created", "updated")),
    Kind.EVENT: ("/v1/sales", "events", _events, ("accepted", "duplicates")),
}


def outbox_prune() -> int:
    """Delete the rows sent more than SALESRANK_SENT_KEEP_DAYS ago and the rejected ones written more
    than SALESRANK_REJECTED_KEEP_DAYS ago, a chunk per statement; the number deleted."""
    now = timezone.now()
    due = [
        (State.SENT, now - dt.timedelta(days=setting("SALESRANK_SENT_KEEP_DAYS"))),
        (State.REJECTED, now - dt.timedelta(days=setting("SALESRANK_REJECTED_KEEP_DAYS"))),
    ]
    deleted = 0
    for state, before in due:
        while True:
            chunk = list(
                OutboxEntry.objects.filter(state=state, created__lt=before).values_list("pk", flat=True)[
                    :PRUNE_CHUNK
                ]
            )
            if not chunk:
                break
            deleted += OutboxEntry.objects.filter(pk__in=chunk).delete()[0]
    return deleted

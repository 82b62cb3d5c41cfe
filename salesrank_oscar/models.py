"""The outbox: what the shop has yet to tell salesrank, written in the transaction that made it."""

from django.db import models
from django.db.models import Q


class Kind(models.TextChoices):
    # A sale or a return (an event of POST /v1/sales): one stream, so that a return follows its sale.
    EVENT = "event", "sale or return"
    PRODUCT = "product", "product"
    CATEGORY = "category", "category"


class State(models.TextChoices):
    PENDING = "pending", "pending"
    SENT = "sent", "sent"
    REJECTED = "rejected", "rejected"


class OutboxEntry(models.Model):
    """One sale, return, product or category for salesrank.

    A sale or a return carries its event as it will be sent (`payload`), frozen when the line or
    the refund was written, once (its event id is unique). A product or a category carries only
    Oscar's primary key and is sent as it stands when the outbox is sent: a dashboard saves a
    product's categories and prices after the product itself, and each save adds a row, so a save
    made while an earlier row is being sent is sent again after it (the sender sends one entry for
    the rows of one object in a batch).
    """

    kind = models.CharField(max_length=16, choices=Kind.choices)
    # The event's id (a sale's or a return's), or the product's or category's primary key.
    key = models.CharField(max_length=128)
    payload = models.JSONField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    # salesrank's reason for a rejected row.
    reason = models.TextField(blank=True)
    # Sends of the row that ended without a verdict on it (salesrank asked for it again).
    attempts = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "salesrank outbox entry"
        verbose_name_plural = "salesrank outbox"
        constraints = [
            # A line is sold once and a refund refunds once: one row each, whatever saves them again.
            models.UniqueConstraint(
                fields=["kind", "key"],
                condition=Q(kind=Kind.EVENT),
                name="salesrank_outbox_one_event",
            ),
        ]
        indexes = [
            # The sender's claim: the waiting rows of a kind, oldest first.
            models.Index(
                fields=["kind", "id"], condition=Q(state=State.PENDING), name="salesrank_outbox_waiting"
            ),
            # The prune and the admin's filters.
            models.Index(fields=["state", "created"], name="salesrank_outbox_state"),
        ]

    def __str__(self):
        return f"{self.kind} {self.key} ({self.state})"

"""The app's settings: each read from the shop's Django settings when set there, else its default."""

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Where salesrank listens, e.g. "https://ranks.example.com".
    "SALESRANK_URL": "http://127.0.0.1:8000",
    # A token of a salesrank user with rankings.add_sale, catalogue.change_product and
    # catalogue.change_category.
    "SALESRANK_TOKEN": "",
    # Which Oscar field is a product's id in salesrank: "id" (the primary key) or "upc".
    "SALESRANK_PRODUCT_ID": "id",
    # Which is a category's: "slug" (two categories with one slug share a board) or "id" ("c<pk>").
    "SALESRANK_CATEGORY_ID": "slug",
    # The payment event types (their codes) that record a refund: their lines become returns.
    "SALESRANK_REFUND_EVENT_TYPES": ("refund", "refunded"),
    # Send the outbox as soon as the transaction that filled it commits (a Celery task). Off for a
    # shop without a Celery worker: it runs `manage.py salesrank_send` from cron instead.
    "SALESRANK_SEND_ON_COMMIT": True,
    # Lines per POST: well under salesrank's 5,000, so that one slow batch holds few rows.
    "SALESRANK_BATCH_SIZE": 1000,
    # One POST of a batch may take this long before it counts as failed (and is sent again).
    "SALESRANK_SEND_TIMEOUT": 10.0,  # seconds
    # Tries of one batch within a run, the first wait between two of them doubling after each.
    "SALESRANK_SEND_ATTEMPTS": 3,
    "SALESRANK_SEND_BACKOFF": 0.5,  # seconds
    # Sent rows are deleted this long after they were written, rejected ones this long (pending ones never).
    "SALESRANK_SENT_KEEP_DAYS": 7,  # days
    "SALESRANK_REJECTED_KEEP_DAYS": 90,  # days
    # The template tags: the board they show, how long a read of salesrank may take before the
    # page goes on without it, how long an answer is reused, and how long after a failed read the
    # tags do not ask again (so that a salesrank that is down costs a page nothing).
    "SALESRANK_WINDOW": "7d",
    "SALESRANK_METRIC": "units",
    "SALESRANK_READ_TIMEOUT": 0.3,  # seconds
    "SALESRANK_CACHE_SECONDS": 10,  # seconds
    "SALESRANK_DOWN_SECONDS": 5,  # seconds
}


def setting(name: str) -> Any:
    """The shop's value of the setting `name`, or its default."""
    return getattr(settings, name, DEFAULTS[name])

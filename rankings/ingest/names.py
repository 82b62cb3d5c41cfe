"""Product names into Redis's copy of them (rankings.engine.store.names) once their edit commits.

Every path that edits products through the ORM (the admin, a script's save or delete) is followed
by post_save and post_delete; the catalogue API writes its products in SQL and calls names_written
itself. A bulk path that does neither (the demo's, a product made as a sale's placeholder) is left
to the walk (rankings.operations.names_copy), and meanwhile read from the catalogue.
"""

import logging
from collections.abc import Iterable, Mapping

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from rankings.engine import store

log = logging.getLogger(__name__)


def _written(names: dict[str, str]) -> None:
    try:
        store.names_write(names)
    except store.StoreError:
        log.warning(
            "could not copy %d product names to Redis: the walk mends them", len(names), exc_info=True
        )


def _deleted(product_ids: list[str]) -> None:
    try:
        store.names_delete(product_ids)
    except store.StoreError:
        log.warning(
            "could not forget %d product names in Redis: the walk mends them", len(product_ids), exc_info=True
        )


def names_written(names: Mapping[str, str]) -> None:
    """Copy `names` (product id -> name) to Redis when the transaction that wrote them commits."""
    copied = dict(names)
    if copied:
        transaction.on_commit(lambda: _written(copied))


def names_deleted(product_ids: Iterable[str]) -> None:
    """Forget these products' names in Redis when the transaction that deleted them commits."""
    gone = list(product_ids)
    if gone:
        transaction.on_commit(lambda: _deleted(gone))


@receiver(post_save, sender="catalogue.Product")
def _product_saved(sender, instance, **kwargs):
    names_written({instance.product_id: instance.name})


@receiver(post_delete, sender="catalogue.Product")
def _product_deleted(sender, instance, **kwargs):
    names_deleted([instance.product_id])

"""Redis's copy of the product names (rankings.engine.store.names), mended from the catalogue.

Every writer of it reads Redis's names first and the catalogue's after, and writes the
catalogue's only where Redis still holds what it read first (store.names_mend), so a newer write
meanwhile is never undone by an older read:

- a push of products, once it commits (names_mended, from rankings.ingest.catalogue), so that the
  readers it tells to forget their names read the pushed ones;
- the names that changed (names_changes_copy, every NAMES_CHANGES_SECONDS): the products the
  catalogue's triggers listed (rankings.models.NameChange, written in each edit's transaction,
  whoever edits; a row an edit still holds is passed over), taken in a short transaction of their
  own, then mended: one whose name Redis changed meanwhile, or that a failure left unmended, is
  listed again for the next run (a run killed in between leaves its products to the walk);
- every name (names_step, every NAMES_COPY_SECONDS): the next WALK_PRODUCTS products in id order,
  and the next PRUNE_BUCKETS of Redis's buckets, whose names of products the catalogue no longer
  has are deleted. It copies what no edit listed: products made by a bulk path or as a sale's
  placeholder, names a Redis that lost its data no longer has. `manage.py names_copy` walks the
  whole catalogue at once (names_copy).
"""

from dataclasses import dataclass

from django.db import connection, transaction

from catalogue.models import Product
from rankings.engine import store
from rankings.models import NameChange

WALK_PRODUCTS = 20_000  # products a step of the walk reads from the catalogue and mends
PRUNE_BUCKETS = 512  # Redis's buckets a step reads whole (about 40,000 names at ten million products)
CHANGES_TAKEN = 20_000  # changed names a run of names_changes_copy takes

_PRODUCTS = Product._meta.db_table
_CHANGES = NameChange._meta.db_table
_NEXT = f"SELECT product_id FROM {_PRODUCTS} WHERE product_id > %s ORDER BY product_id LIMIT %s"
_NAMES = f"SELECT product_id, name FROM {_PRODUCTS} WHERE product_id = ANY(%s)"
# The first `limit` changes no other run holds; their rows are deleted when the run commits.
_TAKE = f"""
DELETE FROM {_CHANGES} WHERE product_id IN (
    SELECT product_id FROM {_CHANGES} ORDER BY product_id LIMIT %s FOR UPDATE SKIP LOCKED
) RETURNING product_id
"""
_LIST = f"INSERT INTO {_CHANGES} (product_id) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING"


def names_mended(ids: list[str]) -> tuple[int, list[str]]:
    """Redis's names of `ids` read, then the catalogue's, then mended (store.names_mend): how many
    changed, and the products whose names Redis changed between (left as they are)."""
    held = store.names_held(ids)
    with connection.cursor() as cursor:
        cursor.execute(_NAMES, [ids])
        names = dict(cursor.fetchall())
    return store.names_mend(held, names)


def names_changes_copy(limit: int = CHANGES_TAKEN) -> int:
    """Mend the names of up to `limit` products the catalogue's triggers listed; returns how many
    names changed in Redis. The rows are taken and the transaction ended before Redis is asked, so
    an edit of those products never waits on Redis."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_TAKE, [limit])
        ids = [product_id for (product_id,) in cursor.fetchall()]
    if not ids:
        return 0
    try:
        changed, moved = names_mended(ids)
    except BaseException:
        _listed(ids)
        raise
    if moved:
        _listed(moved)
    return changed


def _listed(ids: list[str]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_LIST, [ids])


@dataclass
class NamesStep:
    after: str  # the last product id the walk has mended ('' before the first)
    bucket: int  # the next bucket it prunes
    products: int = 0  # products of the catalogue read
    buckets: int = 0  # Redis's buckets read
    mended: int = 0  # names written
    pruned: int = 0  # names of products the catalogue lacks, deleted
    products_wrapped: bool = False  # the products' walk reached the catalogue's end: it starts again
    buckets_wrapped: bool = False  # the buckets' walk reached the last one: it starts again


def names_walk(*, after: str, bucket: int, products: int, buckets: int) -> NamesStep:
    """A step of the walk over the `products` products after `after` and the `buckets` buckets from
    `bucket` (see above); where it stops is in the step returned."""
    step = NamesStep(after=after, bucket=bucket)
    with connection.cursor() as cursor:
        if products:
            cursor.execute(_NEXT, [after, products])
            ids = [product_id for (product_id,) in cursor.fetchall()]
            step.mended, _ = names_mended(ids)
            step.products, step.products_wrapped = len(ids), len(ids) < products
            step.after = "" if step.products_wrapped else ids[-1]
        if buckets:
            last = min(bucket + buckets, store.NAMES_BUCKETS)
            names = store.buckets_held(range(bucket, last))
            cursor.execute(_NAMES, [list(names)])
            known = {product_id for product_id, _ in cursor.fetchall()}
            step.pruned, _ = store.names_mend({p: name for p, name in names.items() if p not in known}, {})
            step.buckets, step.buckets_wrapped = last - bucket, last == store.NAMES_BUCKETS
            step.bucket = 0 if step.buckets_wrapped else last
    return step


def names_step() -> NamesStep:
    """The beat's step of the walk, from where its last step stopped (kept in Redis)."""
    after, bucket = store.names_walk_read()
    step = names_walk(after=after, bucket=bucket, products=WALK_PRODUCTS, buckets=PRUNE_BUCKETS)
    store.names_walk_set(product=step.after, bucket=step.bucket)
    return step


def names_copy(progress=None) -> NamesStep:
    """A whole walk, every product and every bucket, from their beginnings (the beat's steps go on
    where they are); `progress(step)` is told of each step. Returns the totals."""
    total = step = NamesStep(after="", bucket=0)
    while not (total.products_wrapped and total.buckets_wrapped):
        step = names_walk(
            after=step.after,
            bucket=step.bucket,
            products=0 if total.products_wrapped else WALK_PRODUCTS,
            buckets=0 if total.buckets_wrapped else PRUNE_BUCKETS,
        )
        total = NamesStep(
            after="",
            bucket=0,
            products=total.products + step.products,
            buckets=total.buckets + step.buckets,
            mended=total.mended + step.mended,
            pruned=total.pruned + step.pruned,
            products_wrapped=total.products_wrapped or step.products_wrapped,
            buckets_wrapped=total.buckets_wrapped or step.buckets_wrapped,
        )
        if progress is not None:
            progress(step)
    return total

"""The walk that keeps Redis's copy of the product names (rankings.engine.store.names) whole.

Edits write their names once they commit (rankings.ingest.names); what they cannot reach, the walk
mends: products made by a bulk path or as a sale's placeholder, names Redis lost or never got (it
was away when the edit committed), and names of products since deleted. Each step (the
`names_copy` task, every NAMES_COPY_SECONDS) takes the next WALK_PRODUCTS products of the
catalogue in id order, and the next PRUNE_BUCKETS of Redis's buckets:

- for the products: Redis's names are read first, then the catalogue's, and Redis is given the
  catalogue's only where it still holds what it held at the first read, so an edit written in
  between (newer than the walk's read) stays;
- for the buckets: a name whose product the catalogue no longer has is deleted, on the same terms.

A whole pass over ten million products takes WALK_PRODUCTS-sized steps, 500 of them; `manage.py
names_copy` walks it at once (after a bulk load, or after Redis lost its data).
"""

from dataclasses import dataclass

from django.db import connection

from catalogue.models import Product
from rankings.engine import store

WALK_PRODUCTS = 20_000  # products a step reads from the catalogue and mends
PRUNE_BUCKETS = 512  # Redis's buckets a step reads whole (about 40,000 names at ten million products)

_PRODUCTS = Product._meta.db_table
_NEXT = f"SELECT product_id FROM {_PRODUCTS} WHERE product_id > %s ORDER BY product_id LIMIT %s"
_NAMES = f"SELECT product_id, name FROM {_PRODUCTS} WHERE product_id = ANY(%s)"
_KNOWN = f"SELECT product_id FROM {_PRODUCTS} WHERE product_id = ANY(%s)"


@dataclass
class NamesStep:
    products: int = 0  # products of the catalogue read
    buckets: int = 0  # Redis's buckets read
    mended: int = 0  # names written
    pruned: int = 0  # names of products the catalogue lacks, deleted
    products_wrapped: bool = False  # the products' walk reached the catalogue's end: it starts again
    buckets_wrapped: bool = False  # the buckets' walk reached the last one: it starts again


def names_step(*, products: int = WALK_PRODUCTS, buckets: int = PRUNE_BUCKETS) -> NamesStep:
    """One step of the walk over the next `products` products and `buckets` buckets (see above)."""
    after, first = store.names_walk_read()
    step = NamesStep()
    with connection.cursor() as cursor:
        if products:
            cursor.execute(_NEXT, [after, products])
            ids = [product_id for (product_id,) in cursor.fetchall()]
            held = store.names_held(ids)  # before the catalogue's names: see above
            cursor.execute(_NAMES, [ids])
            step.mended = store.names_mend(held, dict(cursor.fetchall()))
            step.products, step.products_wrapped = len(ids), len(ids) < products
            after = "" if step.products_wrapped else ids[-1]
        if buckets:
            last = min(first + buckets, store.NAMES_BUCKETS)
            names = store.buckets_held(range(first, last))
            cursor.execute(_KNOWN, [list(names)])
            known = {product_id for (product_id,) in cursor.fetchall()}
            step.pruned = store.names_mend({p: name for p, name in names.items() if p not in known}, {})
            step.buckets, step.buckets_wrapped = last - first, last == store.NAMES_BUCKETS
            first = 0 if step.buckets_wrapped else last
    store.names_walk_set(product=after, bucket=first)
    return step


def names_copy(progress=None) -> NamesStep:
    """A whole pass over the catalogue and Redis's buckets, from their beginnings; `progress(step)`
    is told of each step. Returns the pass's totals."""
    store.names_walk_set(product="", bucket=0)
    total = NamesStep()
    while not (total.products_wrapped and total.buckets_wrapped):
        step = names_step(
            products=0 if total.products_wrapped else WALK_PRODUCTS,
            buckets=0 if total.buckets_wrapped else PRUNE_BUCKETS,
        )
        total.products += step.products
        total.buckets += step.buckets
        total.mended += step.mended
        total.pruned += step.pruned
        total.products_wrapped |= step.products_wrapped
        total.buckets_wrapped |= step.buckets_wrapped
        if progress is not None:
            progress(step)
    return total

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

A split board's parts keep their members' names too (store.part_names_head), in every version Redis
keeps whose layout splits a category (building, ready, active or retired): each writer above mends
a product's name in its part of each, under the same rule, in the same round trips as the shared
copy's, and the walk prunes their buckets with the shared ones. The versions are read before Redis
is, so a version made after that read was made after the catalogue's change that started the
mend, and its rebuild (names_parts_fill, before it is ready) reads the catalogue after that.
"""

from dataclasses import dataclass

from django.db import connection, transaction

from catalogue.models import Product
from rankings.engine import store
from rankings.engine.shards import Layout
from rankings.models import NameChange, RankingVersion

WALK_PRODUCTS = 20_000  # products a step of the walk reads from the catalogue and mends
PRUNE_BUCKETS = 512  # buckets of each copy a step reads whole (the shared one: 40,000 names at 10M products)
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


# The versions whose keys Redis keeps: a split category's parts among them keep names.
_KEPT = (
    RankingVersion.State.BUILDING,
    RankingVersion.State.READY,
    RankingVersion.State.ACTIVE,
    RankingVersion.State.RETIRED,
)


def _split_layouts(versions: list[int] | None = None) -> list[tuple[int, Layout]]:
    """(version, layout) of each version Redis keeps (of `versions`, if given) that splits a category."""
    kept = RankingVersion.objects.filter(state__in=_KEPT)
    if versions is not None:
        kept = kept.filter(number__in=versions)
    layouts = [
        (number, Layout(shards, tuple(pinned)))
        for number, shards, pinned in kept.values_list("number", "shards", "pinned")
    ]
    return [(number, layout) for number, layout in layouts if layout.split]


def _part_heads(layouts: list[tuple[int, Layout]], product_id: str) -> list[str]:
    """The heads of the part copies that keep `product_id`'s name: in each version, its part of
    each split category."""
    return [
        store.part_names_head(number, layout.shard_of(layout.board_of(category, product_id)))
        for number, layout in layouts
        for category in layout.split
    ]


def names_mended(
    ids: list[str], *, versions: list[int] | None = None, shared: bool = True
) -> tuple[int, list[str]]:
    """Redis's names of `ids` read (the shared copy's, and those of the parts of `versions`: of every
    version kept, if None), then the catalogue's, then mended (store.names_mend): how many changed,
    and the products of which Redis changed a name between (left as it is)."""
    layouts = _split_layouts(versions)
    head = store.names_head()
    copies = [
        (copy_head, product_id)
        for product_id in ids
        for copy_head in ([head] if shared else []) + _part_heads(layouts, product_id)
    ]
    held = store.names_held(copies)
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
    mended: int = 0  # names written, in every copy
    pruned: int = 0  # names of products the catalogue lacks, deleted from every copy
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
            heads = {store.names_head()} | {
                store.part_names_head(number, layout.shard_of(part))
                for number, layout in _split_layouts()
                for category in layout.split
                for part in layout.boards_of(category)
            }
            names = store.buckets_held(range(bucket, last), sorted(heads))
            cursor.execute(_NAMES, [sorted({p for _, p in names})])
            known = {product_id for product_id, _ in cursor.fetchall()}
            step.pruned, _ = store.names_mend({c: name for c, name in names.items() if c[1] not in known}, {})
            step.buckets, step.buckets_wrapped = last - bucket, last == store.NAMES_BUCKETS
            step.bucket = 0 if step.buckets_wrapped else last
    return step


def names_step() -> NamesStep:
    """The beat's step of the walk, from where its last step stopped (kept in Redis)."""
    after, bucket = store.names_walk_read()
    step = names_walk(after=after, bucket=bucket, products=WALK_PRODUCTS, buckets=PRUNE_BUCKETS)
    store.names_walk_set(product=step.after, bucket=step.bucket)
    return step


def names_parts_fill(version: int, progress=None) -> int:
    """Copy every product's name into its parts of `version`'s split categories (a rebuild's, before
    the version is ready: its reads would name products from the catalogue meanwhile); a product
    whose name a writer changed meanwhile is listed for the changes' copy. `progress(products)` is
    told how many are done after each step. Returns how many names were written."""
    if not _split_layouts([version]):
        return 0
    after, done, written = "", 0, 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(_NEXT, [after, WALK_PRODUCTS])
            ids = [product_id for (product_id,) in cursor.fetchall()]
        if not ids:
            return written
        changed, moved = names_mended(ids, versions=[version], shared=False)
        if moved:
            _listed(moved)
        written, done, after = written + changed, done + len(ids), ids[-1]
        if progress is not None:
            progress(done)


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

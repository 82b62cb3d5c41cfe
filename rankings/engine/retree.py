"""Re-count what PostgreSQL keeps per category when a switch-over changes the category tree.

Buckets and the work queue hold each sale under the categories it counts in,
ancestors included, so they follow the tree of the active version. A
switch-over to a version counting with another tree changes, for the
*affected* categories only (those whose set of descendants differs,
rankings.engine.tree.tree_affected), which sales count there; every other
category counts the same sales under both trees, so its buckets, its queue
entries and the batches already logged for it are right as they are.

In the switch's one transaction, under every shard's lock and the layout lock
that every ingest shares (so no sale is queued under the tree being left):

- the buckets of the affected categories are counted again from the raw
  sales under the new tree, leaving out the sales still pending in the
  category's shard (they are not in that shard's boards yet);
- each pending row of a shard holding affected categories names, of those,
  the ones the sale counts in under the new tree, and the others as before;
- a sale still waiting in another shard's queue that the old tree queued on
  none of this shard's boards (it is in none of its buckets) is queued on this
  shard too, for the affected categories it counts in under the new tree: it
  enters their boards as every sale does, by a tick's claim, so an hour's
  snapshot that tick takes first holds it only if it counts by then
  (rankings.engine.snapshots), as had the new tree been in force when it came;
- the caller then rewrites, from the buckets, every board of each shard that
  holds an affected category (batches.shard_rebuild), for the version it
  switches to.

Switching back is the same re-count in the other direction.
"""

import datetime as dt

from django.db import connection

from rankings.engine import locks
from rankings.engine.prune import bucket_cutoff
from rankings.engine.shards import Layout
from rankings.engine.tree import EXPAND_SQL, Tree
from rankings.engine.windows import bucket_sizes, configured_windows
from rankings.models import ShardState

_RECOUNT_BUCKETS = f"""
INSERT INTO rankings_bucket (size, start, category, product_id, shard, units, revenue_cents)
SELECT sizes.size, e.t - ((e.t %% sizes.size) + sizes.size) %% sizes.size, e.category, e.product_id, e.shard,
       sum(e.qty), sum(e.cents)
FROM (
    SELECT m.category, m.shard, s.product_id, floor(extract(epoch FROM s.counted_at))::bigint AS t, s.qty,
           CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END AS cents
    FROM rankings_sale s
    CROSS JOIN LATERAL ({EXPAND_SQL}) AS u(category)
    JOIN unnest(%(affected)s::text[], %(shards)s::integer[]) AS m(category, shard) ON m.category = u.category
    WHERE s.counted_at >= to_timestamp(%(oldest)s)
      AND s.categories && %(covering)s::varchar[]  -- only sales that count in an affected category
      AND NOT EXISTS (SELECT 1 FROM rankings_pendingsale p WHERE p.sale_id = s.id AND p.shard = m.shard)
) e
CROSS JOIN unnest(%(sizes)s::integer[], %(cutoffs)s::bigint[]) AS sizes(size, cutoff)
WHERE e.t >= sizes.cutoff
GROUP BY 1, 2, 3, 4, 5
"""

# Views and wishes of the affected categories: the raw events the retention keeps (every window's),
# less the queue rows of the category's shard that count in it (already re-counted under the new
# tree): what the shard has claimed. Written into the buckets the sales' re-count has just made.
_RECOUNT_ENGAGEMENT_BUCKETS = f"""
INSERT INTO rankings_bucket AS b (size, start, category, product_id, shard, units, revenue_cents, views, wishes)
SELECT sizes.size, e.t - ((e.t %% sizes.size) + sizes.size) %% sizes.size, e.category, e.product_id, e.shard,
       0, 0, sum(e.views), sum(e.wishes)
FROM (
    SELECT m.category, m.shard, s.product_id, floor(extract(epoch FROM s.ts))::bigint AS t,
           (s.kind = 'view')::integer AS views, (s.kind = 'wish')::integer AS wishes
    FROM rankings_engagement s
    CROSS JOIN LATERAL ({EXPAND_SQL}) AS u(category)
    JOIN unnest(%(affected)s::text[], %(shards)s::integer[]) AS m(category, shard) ON m.category = u.category
    WHERE s.ts >= to_timestamp(%(oldest)s) AND s.categories && %(covering)s::varchar[]
    UNION ALL
    SELECT m.category, m.shard, p.product_id, floor(extract(epoch FROM p.ts))::bigint, -p.views, -p.wishes
    FROM rankings_pendingengagement p
    JOIN unnest(%(affected)s::text[], %(shards)s::integer[]) AS m(category, shard)
      ON m.shard = p.shard AND m.category = ANY(p.categories)
    WHERE p.ts >= to_timestamp(%(oldest)s)
) e
CROSS JOIN unnest(%(sizes)s::integer[], %(cutoffs)s::bigint[]) AS sizes(size, cutoff)
WHERE e.t >= sizes.cutoff
GROUP BY 1, 2, 3, 4, 5
HAVING sum(e.views) <> 0 OR sum(e.wishes) <> 0
ON CONFLICT (size, category, start, product_id) DO UPDATE SET views = excluded.views, wishes = excluded.wishes
"""

_PENDING_ENGAGEMENT_OF_SHARDS = """
SELECT shard, entry, categories, named FROM rankings_pendingengagement WHERE shard = ANY(%s)
"""

# The events waiting in any shard's queue that count in an affected category (those naming one of
# `covering`): product, categories named, the shards they wait in, then the columns of a queue row
# of theirs that _WAITING_ADD takes after the shard and the categories.
_WAITING = """
SELECT s.product_id, s.categories, array_agg(p.shard), p.sale_id, p.counted_at
FROM rankings_pendingsale p JOIN rankings_sale s ON s.id = p.sale_id AND s.counted_at = p.counted_at
WHERE s.categories && %s::varchar[]
GROUP BY p.sale_id, p.counted_at, s.product_id, s.categories
"""
_WAITING_ADD = """
INSERT INTO rankings_pendingsale (shard, sale_id, counted_at, categories)
SELECT v.shard, v.sale_id, v.counted_at, string_to_array(v.categories, ',')
FROM unnest(%s::smallint[], %s::text[], %s::bigint[], %s::timestamptz[]) AS v(shard, categories, sale_id, counted_at)
"""
# A group's rows on its shards share the entry, product, second, categories named and counts.
_WAITING_ENGAGEMENT = """
SELECT product_id, named, array_agg(shard), entry, product_id, array_to_string(named, ','), ts, views, wishes,
       min(queued_at)
FROM rankings_pendingengagement
WHERE named && %s::varchar[]
GROUP BY entry, product_id, named, ts, views, wishes
"""
_WAITING_ENGAGEMENT_ADD = """
INSERT INTO rankings_pendingengagement (shard, entry, product_id, ts, categories, named, views, wishes, queued_at)
SELECT v.shard, v.entry, v.product_id, v.ts, string_to_array(v.categories, ','), string_to_array(v.named, ','),
       v.views, v.wishes, v.queued_at
FROM unnest(%s::smallint[], %s::text[], %s::bigint[], %s::text[], %s::text[], %s::timestamptz[], %s::integer[],
            %s::integer[], %s::timestamptz[]) AS v(shard, categories, entry, product_id, named, ts, views, wishes, queued_at)
"""

_PENDING_OF_SHARDS = """
SELECT p.shard, p.sale_id, p.categories, s.categories
FROM rankings_pendingsale p JOIN rankings_sale s ON s.id = p.sale_id AND s.counted_at = p.counted_at
WHERE p.shard = ANY(%s)
"""


def _queue_rewrites(table: str, row: str) -> tuple[str, str]:
    """The statements that set the categories of a queue's rows, and drop rows, by (shard, `row`)."""
    update = f"""
UPDATE {table} p SET categories = string_to_array(v.categories, ',')
FROM unnest(%s::smallint[], %s::bigint[], %s::text[]) AS v(shard, {row}, categories)
WHERE p.shard = v.shard AND p.{row} = v.{row}
"""
    drop = f"""
DELETE FROM {table} p USING unnest(%s::smallint[], %s::bigint[]) AS v(shard, {row})
WHERE p.shard = v.shard AND p.{row} = v.{row}
"""
    return update, drop


_PENDING_SET, _PENDING_DROP = _queue_rewrites("rankings_pendingsale", "sale_id")
_PENDING_ENGAGEMENT_SET, _PENDING_ENGAGEMENT_DROP = _queue_rewrites("rankings_pendingengagement", "entry")


def tree_recount(*, layout: Layout, old: Tree, tree: Tree, affected: set[str]) -> set[int]:
    """Count the `affected` categories' buckets and queue entries again under `tree` (the active
    version's being `old`); inside the caller's transaction, with every shard's lock held. Returns
    the shards whose boards the caller must rewrite from the buckets."""
    if not affected:
        return set()
    slugs = sorted(affected)
    shard_of = {slug: layout.shard_of(slug) for slug in slugs}
    # Last lock, held to the commit: ingests that queued under the old tree commit first and are
    # re-queued below; later ones wait for the commit and read the new tree.
    locks.layout_change_lock()
    instants = [a for a in ShardState.objects.values_list("as_of", flat=True) if a is not None]
    with connection.cursor() as cursor:
        # With the size, the primary key's first two columns: an index scan, not the whole table.
        cursor.execute(
            "DELETE FROM rankings_bucket WHERE size = ANY(%s) AND category = ANY(%s)",
            [bucket_sizes(configured_windows().values()), slugs],
        )
        # The queues first: a bucket's views and wishes are the raw events less the re-counted queue.
        _pending_recount(cursor, tree, shard_of)
        _pending_recount(cursor, tree, shard_of, engagement=True)
        _pending_add(cursor, layout, (old, tree), shard_of)
        _pending_add(cursor, layout, (old, tree), shard_of, engagement=True)
        _buckets_recount(cursor, tree, slugs, shard_of, min(instants, default=None))
    return set(shard_of.values())


def _buckets_recount(
    cursor, tree: Tree, slugs: list[str], shard_of: dict[str, int], as_of: dt.datetime | None
) -> None:
    """The buckets of `slugs` from the raw sales not pending in their shard, each size from the
    oldest bucket any shard keeps as of `as_of` (every bucket before any shard has ticked: a sale
    that counts in an affected category under the new tree and is not queued in its shard is in
    none of its boards otherwise)."""
    sizes = bucket_sizes(configured_windows().values())
    cutoffs = [bucket_cutoff(size, as_of) if as_of is not None else 0 for size in sizes]
    params = {
        "affected": slugs,
        "shards": [shard_of[slug] for slug in slugs],
        "covering": _covering(tree, slugs),
        "oldest": max(min(cutoffs), 0),
        "sizes": sizes,
        "cutoffs": cutoffs,
        **tree.sql_params(),
    }
    cursor.execute(_RECOUNT_BUCKETS, params)
    cursor.execute(_RECOUNT_ENGAGEMENT_BUCKETS, params)


def _covering(tree: Tree, slugs: list[str]) -> list[str]:
    """The categories whose events count in one of `slugs` under `tree`: a sale counts in an
    affected category only if it names it or one of its descendants."""
    return sorted(slug for slug in {*tree.parents, *slugs} if not set(tree.expand([slug])).isdisjoint(slugs))


def _affected_in(shard_of: dict[str, int]) -> dict[int, set[str]]:
    """shard -> the affected categories it holds."""
    affected_in: dict[int, set[str]] = {}
    for slug, shard in shard_of.items():
        affected_in.setdefault(shard, set()).add(slug)
    return affected_in


def _pending_recount(cursor, tree: Tree, shard_of: dict[str, int], *, engagement: bool = False) -> None:
    """Each pending row (of sales, or of engagement) of a shard with affected categories: those its
    events count in under `tree`."""
    affected_in = _affected_in(shard_of)
    read, update, drop = (
        (_PENDING_ENGAGEMENT_OF_SHARDS, _PENDING_ENGAGEMENT_SET, _PENDING_ENGAGEMENT_DROP)
        if engagement
        else (_PENDING_OF_SHARDS, _PENDING_SET, _PENDING_DROP)
    )
    cursor.execute(read, [sorted(affected_in)])
    changed, emptied = [], []
    for shard, row, queued, named in cursor.fetchall():
        here = affected_in[shard]
        kept = [slug for slug in queued if slug not in here]
        counted = kept + [slug for slug in tree.expand(named) if slug in here and slug not in kept]
        if not counted:
            emptied.append((shard, row))
        elif counted != list(queued):
            changed.append((shard, row, ",".join(counted)))
    if changed:
        cursor.execute(update, [list(column) for column in zip(*changed, strict=True)])
    if emptied:
        cursor.execute(drop, [list(column) for column in zip(*emptied, strict=True)])


def _pending_add(
    cursor, layout: Layout, trees: tuple[Tree, Tree], shard_of: dict[str, int], *, engagement: bool = False
) -> None:
    """Queue on each shard with affected categories, for those it counts in under the new tree of
    `trees` (old, new), every sale (or group of engagement events) that waits in other shards'
    queues and that the old tree queued on none of this shard's boards: it is in none of its
    buckets, and counted into them at once it would be in the snapshot of an hour before it counts."""
    old, tree = trees
    affected_in = _affected_in(shard_of)
    read, add = (_WAITING_ENGAGEMENT, _WAITING_ENGAGEMENT_ADD) if engagement else (_WAITING, _WAITING_ADD)
    cursor.execute(read, [_covering(tree, sorted(shard_of))])
    added = []
    for product_id, named, waiting_in, *row in cursor.fetchall():
        queued_on = layout.queued(old.expand(named), product_id)
        counted = tree.expand(named)
        for shard, here in affected_in.items():
            if shard in waiting_in or shard in queued_on:
                continue  # its row here is re-counted above, or the shard has claimed it
            categories = [slug for slug in counted if slug in here]
            if categories:
                added.append((shard, ",".join(categories), *row))
    if added:
        cursor.execute(add, [list(column) for column in zip(*added, strict=True)])

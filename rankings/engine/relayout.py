"""Re-key what PostgreSQL keeps by shard number when a switch-over changes the shard layout.

The work queue, the buckets' shard column, each shard's state and its batch log
are keyed by the shard number of the active layout. A switch-over to a version
laid out otherwise (another count, other pinned categories) re-keys them all in
its one transaction, under every shard's lock of both layouts and, for the
queue, the layout lock that every ingest shares:

- buckets take the shard of their category under the new layout;
- a pending sale's row names the boards of its shard the sale counts in, so
  rows are split by the new layout and those of one sale that meet on one new
  shard are merged: each sale stays queued once for each shard of its boards;
- each new shard's state starts at the batch number and the instant the new
  version's Redis state holds for it (the caller settled every shard to one
  instant first), so the next tick's batch is the next number there;
- the batch log is emptied: every batch was applied to the version that served
  and replayed into the new one, and the next numbers start from the new state.
"""

import datetime as dt

from django.db import connection

from rankings.engine import locks
from rankings.engine.shards import ALL, Layout
from rankings.models import ShardState

_MAP_TABLE = """
DROP TABLE IF EXISTS pg_temp.layout_map;
CREATE TEMPORARY TABLE layout_map (category varchar(50) PRIMARY KEY, shard smallint NOT NULL) ON COMMIT DROP
"""

_BUCKET_CATEGORIES = "SELECT DISTINCT category FROM rankings_bucket"
_PENDING_CATEGORIES = "SELECT DISTINCT unnest(categories) FROM rankings_pendingsale"

_REKEY_BUCKETS = """
UPDATE rankings_bucket b SET shard = m.shard FROM layout_map m
WHERE b.category = m.category AND b.shard <> m.shard
"""

_REKEY_PENDING = """
DROP TABLE IF EXISTS pg_temp.pending_rekeyed;
CREATE TEMPORARY TABLE pending_rekeyed ON COMMIT DROP AS
SELECT m.shard, p.sale_id, p.counted_at, array_agg(u.category ORDER BY u.category) AS categories
FROM rankings_pendingsale p CROSS JOIN LATERAL unnest(p.categories) AS u(category)
JOIN layout_map m ON m.category = u.category
GROUP BY m.shard, p.sale_id, p.counted_at;
DELETE FROM rankings_pendingsale;
INSERT INTO rankings_pendingsale (shard, sale_id, counted_at, categories)
SELECT shard, sale_id, counted_at, categories FROM pending_rekeyed
"""


def _map_add(cursor, layout: Layout, categories_query: str) -> None:
    """Put the categories the query finds, and not yet mapped, in layout_map with their new shard."""
    cursor.execute(categories_query)
    slugs = [slug for (slug,) in cursor.fetchall()]
    cursor.execute(
        "INSERT INTO layout_map SELECT * FROM unnest(%s::varchar[], %s::smallint[]) ON CONFLICT DO NOTHING",
        [slugs, [layout.shard_of(slug) for slug in slugs]],
    )


def state_rekey(*, layout: Layout, positions: dict[int, int], as_of: dt.datetime | None) -> None:
    """Re-key every row kept by shard number to `layout`; inside the caller's transaction, with every
    shard's lock of both layouts held. `positions`: new shard -> the batch its version holds."""
    with connection.cursor() as cursor:
        cursor.execute(_MAP_TABLE)
        # Ticks write buckets, and every tick is held off: their categories are known now.
        _map_add(cursor, layout, _BUCKET_CATEGORIES)
        cursor.execute(_REKEY_BUCKETS)
        too_old = sum(ShardState.objects.values_list("too_old", flat=True))
        cursor.execute("DELETE FROM rankings_shardstate")
        ShardState.objects.bulk_create(
            [
                ShardState(
                    shard=shard,
                    seq=positions[shard],
                    as_of=as_of,
                    too_old=too_old if shard == layout.shards_of(ALL)[0] else 0,
                )
                for shard in range(layout.shards)
            ]
        )
        cursor.execute("DELETE FROM rankings_batch")
        # Last, as briefly as can be: the ingests that queued under the old layout commit first,
        # later ones wait for this commit and then read the new layout.
        locks.layout_change_lock()
        _map_add(cursor, layout, _PENDING_CATEGORIES)
        cursor.execute(_REKEY_PENDING)

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
  and replayed into the new one, and the next numbers start from the new state;
- each rank alert takes the shard of its category, whose ticks judge it;
- a board split otherwise (rankings.engine.split) changes the category its rows
  are kept under: each bucket and queue row of a product takes the board that
  holds the product in the new layout (`all` ↔ `all#k`) before being re-keyed.
"""

import datetime as dt

from django.db import connection

from rankings.engine import locks
from rankings.engine.alerts import alerts_rekey
from rankings.engine.shards import ALL, Layout
from rankings.engine.split import base_of
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

# The engagement queue, split and merged the same way (the rows of one group, one per old shard,
# carry the same entry and counts: merged on a new shard, they count once).
_PENDING_ENGAGEMENT_CATEGORIES = "SELECT DISTINCT unnest(categories) FROM rankings_pendingengagement"
_REKEY_PENDING_ENGAGEMENT = """
DROP TABLE IF EXISTS pg_temp.pending_engagement_rekeyed;
CREATE TEMPORARY TABLE pending_engagement_rekeyed ON COMMIT DROP AS
SELECT m.shard, p.entry, p.product_id, p.ts, p.named, p.views, p.wishes, p.queued_at,
       array_agg(DISTINCT u.category ORDER BY u.category) AS categories
FROM rankings_pendingengagement p CROSS JOIN LATERAL unnest(p.categories) AS u(category)
JOIN layout_map m ON m.category = u.category
GROUP BY m.shard, p.entry, p.product_id, p.ts, p.named, p.views, p.wishes, p.queued_at;
DELETE FROM rankings_pendingengagement;
INSERT INTO rankings_pendingengagement (shard, entry, product_id, ts, categories, named, views, wishes, queued_at)
SELECT shard, entry, product_id, ts, categories, named, views, wishes, queued_at FROM pending_engagement_rekeyed
"""


def _map_add(cursor, layout: Layout, categories_query: str) -> None:
    """Put the categories the query finds, and not yet mapped, in layout_map with their new shard."""
    cursor.execute(categories_query)
    slugs = [slug for (slug,) in cursor.fetchall()]
    cursor.execute(
        "INSERT INTO layout_map SELECT * FROM unnest(%s::varchar[], %s::smallint[]) ON CONFLICT DO NOTHING",
        [slugs, [layout.shard_of(slug) for slug in slugs]],
    )


_SPLIT_MAP_TABLE = """
DROP TABLE IF EXISTS pg_temp.split_map;
CREATE TEMPORARY TABLE split_map (
    category varchar(50), product_id varchar(64), board varchar(50), PRIMARY KEY (category, product_id)
) ON COMMIT DROP
"""

_BUCKET_PAIRS = "SELECT DISTINCT category, product_id FROM rankings_bucket WHERE category = ANY(%s)"
_PENDING_PAIRS = """
SELECT DISTINCT u.category, s.product_id
FROM rankings_pendingsale p JOIN rankings_sale s ON s.id = p.sale_id AND s.counted_at = p.counted_at
CROSS JOIN LATERAL unnest(p.categories) AS u(category)
WHERE p.categories && %(names)s::varchar[] AND u.category = ANY(%(names)s)
"""

_SPLIT_BUCKETS = """
UPDATE rankings_bucket b SET category = m.board FROM split_map m
WHERE b.category = m.category AND b.product_id = m.product_id
"""

# Separate statements: psycopg sends parameters with one statement at a time.
_SPLIT_PENDING = (
    "DROP TABLE IF EXISTS pg_temp.pending_split",
    """
CREATE TEMPORARY TABLE pending_split ON COMMIT DROP AS
SELECT p.shard, p.sale_id, p.counted_at, array_agg(coalesce(m.board, u.category)) AS categories
FROM rankings_pendingsale p JOIN rankings_sale s ON s.id = p.sale_id AND s.counted_at = p.counted_at
CROSS JOIN LATERAL unnest(p.categories) AS u(category)
LEFT JOIN split_map m ON m.category = u.category AND m.product_id = s.product_id
WHERE p.categories && %(names)s::varchar[]
GROUP BY p.shard, p.sale_id, p.counted_at
""",
    "DELETE FROM rankings_pendingsale WHERE categories && %(names)s::varchar[]",
    """
INSERT INTO rankings_pendingsale (shard, sale_id, counted_at, categories)
SELECT shard, sale_id, counted_at, categories FROM pending_split
""",
)


def _resplit_names(previous: Layout, layout: Layout) -> list[str]:
    """The categories rows are kept under in `previous` whose boards `layout` splits otherwise."""
    changed = {
        slug
        for slug in previous.split.keys() | layout.split.keys()
        if previous.split.get(slug) != layout.split.get(slug)
    }
    return [name for slug in sorted(changed) for name in previous.boards_of(slug)]


def _split_map_add(cursor, layout: Layout, query: str, params) -> None:
    """Put the (category, product) pairs the query finds in split_map with their board in `layout`."""
    cursor.execute(query, params)
    pairs = [
        (category, product_id, layout.board_of(base_of(category), product_id))
        for category, product_id in cursor.fetchall()
    ]
    pairs = [pair for pair in pairs if pair[0] != pair[2]]
    if pairs:
        cursor.execute(
            "INSERT INTO split_map SELECT * FROM unnest(%s::varchar[], %s::varchar[], %s::varchar[])"
            " ON CONFLICT DO NOTHING",
            [list(column) for column in zip(*pairs, strict=True)],
        )


def state_rekey(
    *, layout: Layout, previous: Layout | None = None, positions: dict[int, int], as_of: dt.datetime | None
) -> None:
    """Re-key every row kept by shard number to `layout` (from `previous`, the active one); inside the
    caller's transaction, with every shard's lock of both layouts held. `positions`: new shard -> the
    batch its version holds."""
    resplit = _resplit_names(previous, layout) if previous is not None else []
    with connection.cursor() as cursor:
        if resplit:
            cursor.execute(_SPLIT_MAP_TABLE)
            _split_map_add(cursor, layout, _BUCKET_PAIRS, [resplit])
            cursor.execute(_SPLIT_BUCKETS)
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
        if resplit:
            _split_map_add(cursor, layout, _PENDING_PAIRS, {"names": resplit})
            for statement in _SPLIT_PENDING:
                cursor.execute(statement, {"names": resplit})
        _map_add(cursor, layout, _PENDING_CATEGORIES)
        cursor.execute(_REKEY_PENDING)
        _map_add(cursor, layout, _PENDING_ENGAGEMENT_CATEGORIES)
        cursor.execute(_REKEY_PENDING_ENGAGEMENT)
        # Made under the shared layout lock too: an alert made under the old layout is re-keyed here.
        alerts_rekey(cursor, layout)

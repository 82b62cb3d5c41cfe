"""The batch recompute: every board from raw sales and engagement events with one obvious GROUP BY each.

Slow on purpose and independent of buckets and Redis: it is the reference the
incremental engine is checked against (`rankings_verify`, and the tests).
"""

from collections import defaultdict
from typing import Any

from django.db import connection

from rankings.conf import ENGAGEMENT_METRICS, SALES_METRICS, rankings_settings
from rankings.engine.shards import ALL, Layout
from rankings.engine.tree import EMPTY, EXPAND_SQL, Tree
from rankings.engine.windows import configured_windows

# Every category of the sales, not the catalogue's: the recompute must count a
# category whatever became of it there, and once in each ancestor of it in the
# version's tree (a sale naming a category and its ancestor counts once there).
# Boards of other shards are dropped afterwards.
_RECOMPUTE = f"""
SELECT c.category, s.product_id, sum(s.qty),
       sum(CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END)  -- a refund subtracts
FROM rankings_sale s
CROSS JOIN LATERAL (SELECT %(all)s::text UNION ALL ({EXPAND_SQL})) AS c(category)
WHERE s.counted_at >= to_timestamp(%(first)s) AND s.counted_at < to_timestamp(%(stop)s)
  AND NOT EXISTS (
      SELECT 1 FROM rankings_pendingsale p WHERE p.sale_id = s.id AND p.shard = %(shard)s
  )
GROUP BY c.category, s.product_id
"""

# Views and wishes, from the raw engagement events the retention keeps (every window's), less those
# the shard has not claimed yet (its queue rows count them by product, second and boards, a split
# category's under the part that holds the product).
_RECOMPUTE_ENGAGEMENT = f"""
SELECT c.category, s.product_id,
       count(*) FILTER (WHERE s.kind = 'view'), count(*) FILTER (WHERE s.kind = 'wish')
FROM rankings_engagement s
CROSS JOIN LATERAL (SELECT %(all)s::text UNION ALL ({EXPAND_SQL})) AS c(category)
WHERE s.ts >= to_timestamp(%(first)s) AND s.ts < to_timestamp(%(stop)s)
GROUP BY 1, 2
"""
_PENDING_ENGAGEMENT = """
SELECT c.category, p.product_id, sum(p.views), sum(p.wishes)
FROM rankings_pendingengagement p CROSS JOIN LATERAL unnest(p.categories) AS c(category)
WHERE p.shard = %(shard)s AND p.ts >= to_timestamp(%(first)s) AND p.ts < to_timestamp(%(stop)s)
GROUP BY 1, 2
"""


def boards_recompute(
    *, shard: int, layout: Layout, now: float, tree: Tree = EMPTY
) -> dict[tuple[str, str, str], list[tuple[str, int]]]:
    """Every non-empty board of a shard (of `layout`, counting with `tree`) as of `now` (epoch
    seconds), in ranking order.

    Counts the sales and engagement events the shard has claimed (those still
    pending are not yet in any board). Keys are (window, metric, category); values [(product_id, score)].
    """
    boards: dict[tuple[str, str, str], list[tuple[str, int]]] = defaultdict(list)
    in_shard: dict[str, bool] = {}

    def board_here(slug: str, product_id: str) -> str | None:
        """The board of the shard that counts `product_id` in `slug` (its part, for a split
        category); None when that board is another shard's."""
        category = layout.board_of(slug, product_id)
        if category not in in_shard:
            in_shard[category] = layout.shard_of(category) == shard
        return category if in_shard[category] else None

    with connection.cursor() as cursor:
        for w in configured_windows().values():
            first, last = w.bounds(int(now))
            params = {"all": ALL, "first": first, "stop": last + w.bucket_seconds, "shard": shard}
            scores = {
                **_sales_recount(cursor, {**params, **tree.sql_params()}, board_here),
                **_engagement_recount(cursor, {**params, **tree.sql_params()}, board_here),
            }
            for (metric, category, product_id), score in scores.items():
                if score > 0:
                    boards[(w.name, metric, category)].append((product_id, int(score)))
    for rows in boards.values():
        rows.sort(key=lambda row: (-row[1], row[0].encode()))
    return dict(boards)


def _sales_recount(cursor, params: dict, board_here) -> dict[tuple[str, str, str], int]:
    """(metric, board, product) -> units and revenue in one window of `params`, over the shard's claimed sales."""
    scores = {}
    cursor.execute(_RECOMPUTE, params)
    for slug, product_id, units, cents in cursor.fetchall():
        category = board_here(slug, product_id)
        if category is not None:
            scores[("units", category, product_id)] = units
            scores[("revenue", category, product_id)] = cents
    return scores


def _engagement_recount(cursor, params: dict, board_here) -> dict[tuple[str, str, str], int]:
    """(metric, board, product) -> views and wishes in one window of `params`: the raw events in
    the shard's boards less those still pending in its queue."""
    scores: dict[tuple[str, str, str], int] = defaultdict(int)
    cursor.execute(_RECOMPUTE_ENGAGEMENT, params)
    for slug, product_id, views, wishes in cursor.fetchall():
        category = board_here(slug, product_id)
        if category is not None:
            scores[("views", category, product_id)] += views
            scores[("wishes", category, product_id)] += wishes
    cursor.execute(_PENDING_ENGAGEMENT, params)
    for category, product_id, views, wishes in cursor.fetchall():
        if ("views", category, product_id) in scores:
            scores[("views", category, product_id)] -= views
            scores[("wishes", category, product_id)] -= wishes
    return scores


# The snapshots' reference: for each hour H, the sales in the window as of H that the engine had
# counted by H (those of ticks before the one that crossed H, and the others counted at or before H),
# each once in every ancestor of its categories under the tree. Each sale of the hours' span is
# expanded to its categories once, then counted in every hour whose window holds it.
_SNAPSHOT_RECOMPUTE = f"""
WITH sold AS MATERIALIZED (
    SELECT s.id, s.counted_at, s.product_id, s.qty,
           CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END AS cents, c.category
    FROM rankings_sale s
    CROSS JOIN LATERAL (SELECT %(all)s::text UNION ALL ({EXPAND_SQL})) AS c(category)
    WHERE s.counted_at >= to_timestamp(%(first)s - %(span)s) AND s.counted_at < to_timestamp(%(last)s + %(size)s)
)
SELECT h.at, s.category, s.product_id, sum(s.qty)::bigint, sum(s.cents)::bigint
FROM sold s JOIN unnest(%(hours)s::bigint[]) AS h(at)
  ON s.counted_at >= to_timestamp(h.at - %(span)s) AND s.counted_at < to_timestamp(h.at + %(size)s)
WHERE s.id <= %(earlier)s OR s.counted_at <= to_timestamp(h.at)
GROUP BY h.at, s.category, s.product_id
"""

# The same for views and wishes; an event counts from its whole second, as the tick counts it.
_SNAPSHOT_RECOMPUTE_ENGAGEMENT = f"""
WITH engaged AS MATERIALIZED (
    SELECT s.id, s.ts, s.kind, s.product_id, c.category
    FROM rankings_engagement s
    CROSS JOIN LATERAL (SELECT %(all)s::text UNION ALL ({EXPAND_SQL})) AS c(category)
    WHERE s.ts >= to_timestamp(%(first)s - %(span)s) AND s.ts < to_timestamp(%(last)s + %(size)s)
)
SELECT h.at, s.category, s.product_id, count(*) FILTER (WHERE s.kind = 'view'), count(*) FILTER (WHERE s.kind = 'wish')
FROM engaged s JOIN unnest(%(hours)s::bigint[]) AS h(at)
  ON s.ts >= to_timestamp(h.at - %(span)s) AND s.ts < to_timestamp(h.at + %(size)s)
WHERE s.id <= %(earlier_engagement)s OR floor(extract(epoch FROM s.ts)) <= h.at
GROUP BY h.at, s.category, s.product_id
"""


def snapshots_recompute(
    *,
    hours: list[int],
    earlier_sale_id: int,
    earlier_engagement_id: int = 0,
    tree: Tree = EMPTY,
    layout: Layout | None = None,
) -> dict[tuple[int, str, str, str], list[str]]:
    """The snapshots of the hours `hours` (epoch seconds) from raw sales and engagement events, for a
    tick that crossed them having counted, before it, the sales up to id `earlier_sale_id` and the
    events up to `earlier_engagement_id` (those stored before the previous tick), with `tree`, a
    split category's by part as `layout` splits it. Keys are (hour,
    window, metric, category); values the first SNAPSHOT_DEPTH product ids in ranking order. Every
    shard's boards."""
    snapshots: dict[tuple[int, str, str, str], list[tuple[int, bytes, str]]] = defaultdict(list)
    if not hours:
        return {}
    with connection.cursor() as cursor:
        for name in rankings_settings.SNAPSHOT_WINDOWS:
            w = configured_windows()[name]
            params: dict[str, Any] = {
                "all": ALL,
                "hours": hours,
                "first": min(hours),
                "last": max(hours),
                "span": (w.buckets - 1) * w.bucket_seconds,
                "size": w.bucket_seconds,
                "earlier": earlier_sale_id,
                "earlier_engagement": earlier_engagement_id,
                **tree.sql_params(),
            }
            for query, metrics in (
                (_SNAPSHOT_RECOMPUTE, SALES_METRICS),
                (_SNAPSHOT_RECOMPUTE_ENGAGEMENT, ENGAGEMENT_METRICS),
            ):
                cursor.execute(query, params)
                for at, slug, product_id, *scores in cursor.fetchall():
                    # A split category's snapshots are its parts' (`layout`'s).
                    category = layout.board_of(slug, product_id) if layout is not None else slug
                    for metric, score in zip(metrics, scores, strict=True):
                        if score > 0:
                            snapshots[(at, name, metric, category)].append(
                                (-score, product_id.encode(), product_id)
                            )
    depth = rankings_settings.SNAPSHOT_DEPTH
    return {key: [row[2] for row in sorted(rows)[:depth]] for key, rows in snapshots.items()}

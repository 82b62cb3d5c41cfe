"""The batch recompute: every board from raw sales with one obvious GROUP BY.

Slow on purpose and independent of buckets and Redis: it is the reference the
incremental engine is checked against (`rankings_verify`, and the tests).
"""

from collections import defaultdict

from django.db import connection

from rankings.conf import rankings_settings
from rankings.engine.shards import ALL, Layout

# Every category of the sales, not the catalogue's: the recompute must count a
# category whatever became of it there. Boards of other shards are dropped afterwards.
_RECOMPUTE = """
SELECT c.category, s.product_id, sum(s.qty),
       sum(CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END)  -- a refund subtracts
FROM rankings_sale s
CROSS JOIN LATERAL unnest(s.categories || ARRAY[%(all)s]::varchar[]) AS c(category)
WHERE s.counted_at >= to_timestamp(%(first)s) AND s.counted_at < to_timestamp(%(stop)s)
  AND NOT EXISTS (
      SELECT 1 FROM rankings_pendingsale p WHERE p.sale_id = s.id AND p.shard = %(shard)s
  )
GROUP BY c.category, s.product_id
"""


def boards_recompute(
    *, shard: int, layout: Layout, now: float
) -> dict[tuple[str, str, str], list[tuple[str, int]]]:
    """Every non-empty board of a shard (of `layout`) as of `now` (epoch seconds), in ranking order.

    Counts the sales the shard has claimed (those still pending are not yet in
    any board). Keys are (window, metric, category); values [(product_id, score)].
    """
    boards: dict[tuple[str, str, str], list[tuple[str, int]]] = defaultdict(list)
    in_shard: dict[str, bool] = {}
    t = int(now)
    with connection.cursor() as cursor:
        for w in rankings_settings.windows.values():
            first, last = w.bounds(t)
            cursor.execute(
                _RECOMPUTE, {"all": ALL, "first": first, "stop": last + w.bucket_seconds, "shard": shard}
            )
            for slug, product_id, units, cents in cursor.fetchall():
                # A split category's sales count on the part that holds the product.
                category = layout.board_of(slug, product_id)
                if category not in in_shard:
                    in_shard[category] = layout.shard_of(category) == shard
                if not in_shard[category]:
                    continue
                if units > 0:
                    boards[(w.name, "units", category)].append((product_id, int(units)))
                if cents > 0:
                    boards[(w.name, "revenue", category)].append((product_id, int(cents)))
    for rows in boards.values():
        rows.sort(key=lambda row: (-row[1], row[0].encode()))
    return dict(boards)

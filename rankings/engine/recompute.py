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
            for category, product_id, units, cents in cursor.fetchall():
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


# The snapshots' reference: for each hour H, the sales in the window as of H that the engine had
# counted by H (those of ticks before the one that crossed H, and the others counted at or before H).
_SNAPSHOT_RECOMPUTE = """
SELECT h.at, c.category, s.product_id, sum(s.qty),
       sum(CASE WHEN s.qty < 0 THEN -s.amount_cents ELSE s.amount_cents END)
FROM rankings_sale s
CROSS JOIN LATERAL unnest(s.categories || ARRAY[%(all)s]::varchar[]) AS c(category)
JOIN unnest(%(hours)s::bigint[]) AS h(at)
  ON s.counted_at >= to_timestamp(h.at - %(span)s) AND s.counted_at < to_timestamp(h.at + %(size)s)
WHERE s.id <= %(earlier)s OR s.counted_at <= to_timestamp(h.at)
GROUP BY h.at, c.category, s.product_id
"""


def snapshots_recompute(
    *, hours: list[int], earlier_sale_id: int
) -> dict[tuple[int, str, str, str], list[str]]:
    """The snapshots of the hours `hours` (epoch seconds) from raw sales, for a tick that crossed
    them having counted, before it, the sales up to id `earlier_sale_id` (the sales stored before
    the previous tick). Keys are (hour, window, metric, category); values the first
    SNAPSHOT_DEPTH product ids in ranking order. Every shard's boards."""
    snapshots: dict[tuple[int, str, str, str], list[tuple[int, bytes, str]]] = defaultdict(list)
    if not hours:
        return {}
    with connection.cursor() as cursor:
        for name in rankings_settings.SNAPSHOT_WINDOWS:
            w = rankings_settings.windows[name]
            cursor.execute(
                _SNAPSHOT_RECOMPUTE,
                {
                    "all": ALL,
                    "hours": hours,
                    "span": (w.buckets - 1) * w.bucket_seconds,
                    "size": w.bucket_seconds,
                    "earlier": earlier_sale_id,
                },
            )
            for at, category, product_id, units, cents in cursor.fetchall():
                for metric, score in (("units", int(units)), ("revenue", int(cents))):
                    if score > 0:
                        snapshots[(at, name, metric, category)].append(
                            (-score, product_id.encode(), product_id)
                        )
    depth = rankings_settings.SNAPSHOT_DEPTH
    return {key: [row[2] for row in sorted(rows)[:depth]] for key, rows in snapshots.items()}

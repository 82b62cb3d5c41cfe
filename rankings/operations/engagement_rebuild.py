"""A rebuild's part of the engagement boards: views and wishes of the windows not of whole hours (a
window of minutes), from raw events; the others are summed from the hour buckets
(rankings.engine.hourly).

Read in the rebuild's snapshot (rankings.operations.backfill) and streamed into
the boards like the sales (rankings.operations.board_stream): the raw events the
retention keeps hold every window, and the events a shard has not claimed yet
are taken out, as no board of it holds them.
"""

import datetime as dt

from rankings.engine.shards import ALL, Layout
from rankings.engine.split import base_of
from rankings.engine.tree import EMPTY, EXPAND_SQL, Tree
from rankings.engine.windows import Window

# Each event once in every category it names and every ancestor of them, under the version's tree:
# the events are first added up by product and list of categories (a product is seen in few lists),
# then each group is counted in its categories, as a rebuild adds up the sales (backfill._AGGREGATE).
_TOTALS = f"""
SELECT u.category, s.product_id, {{totals}}
FROM (
    SELECT s.product_id, s.categories, {{sums}}
    FROM rankings_engagement s
    WHERE s.ts >= %(oldest)s AND s.ts < %(stop)s
    GROUP BY s.product_id, s.categories
) AS s CROSS JOIN LATERAL (SELECT %(all)s::text UNION ALL ({EXPAND_SQL})) AS u(category)
GROUP BY 1, 2
"""

# A queue row names the boards of its shard (`all` among them where it lives there) and counts
# its group's views and wishes.
_PENDING = """
SELECT e.shard, u.category, e.product_id, {sums}
FROM rankings_pendingengagement e CROSS JOIN LATERAL unnest(e.categories) AS u(category)
WHERE e.ts >= %(oldest)s AND e.ts < %(stop)s
GROUP BY 1, 2, 3
"""


def _window_counts(windows: list[Window], as_of: dt.datetime) -> tuple[list[str], str, dict]:
    """Every window's views and wishes as of `as_of` (views first), counted from raw events, and the
    select list of the same summed from queue rows, and their parameters, with `oldest` and `stop`
    bounding all windows."""
    t = int(as_of.timestamp())
    sums, queued, starts, stops = [], [], [], []
    params: dict = {"all": ALL}
    for i, w in enumerate(windows):
        first, last = w.bounds(t)
        params[f"f{i}"] = dt.datetime.fromtimestamp(first, tz=dt.UTC)
        params[f"t{i}"] = dt.datetime.fromtimestamp(last + w.bucket_seconds, tz=dt.UTC)
        starts.append(params[f"f{i}"])
        stops.append(params[f"t{i}"])
        inside = f"ts >= %(f{i})s AND ts < %(t{i})s"
        for kind, column in (("view", "views"), ("wish", "wishes")):
            sums.append(f"count(*) FILTER (WHERE s.{inside} AND s.kind = '{kind}')")
            queued.append(f"coalesce(sum(e.{column}) FILTER (WHERE e.{inside}), 0)")
    params.update(oldest=min(starts), stop=max(stops))
    return sums, ", ".join(queued), params


def engagement_query(windows: list[Window], as_of: dt.datetime, tree: Tree = EMPTY) -> tuple[str, dict]:
    """The aggregate of every (category, product id)'s views and wishes of each window in turn as of
    `as_of`, counted with `tree`, and its parameters."""
    sums, _, params = _window_counts(windows, as_of)
    statement = _TOTALS.format(
        sums=", ".join(f"{each} AS w{i}" for i, each in enumerate(sums)),
        totals=", ".join(f"sum(s.w{i})::bigint" for i in range(len(sums))),
    )
    return statement, {**params, **tree.sql_params()}


def engagement_pending(
    connection, windows: list[Window], as_of: dt.datetime, live: Layout
) -> dict[tuple[str, str], list[int]]:
    """(category, product id) -> the views and wishes of each window that the shard of its board (of
    the active `live` layout) has not claimed yet: none of its boards holds them."""
    _, queued, params = _window_counts(windows, as_of)
    owed = {}
    with connection.cursor() as cursor:
        cursor.execute(_PENDING.format(sums=queued), params)
        for shard, board, product_id, *values in cursor.fetchall():
            # A queue row names a split category's part; the aggregate is by category.
            if live.shard_of(board) == shard:
                owed[(base_of(board), product_id)] = values
    return owed

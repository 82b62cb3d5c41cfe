"""Rank alerts judged at each hourly snapshot, in the transaction that records it (snapshots.take).

An alert names a product and a board (category, window, metric) and a rule: `enters N` holds at
hour H when the product's rank is at most N in H's snapshot and was unranked or past N in the
snapshot of H − 1h; `leaves N` the reverse; `climbs k` when it rose by k places or more, `falls k`
when it fell by k or more, an unranked product counting as rank SNAPSHOT_DEPTH + 1. A rule that
holds makes one firing (AlertFiring), which the sender delivers as a webhook.

Each hour is judged by the shard that records its snapshots, for the alerts on that shard's boards
(Alert.shard, the active layout's), with the very rows it has just written: an hour crossed late
(a tick after an outage) is judged in order with the others, each once. (alert, hour) is unique, so
an hour recorded again (a reshard's new shard retaking the switch's hour, a clock reset) fires
nothing twice, and a rebuild's history (rankings/engine/history.py), written without judging,
fires nothing at all. An hour whose previous hour the version's history lacks (the first hour
ever, a gap past the snapshots' keep) is not judged: nothing is known to compare with.

The cost is one statement per shard and take, whatever the boards' sizes: the alerts of the shard
(by its index), the distinct boards they name, each board's rows of the hours judged looked up by
the board's own index entries (never every board of the hour), and each alert's product searched for
in its board's two rows (array_position: at most SNAPSHOT_DEPTH ids, in memory).
"""

import datetime as dt

from django.db import connection

from rankings.conf import rankings_settings
from rankings.engine.shards import Layout
from rankings.models import Alert, AlertFiring, Snapshot, SnapshotHour

HOUR = 3600  # seconds: an hour is judged against the snapshot of the hour before

# What each rule's firing is called in the webhook's `type`.
KINDS = {
    Alert.Rule.ENTERS: "rank.entered",
    Alert.Rule.LEAVES: "rank.left",
    Alert.Rule.CLIMBS: "rank.climbed",
    Alert.Rule.FALLS: "rank.fell",
}

# %(hours)s: the hours (epoch seconds) just recorded, in this transaction, for the shard's boards;
# %(instants)s: those hours and the hours before them, the snapshots read.
_JUDGE = f"""
WITH hours (at) AS (
    SELECT h FROM unnest(%(hours)s::bigint[]) AS h
    WHERE EXISTS (SELECT 1 FROM {SnapshotHour._meta.db_table} p
                  WHERE p.version = %(version)s AND p.at = to_timestamp(h - {HOUR}))
), alerts AS MATERIALIZED (
    SELECT id, product_id, category, "window", metric, rule, number, since
    FROM {Alert._meta.db_table} WHERE shard = %(shard)s
), boards AS (
    SELECT DISTINCT category, "window", metric FROM alerts
), rows_ AS MATERIALIZED (
    SELECT b.category, b."window", b.metric, extract(epoch FROM s.at)::bigint AS at,
           string_to_array(s.products, ' ') AS ids
    FROM boards b
    -- Each alerted board's rows looked up by the board's own index entries (OFFSET 0 keeps the planner
    -- from turning this into a scan of every board's rows of those hours, then a join).
    CROSS JOIN LATERAL (
        SELECT s.at, s.products FROM {Snapshot._meta.db_table} s
        WHERE s.version = %(version)s AND s.category = b.category AND s."window" = b."window"
          AND s.metric = b.metric AND s.at = ANY(%(instants)s::timestamptz[])
        OFFSET 0
    ) s
), judged AS (
    -- Each alert's product looked for in its board's two rows: a search of at most SNAPSHOT_DEPTH ids
    -- in memory, after one hash join per hour (a board has one row an hour at most).
    SELECT a.id, h.at, a.rule, a.number, array_position(now_.ids, a.product_id::text) AS rank,
           array_position(before.ids, a.product_id::text) AS rank_before
    FROM alerts a CROSS JOIN hours h
    LEFT JOIN rows_ now_
      ON now_.category = a.category AND now_."window" = a."window" AND now_.metric = a.metric
     AND now_.at = h.at
    LEFT JOIN rows_ before
      ON before.category = a.category AND before."window" = a."window" AND before.metric = a.metric
     AND before.at = h.at - {HOUR}
    WHERE a.since IS NULL OR to_timestamp(h.at) > a.since
), fired AS (
    SELECT id, at, rule, number, rank, rank_before,
           coalesce(rank, %(past)s) AS r, coalesce(rank_before, %(past)s) AS r_before
    FROM judged
), kinds AS (
    SELECT id, at, rank, rank_before, CASE
        WHEN rule = 'enters' AND r <= number AND r_before > number THEN '{KINDS[Alert.Rule.ENTERS]}'
        WHEN rule = 'leaves' AND r_before <= number AND r > number THEN '{KINDS[Alert.Rule.LEAVES]}'
        WHEN rule = 'climbs' AND r_before - r >= number THEN '{KINDS[Alert.Rule.CLIMBS]}'
        WHEN rule = 'falls' AND r - r_before >= number THEN '{KINDS[Alert.Rule.FALLS]}'
    END AS kind
    FROM fired
)
INSERT INTO {AlertFiring._meta.db_table} (alert_id, at, kind, rank, rank_before, state, attempts, next_attempt_at)
SELECT id, to_timestamp(at), kind, rank, rank_before, '{AlertFiring.State.PENDING}', 0, to_timestamp(at)
FROM kinds WHERE kind IS NOT NULL
ORDER BY at, id
ON CONFLICT (alert_id, at) DO NOTHING
"""


def alerts_judge(*, shard: int, version: int, hours: list[int]) -> int:
    """Judge the alerts of the shard's boards at each of `hours` (epoch seconds), whose snapshots of
    `version` the caller's transaction has just recorded; returns how many fired."""
    if not hours:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            _JUDGE,
            {
                "hours": hours,
                "instants": sorted(
                    {instant for at in hours for instant in (_instant(at), _instant(at - HOUR))}
                ),
                "version": version,
                "shard": shard,
                "past": rankings_settings.SNAPSHOT_DEPTH + 1,
            },
        )
        return cursor.rowcount


def _instant(t: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.UTC)


def alert_shard(category: str, layout: Layout) -> int:
    """The shard whose ticks judge an alert on `category`'s boards under `layout`."""
    return layout.shard_of(category)


def alerts_rekey(cursor, layout: Layout) -> None:
    """Give every alert the shard of its category under `layout` (a switch-over to another layout,
    in its transaction): the alerts' categories read once, each mapped in Python, one UPDATE."""
    cursor.execute(f"SELECT DISTINCT category FROM {Alert._meta.db_table}")
    slugs = [slug for (slug,) in cursor.fetchall()]
    if not slugs:
        return
    cursor.execute(
        f"UPDATE {Alert._meta.db_table} a SET shard = m.shard"
        " FROM unnest(%s::varchar[], %s::smallint[]) AS m(category, shard)"
        " WHERE a.category = m.category AND a.shard <> m.shard",
        [slugs, [alert_shard(slug, layout) for slug in slugs]],
    )


def firing_payload(
    *,
    alert_id: int,
    kind: str,
    product_id: str,
    category: str,
    window: str,
    metric: str,
    rank: int | None,
    rank_before: int | None,
    at: dt.datetime,
) -> dict:
    """The JSON a firing is delivered as (docs/api.md, "Receiving an alert")."""
    return {
        "type": kind,
        "alertId": alert_id,
        "productId": product_id,
        "category": category,
        "window": window,
        "metric": metric,
        "rank": rank,
        "rankBefore": rank_before,
        "at": at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
    }

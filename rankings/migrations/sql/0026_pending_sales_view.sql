-- The sales each shard has yet to claim (docs/architecture.md, "The claim"): those of its re-queued
-- sales, and the sales whose boards name the shard that its claim position has not seen. Only the
-- rows a position may not have seen are read: those of a transaction at or after its snapshot's
-- end, those of a transaction that was running then, and those of the transaction that took it.
CREATE VIEW rankings_pendingsale AS
SELECT st.shard, s.id AS sale_id, s.counted_at, rankings_boards_of(s.boards, st.shard) AS categories
FROM rankings_shardstate st CROSS JOIN LATERAL (
    SELECT id, counted_at, xid, boards FROM rankings_sale
    WHERE xid >= pg_snapshot_xmax(st.claimed_snapshot)
    UNION ALL
    SELECT id, counted_at, xid, boards FROM rankings_sale
    WHERE xid = ANY(ARRAY(SELECT pg_snapshot_xip(st.claimed_snapshot)))
    UNION ALL
    SELECT id, counted_at, xid, boards FROM rankings_sale
    WHERE xid = st.claimed_own AND xid < pg_snapshot_xmax(st.claimed_snapshot)
) AS s
WHERE rankings_boards_of(s.boards, st.shard) IS NOT NULL
  AND NOT rankings_seen(s.xid, s.id, st.claimed_snapshot, st.claimed_own, st.claimed_own_id)
  AND NOT coalesce(
      rankings_seen(s.xid, s.id, st.claiming_snapshot, st.claiming_own, st.claiming_own_id)
      AND (s.counted_at, s.id) <= (st.claiming_at, st.claiming_id),
      false)
UNION ALL
SELECT shard, sale_id, counted_at, categories FROM rankings_requeuedsale;

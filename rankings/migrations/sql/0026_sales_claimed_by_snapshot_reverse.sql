-- Back to a work queue (the view of pending sales has put every sale a shard has not claimed
-- in it already).
DROP FUNCTION rankings_boards_of(text, integer);
DROP FUNCTION rankings_seen(xid8, bigint, pg_snapshot, xid8, bigint);
ALTER TABLE rankings_shardstate
    DROP COLUMN claimed_snapshot, DROP COLUMN claimed_own, DROP COLUMN claimed_own_id,
    DROP COLUMN claiming_snapshot, DROP COLUMN claiming_own, DROP COLUMN claiming_own_id,
    DROP COLUMN claiming_at, DROP COLUMN claiming_id;
DROP INDEX sale_xid;
ALTER TABLE rankings_sale DROP COLUMN boards;
ALTER TABLE rankings_sale DROP COLUMN xid;

-- A sale writes no queue row: the tick reads the sales table itself, by the transaction that
-- wrote each sale (docs/architecture.md, "The claim").
--
-- Each sale carries the id of the transaction that wrote it (`xid`) and the boards it counts in,
-- per shard, fixed at ingest (`boards`: 'shard:category,category;shard:...'). Existing sales get
-- xid 1, seen by every snapshot (all were queued or counted already), and no boards; new ones get
-- their writer's id. The column is added with a constant default first so that the table is not
-- rewritten, then given its real default.
ALTER TABLE rankings_sale ADD COLUMN xid xid8 NOT NULL DEFAULT '1';
ALTER TABLE rankings_sale ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
ALTER TABLE rankings_sale ADD COLUMN boards text NOT NULL DEFAULT '';
CREATE INDEX sale_xid ON rankings_sale (xid);

-- Each shard's claim position: the snapshot of its last finished claim interval (with the id of
-- the transaction that took it and the last sale of that transaction's own it saw), and the
-- interval being claimed, if a claim stopped inside it (its end, and the last sale claimed of it
-- in (counted_at, id) order).
ALTER TABLE rankings_shardstate
    ADD COLUMN claimed_snapshot pg_snapshot NOT NULL DEFAULT '1:1:',
    ADD COLUMN claimed_own xid8,
    ADD COLUMN claimed_own_id bigint,
    ADD COLUMN claiming_snapshot pg_snapshot,
    ADD COLUMN claiming_own xid8,
    ADD COLUMN claiming_own_id bigint,
    ADD COLUMN claiming_at timestamptz,
    ADD COLUMN claiming_id bigint;
-- Every sale stored so far is seen by the shards' positions: those still waiting are in the queue,
-- which is kept as the table of re-queued sales (renamed by the migration's model operations).
UPDATE rankings_shardstate SET claimed_snapshot = pg_current_snapshot();

-- Whether a sale's row (its writer `x`, its id) is seen by a claim position: by the snapshot, or,
-- for the rows of the transaction that took it, up to the last id it saw.
CREATE FUNCTION rankings_seen(x xid8, id bigint, snap pg_snapshot, own xid8, own_id bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN x = own THEN id <= coalesce(own_id, 0) ELSE pg_visible_in_snapshot(x, snap) END;

-- The boards of shard `shard` a sale counts in (NULL when none).
CREATE FUNCTION rankings_boards_of(boards text, shard integer) RETURNS varchar(50)[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN string_to_array(substring(';' || boards || ';' FROM ';' || shard || ':([^;]*);'), ',')::varchar(50)[];

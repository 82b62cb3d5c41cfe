-- Back to a work queue: every sale a shard has not claimed is queued on it (its re-queued sales
-- are queued already; the table is renamed back to the queue next).
INSERT INTO rankings_requeuedsale (shard, sale_id, counted_at, categories)
SELECT shard, sale_id, counted_at, categories FROM rankings_pendingsale
ON CONFLICT DO NOTHING;
DROP VIEW rankings_pendingsale;

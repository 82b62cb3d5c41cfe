-- Snapshots belong to a version: those taken so far are the active version's history (version 1's
-- before any switch), and the hours the ticks marked (rankings_snapshotmark) that version's hours.
UPDATE rankings_snapshot SET version = coalesce((SELECT number FROM rankings_rankingversion WHERE state = 'active' LIMIT 1), 1);
INSERT INTO rankings_snapshothour (version, at) SELECT DISTINCT coalesce((SELECT number FROM rankings_rankingversion WHERE state = 'active' LIMIT 1), 1), at FROM rankings_snapshotmark;

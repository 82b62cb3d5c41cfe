-- Going back to one history of snapshots, the active version's, which the earlier release keeps
-- keyed by board and hour alone and whose hours it lists from rankings_snapshotmark. The version
-- column and rankings_snapshothour are dropped after this, by the reverses of their AddField and
-- CreateModel; the hours copied into rankings_snapshothour go first.
-- Cannot be restored: the history of any other version (one switched away from, or rebuilt and not
-- yet switched to). The earlier schema has no room for it, so going back is refused while one
-- exists, rather than deleting it.
DO $$
DECLARE
    active integer := coalesce((SELECT number FROM rankings_rankingversion WHERE state = 'active' LIMIT 1), 1);
    others text;
BEGIN
    SELECT string_agg(DISTINCT version::text, ', ') INTO others FROM (
        SELECT version FROM rankings_snapshot WHERE version <> active
        UNION ALL
        SELECT version FROM rankings_snapshothour WHERE version <> active
    ) other;
    IF others IS NOT NULL THEN
        RAISE EXCEPTION 'rankings 0020_snapshot_versions cannot be undone while versions other than the active one (%) have a history: %', active, others
            USING HINT = 'The earlier release keeps the active version''s history only. Let those versions expire'
                ' (a retired version is deleted with its history RANKINGS_VERSION_GRACE_SECONDS after a switch),'
                ' delete their rows from rankings_snapshot and rankings_snapshothour, or restore a backup taken before the upgrade.';
    END IF;
END
$$;
TRUNCATE rankings_snapshothour;

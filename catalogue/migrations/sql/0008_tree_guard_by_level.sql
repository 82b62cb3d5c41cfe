-- The tree guard counts the levels below a category a level at a time, each an index lookup of
-- parent_id, and not at all for a new row (which has none): its recursive join could be planned as
-- a scan of every category, per parent set, in a session that had run it on a smaller table.
CREATE OR REPLACE FUNCTION catalogue_category_tree_guard() RETURNS trigger AS $$
DECLARE
    depth integer := 1;
    height integer := 1;
    ancestor bigint := NEW.parent_id;
    below bigint[] := ARRAY[NEW.id];
BEGIN
    IF NEW.parent_id IS NULL THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock(369130, 0);
    IF NEW.slug = 'all' OR EXISTS (SELECT 1 FROM catalogue_category WHERE id = NEW.parent_id AND slug = 'all') THEN
        RAISE EXCEPTION 'category tree: ''all'' is not in the tree' USING ERRCODE = 'check_violation';
    END IF;
    WHILE ancestor IS NOT NULL LOOP
        IF ancestor = NEW.id THEN
            RAISE EXCEPTION 'category tree: ''%'' cannot be placed under category id %: that makes a cycle',
                NEW.slug, NEW.parent_id USING ERRCODE = 'check_violation';
        END IF;
        depth := depth + 1;
        SELECT parent_id INTO ancestor FROM catalogue_category WHERE id = ancestor;
    END LOOP;
    IF TG_OP = 'UPDATE' THEN
        LOOP
            SELECT array_agg(id) INTO below FROM catalogue_category WHERE parent_id = ANY(below);
            EXIT WHEN below IS NULL;
            height := height + 1;
            EXIT WHEN depth + height - 1 > 6;
        END LOOP;
    END IF;
    IF depth + height - 1 > 6 THEN
        RAISE EXCEPTION 'category tree: ''%'' under category id % would make the tree % levels deep, at most 6 are allowed',
            NEW.slug, NEW.parent_id, depth + height - 1 USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

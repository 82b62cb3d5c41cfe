-- Categories form a tree: the database itself refuses a parent that makes a cycle or a tree deeper
-- than six levels, whatever path writes the row (the admin, an import, a script); the same rule as
-- catalogue.models.tree_problem. Tree edits take one transaction-level advisory lock (namespace
-- 0x5A1E5 + 5, beside the engine's in rankings.engine.locks), so that two concurrent moves cannot
-- each see no cycle and make one.
CREATE FUNCTION catalogue_category_tree_guard() RETURNS trigger AS $$
DECLARE
    depth integer := 1;
    height integer;
    ancestor bigint := NEW.parent_id;
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
    WITH RECURSIVE below(id, level) AS (
        SELECT NEW.id, 1
        UNION ALL
        SELECT c.id, below.level + 1 FROM catalogue_category c JOIN below ON c.parent_id = below.id
        WHERE below.level <= 6
    )
    SELECT max(level) INTO height FROM below;
    IF depth + height - 1 > 6 THEN
        RAISE EXCEPTION 'category tree: ''%'' under category id % would make the tree % levels deep, at most 6 are allowed',
            NEW.slug, NEW.parent_id, depth + height - 1 USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER catalogue_category_tree_guard
BEFORE INSERT OR UPDATE OF parent_id ON catalogue_category
FOR EACH ROW EXECUTE FUNCTION catalogue_category_tree_guard();

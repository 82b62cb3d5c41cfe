-- Going back: the guard as 0004_category_parent made it, which counts the levels below a category
-- with one recursive query.
CREATE OR REPLACE FUNCTION catalogue_category_tree_guard() RETURNS trigger AS $$
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

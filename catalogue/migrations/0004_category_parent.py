"""Categories form a tree: a parent per category, with cycles and depths past six refused by the
database itself, whatever path writes the row (the admin, an import, a script)."""

import django.db.models.deletion
from django.db import migrations, models

# The same rule as catalogue.models.tree_problem, for every writer. Tree edits take one
# transaction-level advisory lock (namespace 0x5A1E5 + 5, beside the engine's in
# rankings.engine.locks), so that two concurrent moves cannot each see no cycle and make one.
_GUARD = """
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
"""

_GUARD_DROP = """
DROP TRIGGER IF EXISTS catalogue_category_tree_guard ON catalogue_category;
DROP FUNCTION IF EXISTS catalogue_category_tree_guard();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('catalogue', '0003_shards_category_has_sales'),
    ]

    operations = [
        migrations.AddField(
            model_name='category',
            name='parent',
            field=models.ForeignKey(
                blank=True,
                help_text='The category above this one (at most 6 levels); counts change through a rebuild and switch.',
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name='children',
                to='catalogue.category',
            ),
        ),
        migrations.RunSQL(_GUARD, _GUARD_DROP),
    ]

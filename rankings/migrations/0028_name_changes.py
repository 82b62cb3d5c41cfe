"""The products whose names Redis's copy may lack: a row for each product renamed, given another id
or deleted, written by triggers on the catalogue's products in the edit's own transaction (see
rankings.models.NameChange). Statement triggers with transition tables: a bulk edit of a million
products is one insert, and an edit that leaves every name as it was (an upsert of the same names)
writes nothing. A product listed already is listed again (DO UPDATE, not DO NOTHING): the row stays
locked until the edit commits, so a copy of the changes that runs meanwhile passes it over (SKIP
LOCKED) and the edit is copied by a later one, never taken before it commits and then lost."""

from django.db import migrations, models

TRIGGERS = """
CREATE FUNCTION rankings_name_changes() RETURNS trigger LANGUAGE plpgsql
-- Run as the owner, with the tables' schema as migrated: a role that may edit products but not the
-- list, or a session with another search_path, still lists its edits.
SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO rankings_namechange (product_id) SELECT DISTINCT product_id FROM gone
        ON CONFLICT (product_id) DO UPDATE SET product_id = excluded.product_id;
    ELSE
        INSERT INTO rankings_namechange (product_id)
        SELECT DISTINCT p.product_id FROM gone o JOIN made n ON n.id = o.id,
             LATERAL (VALUES (o.product_id), (n.product_id)) AS p (product_id)
        WHERE o.name IS DISTINCT FROM n.name OR o.product_id <> n.product_id
        ON CONFLICT (product_id) DO UPDATE SET product_id = excluded.product_id;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER rankings_name_changes_update AFTER UPDATE ON catalogue_product
    REFERENCING OLD TABLE AS gone NEW TABLE AS made
    FOR EACH STATEMENT EXECUTE FUNCTION rankings_name_changes();
CREATE TRIGGER rankings_name_changes_delete AFTER DELETE ON catalogue_product
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION rankings_name_changes();
"""

TRIGGERS_REVERSE = """
DROP TRIGGER rankings_name_changes_update ON catalogue_product;
DROP TRIGGER rankings_name_changes_delete ON catalogue_product;
DROP FUNCTION rankings_name_changes();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("catalogue", "0008_tree_guard_by_level"),
        ("rankings", "0027_product_totals_one_index_fewer"),
    ]

    operations = [
        migrations.CreateModel(
            name="NameChange",
            fields=[
                (
                    "product_id",
                    models.CharField(db_collation="C", max_length=64, primary_key=True, serialize=False),
                ),
            ],
        ),
        migrations.RunSQL(TRIGGERS, TRIGGERS_REVERSE),
    ]

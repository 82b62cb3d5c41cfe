"""Categories that sales name are marked (and so kept from deletion); the stored shard goes.

The shard of a category depends on the active version's shard count, so it is
computed where it is needed rather than stored once. The rankings' migration
that copies it into the work queue runs first.
"""

import zlib

from django.db import migrations, models
from django.db.migrations.exceptions import IrreversibleError

from catalogue.migrations.sql import run_sql


def shards_restore(apps, schema_editor):
    """Going back: each category's shard as the earlier release stored it, crc32 of the slug modulo
    the shard count, which the active ranking version records; then the column is required again."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT id, slug FROM catalogue_category")
        categories = cursor.fetchall()
        cursor.execute("SELECT shards FROM rankings_rankingversion WHERE state = 'active'")
        active = cursor.fetchone()
        if categories and active is None:
            raise IrreversibleError(
                "catalogue 0003_shards_category_has_sales cannot be undone without an active ranking"
                " version: a category's shard was crc32 of its slug modulo that version's shard count."
                " Migrate forward, run the tick once (a fresh install records its count then), and go"
                " back again."
            )
        if categories:
            cursor.execute(
                "UPDATE catalogue_category c SET shard = s.shard"
                " FROM unnest(%s::bigint[], %s::smallint[]) AS s(id, shard) WHERE c.id = s.id",
                [[pk for pk, _ in categories], [zlib.crc32(slug.encode()) % active[0] for _, slug in categories]],
            )
        cursor.execute("ALTER TABLE catalogue_category ALTER COLUMN shard SET NOT NULL")


class Migration(migrations.Migration):

    dependencies = [
        ('catalogue', '0002_ingest_constraints'),
        ('rankings', '0008_shards_queue_categories_version_shards'),
    ]

    operations = [
        migrations.AddField(
            model_name='category',
            name='has_sales',
            field=models.BooleanField(default=False, editable=False),
        ),
        # One scan of the raw sales, once.
        run_sql('0003_shards_category_has_sales'),
        # Going back, the shard column is added without NOT NULL (it could not be, to a table with
        # rows), filled, and only then required.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='category',
                    name='shard',
                    field=models.PositiveSmallIntegerField(editable=False, null=True),
                ),
            ],
            database_operations=[migrations.RunPython(migrations.RunPython.noop, shards_restore)],
        ),
        migrations.RemoveField(
            model_name='category',
            name='shard',
        ),
    ]

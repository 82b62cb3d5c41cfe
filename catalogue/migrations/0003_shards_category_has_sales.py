"""Categories that sales name are marked (and so kept from deletion); the stored shard goes.

The shard of a category depends on the active version's shard count, so it is
computed where it is needed rather than stored once. The rankings' migration
that copies it into the work queue runs first.
"""

from django.db import migrations, models


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
        migrations.RunSQL(
            """
            UPDATE catalogue_category SET has_sales = true
            WHERE slug IN (SELECT DISTINCT unnest(categories) FROM rankings_sale)
            """,
            migrations.RunSQL.noop,
        ),
        migrations.RemoveField(
            model_name='category',
            name='shard',
        ),
    ]

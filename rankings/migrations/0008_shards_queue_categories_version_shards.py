"""The work queue names the boards each shard counts a sale in; every version records its shard count.

Rows queued before this migration get the categories the tick would have
counted them in until now (those the catalogue placed in the row's shard,
plus `all` in its shard), and every version the count in force when it runs.
"""

import zlib

import django.contrib.postgres.fields
from django.db import migrations, models

from rankings.conf import rankings_settings

ALL = "all"


def _shards() -> int:
    return rankings_settings.SHARDS


def queue_categories(apps, schema_editor):
    all_shard = zlib.crc32(ALL.encode()) % _shards()
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE rankings_pendingsale p SET categories = coalesce((
                SELECT array_agg(c.slug ORDER BY c.slug)
                FROM rankings_sale s CROSS JOIN LATERAL unnest(s.categories) AS u(slug)
                JOIN catalogue_category c ON c.slug = u.slug AND c.shard = p.shard
                WHERE s.id = p.sale_id
            ), '{}') || CASE WHEN p.shard = %s THEN ARRAY[%s]::varchar[] ELSE '{}' END
            """,
            [all_shard, ALL],
        )


def version_shards(apps, schema_editor):
    apps.get_model("rankings", "RankingVersion").objects.update(shards=_shards())


class Migration(migrations.Migration):

    dependencies = [
        ('catalogue', '0002_ingest_constraints'),
        ('rankings', '0007_engine_shard_failures_switch_epoch'),
    ]

    operations = [
        migrations.AddField(
            model_name='pendingsale',
            name='categories',
            field=django.contrib.postgres.fields.ArrayField(base_field=models.CharField(max_length=50), default=list, size=None),
            preserve_default=False,
        ),
        migrations.RunPython(queue_categories, migrations.RunPython.noop),
        migrations.AddField(
            model_name='rankingversion',
            name='shards',
            field=models.PositiveSmallIntegerField(null=True),
        ),
        migrations.RunPython(version_shards, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='rankingversion',
            name='shards',
            field=models.PositiveSmallIntegerField(),
        ),
        migrations.AddConstraint(
            model_name='rankingversion',
            constraint=models.CheckConstraint(condition=models.Q(('shards__gte', 1)), name='version_shards_positive'),
        ),
    ]

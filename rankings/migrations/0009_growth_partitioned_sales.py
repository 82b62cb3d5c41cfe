"""Raw sales partitioned by month of counted_at; event ids kept unique in a table of their own;
the work queue carries each sale's month; the logs are pruned by the engine's clock."""

import django.utils.timezone
from django.db import migrations, models

from rankings.migrations.sql import run_sql


class Migration(migrations.Migration):

    dependencies = [
        ('catalogue', '0003_shards_category_has_sales'),
        ('rankings', '0008_shards_queue_categories_version_shards'),
    ]

    operations = [
        migrations.AlterField(
            model_name='ingestlog',
            name='at',
            field=models.DateTimeField(db_index=True, default=django.utils.timezone.now),
        ),
        migrations.AlterField(
            model_name='ticklog',
            name='now',
            field=models.DateTimeField(db_index=True),
        ),
        migrations.CreateModel(
            name='SaleId',
            fields=[
                ('event_id', models.CharField(max_length=128, primary_key=True, serialize=False)),
                ('digest', models.CharField(max_length=32)),
                ('sale_id', models.BigIntegerField()),
                ('counted_at', models.DateTimeField()),
            ],
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name='pendingsale',
                    name='counted_at',
                    field=models.DateTimeField(),
                    preserve_default=False,
                ),
                migrations.AlterField(
                    model_name='sale',
                    name='event_id',
                    field=models.CharField(max_length=128, verbose_name='event id'),
                ),
            ],
            database_operations=[run_sql('0009_growth_partitioned_sales')],
        ),
    ]

"""A sale writes no queue row: each sale row carries its writer's transaction id and its boards
per shard, each shard's state its claim position; the queue becomes the table of re-queued sales
(its waiting rows stay there, claimed first), and the sales each shard has yet to claim are a view."""

import django.db.models.deletion
from django.db import migrations, models
import django.contrib.postgres.fields

from rankings.migrations.sql import run_sql


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0025_snapshot_ranks_lz4"),
    ]

    operations = [
        run_sql("0026_sales_claimed_by_snapshot"),
        migrations.RenameModel("PendingSale", "RequeuedSale"),
        migrations.CreateModel(
            name="PendingSale",
            fields=[
                ("pk", models.CompositePrimaryKey("shard", "sale", blank=True, editable=False, primary_key=True, serialize=False)),
                ("shard", models.PositiveSmallIntegerField()),
                ("categories", django.contrib.postgres.fields.ArrayField(base_field=models.CharField(max_length=50), size=None)),
                ("counted_at", models.DateTimeField()),
                ("sale", models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name="+", to="rankings.sale")),
            ],
            options={"db_table": "rankings_pendingsale", "managed": False},
        ),
        run_sql("0026_pending_sales_view"),
    ]

from django.db import migrations, models

from rankings.migrations.sql import run_sql


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0019_api_tokens"),
    ]

    operations = [
        migrations.CreateModel(
            name="SnapshotHour",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "version", "at", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("version", models.PositiveIntegerField()),
                ("at", models.DateTimeField(db_index=True)),
            ],
        ),
        migrations.RemoveConstraint(model_name="snapshot", name="snapshot_board_at"),
        migrations.AddField(
            model_name="snapshot",
            name="version",
            field=models.PositiveIntegerField(default=1),
            preserve_default=False,
        ),
        # The snapshots taken so far are the active version's history (version 1's before any switch).
        run_sql("0020_snapshot_versions"),
        migrations.AddConstraint(
            model_name="snapshot",
            constraint=models.UniqueConstraint(
                fields=("version", "category", "window", "metric", "at"), name="snapshot_version_board_at"
            ),
        ),
    ]

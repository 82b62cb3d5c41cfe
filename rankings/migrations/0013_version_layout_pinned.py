import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0012_rename_now_to_as_of"),
    ]

    # A version's layout gains pinned categories (each on a shard of its own), and the era of the
    # batch log its positions follow, so that a switch-over can re-lay out the shards.
    operations = [
        migrations.AddField(
            model_name="rankingversion",
            name="pinned",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=50), blank=True, default=list, size=None
            ),
        ),
        migrations.AddField(
            model_name="rankingversion",
            name="log_era",
            field=models.PositiveBigIntegerField(default=0),
        ),
    ]

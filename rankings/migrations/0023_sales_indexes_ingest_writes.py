"""Two fewer index entries written per sale ingested: the sales table loses its index on ts (the
admin lists and filters by counted_at, indexed for the windows), and the ids' table its second
index on event_id, a pattern-ops copy of the key for searches by an id's beginning, which the key
serves itself once the column is in the C collation."""

from django.db import migrations, models

# The name Django gave the pattern-ops index of SaleId's key (it keeps it when the collation changes).
LIKE_INDEX = "rankings_saleid_event_id_f97749ad_like"


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0022_alerts"),
    ]

    operations = [
        migrations.AlterField(
            model_name="sale",
            name="ts",
            field=models.DateTimeField(verbose_name="sale time"),
        ),
        migrations.AlterField(
            model_name="saleid",
            name="event_id",
            field=models.CharField(db_collation="C", max_length=128, primary_key=True, serialize=False),
        ),
        migrations.RunSQL(
            f"DROP INDEX IF EXISTS {LIKE_INDEX}",
            f"CREATE INDEX IF NOT EXISTS {LIKE_INDEX} ON rankings_saleid (event_id varchar_pattern_ops)",
        ),
    ]

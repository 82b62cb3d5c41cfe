"""One fewer index entry per engagement event with an id: the engagement ids' table drops the
pattern-ops copy of its key, which no query reads (duplicates are looked up by the whole id through
the key, and the admin searches engagement by product)."""

from django.db import migrations

# The name Django gave the pattern-ops index of EngagementId's key.
LIKE_INDEX = "rankings_engagementid_event_id_d642e8e7_like"


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0023_sales_indexes_ingest_writes"),
    ]

    operations = [
        migrations.RunSQL(
            f"DROP INDEX IF EXISTS {LIKE_INDEX}",
            f"CREATE INDEX IF NOT EXISTS {LIKE_INDEX} ON rankings_engagementid (event_id varchar_pattern_ops)",
        ),
    ]

"""The list of changed names keeps one index, its key's: in the C collation that index serves any
search, and the pattern-ops copy Django makes of a text key (after 0028's operations, so it is
dropped here) would only cost every listing and every copy."""

from django.db import migrations

# The name Django gave the pattern-ops index of NameChange's key.
LIKE_INDEX = "rankings_namechange_product_id_0c11f2aa_like"


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0028_name_changes"),
    ]

    operations = [
        migrations.RunSQL(
            f"DROP INDEX IF EXISTS {LIKE_INDEX}",
            f"CREATE INDEX IF NOT EXISTS {LIKE_INDEX} ON rankings_namechange (product_id varchar_pattern_ops)",
        ),
    ]

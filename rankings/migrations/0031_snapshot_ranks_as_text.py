"""A snapshot's ranks are one text of product ids separated by spaces, not an array: PostgreSQL
stored a rebuild's history of 68,544 rows of a thousand ids in 5.9 s as arrays, parsing and checking
each element, and in 2.1 s as text, a fifth smaller. Changing the type rewrites the table and sets
its compression back to the default, so LZ4 (migration 0025) is set again in the same statement, and
the rewrite uses it."""

from django.db import migrations

import rankings.models


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0030_engagement_received_at_by_database"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "ALTER TABLE rankings_snapshot"
                    " ALTER COLUMN products TYPE text USING array_to_string(products, ' '),"
                    " ALTER COLUMN products SET COMPRESSION lz4",
                    "ALTER TABLE rankings_snapshot"
                    " ALTER COLUMN products TYPE varchar(64)[] USING string_to_array(products, ' '),"
                    " ALTER COLUMN products SET COMPRESSION lz4",
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="snapshot",
                    name="products",
                    field=rankings.models.RankedIdsField(),
                ),
            ],
        ),
    ]

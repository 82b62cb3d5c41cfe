"""A snapshot row's ranks (up to SNAPSHOT_DEPTH product ids, several kilobytes) are compressed with
LZ4 rather than PostgreSQL's default pglz: writing a rebuild's history, some 70,000 such rows for a
shop of 50 categories over two weeks, took four times as long with pglz (most of the rebuild), for a
table a quarter smaller. Rows written before keep their pglz; both read the same."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0024_engagement_ids_one_index_fewer"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE rankings_snapshot ALTER COLUMN products SET COMPRESSION lz4",
            "ALTER TABLE rankings_snapshot ALTER COLUMN products SET COMPRESSION pglz",
        ),
    ]

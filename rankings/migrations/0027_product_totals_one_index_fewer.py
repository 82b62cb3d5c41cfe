"""One fewer index entry per product's first sale: the product totals drop the pattern-ops copy of
their key, which no query reads (totals are read and added to by the whole product id, and new
releases read them by the instant of the first sale)."""

from django.db import migrations

# The name Django gave the pattern-ops index of ProductTotal's key.
LIKE_INDEX = "rankings_producttotal_product_id_d56a8fd3_like"


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0026_sale_product_without_foreign_key"),
    ]

    operations = [
        migrations.RunSQL(
            f"DROP INDEX IF EXISTS {LIKE_INDEX}",
            f"CREATE INDEX IF NOT EXISTS {LIKE_INDEX} ON rankings_producttotal (product_id varchar_pattern_ops)",
        ),
    ]

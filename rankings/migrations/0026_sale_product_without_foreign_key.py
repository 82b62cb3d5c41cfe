"""Sales refer to their product without a foreign key in the database (rankings.models.Sale.product):
its check locked each sale's product row at every batch's commit. A product that sales name is kept by
a guard on its delete (rankings.models._keep_products_with_sales). Going back adds the key again,
checking every stored sale."""

import django.db.models.deletion
from django.db import migrations, models

_NAME = "rankings_sale_product_id_308fbbce_fk_catalogue"


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0025_snapshot_ranks_lz4"),
    ]

    operations = [
        migrations.RunSQL(
            f"ALTER TABLE rankings_sale DROP CONSTRAINT {_NAME}",
            f"ALTER TABLE rankings_sale ADD CONSTRAINT {_NAME} FOREIGN KEY (product_id)"
            " REFERENCES catalogue_product (product_id) DEFERRABLE INITIALLY DEFERRED",
            state_operations=[
                migrations.AlterField(
                    model_name="sale",
                    name="product",
                    field=models.ForeignKey(
                        db_column="product_id",
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="sales",
                        to="catalogue.product",
                        to_field="product_id",
                    ),
                ),
            ],
        ),
    ]

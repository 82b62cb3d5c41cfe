import django.db.models.deletion
from django.db import migrations, models

# The constraint 0009 added to the partitioned table by hand, by the name Django gave it before.
FOREIGN_KEY = "rankings_sale_product_id_308fbbce_fk_catalogue"


class Migration(migrations.Migration):

    dependencies = [
        ('rankings', '0018_snapshots'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='sale',
                    name='product',
                    field=models.ForeignKey(
                        db_column='product_id',
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name='sales',
                        to='catalogue.product',
                        to_field='product_id',
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f"ALTER TABLE rankings_sale DROP CONSTRAINT IF EXISTS {FOREIGN_KEY}",
                    f"ALTER TABLE rankings_sale ADD CONSTRAINT {FOREIGN_KEY} FOREIGN KEY (product_id)"
                    " REFERENCES catalogue_product (product_id) DEFERRABLE INITIALLY DEFERRED",
                ),
            ],
        ),
    ]

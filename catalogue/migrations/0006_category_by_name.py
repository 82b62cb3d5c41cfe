from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built without locking out writes: the table may hold a million categories.
    atomic = False

    dependencies = [
        ("catalogue", "0005_product_released_at"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="category",
            index=models.Index(fields=["name", "slug"], name="category_by_name"),
        ),
    ]

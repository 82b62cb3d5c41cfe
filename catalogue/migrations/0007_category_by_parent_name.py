from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built without locking out writes: the table may hold a million categories.
    atomic = False

    dependencies = [
        ("catalogue", "0006_category_by_name"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="category",
            index=models.Index(fields=["parent", "name", "slug"], name="category_by_parent_name"),
        ),
    ]

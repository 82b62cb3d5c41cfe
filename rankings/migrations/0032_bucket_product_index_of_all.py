"""The buckets' index by product holds `all`'s buckets only (of its parts, when it is split): the
product page's chart reads no other, and a tick over a million categories wrote as many entries it
never reads as entries it needs, a seventh of the fold statement's time. Built and dropped without
locking out ticks."""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("rankings", "0031_snapshot_ranks_as_text"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="bucket",
            index=models.Index(
                condition=models.Q(category="all") | models.Q(category__startswith="all#"),
                fields=["product_id", "size", "start"],
                name="bucket_product_all",
            ),
        ),
        RemoveIndexConcurrently(model_name="bucket", name="bucket_product"),
    ]

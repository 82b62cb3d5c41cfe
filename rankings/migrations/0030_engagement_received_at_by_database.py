"""An engagement event's arrival is stamped by PostgreSQL (the storing statement's start), not sent
with every row of a batch's COPY, which parsed it from text for each view."""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0029_name_changes_one_index"),
    ]

    operations = [
        migrations.AlterField(
            model_name="engagement",
            name="received_at",
            field=models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
        ),
    ]

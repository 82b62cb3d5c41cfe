"""Categories form a tree: a parent per category, with cycles and depths past six refused by the
database itself, whatever path writes the row (the admin, an import, a script)."""

import django.db.models.deletion
from django.db import migrations, models

from catalogue.migrations.sql import run_sql


class Migration(migrations.Migration):

    dependencies = [
        ('catalogue', '0003_shards_category_has_sales'),
    ]

    operations = [
        migrations.AddField(
            model_name='category',
            name='parent',
            field=models.ForeignKey(
                blank=True,
                help_text='The category above this one (at most 6 levels); counts change through a rebuild and switch.',
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name='children',
                to='catalogue.category',
            ),
        ),
        # The database refuses cycles and trees deeper than six levels.
        run_sql('0004_category_parent'),
    ]

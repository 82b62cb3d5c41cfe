"""The tree guard counts the levels below a category a level at a time, each an index lookup of
parent_id, and not at all for a new row (which has none): its recursive join could be planned as a
scan of every category, per parent set, in a session that had run it on a smaller table."""

from django.db import migrations

from catalogue.migrations.sql import run_sql


class Migration(migrations.Migration):

    dependencies = [
        ('catalogue', '0007_category_by_parent_name'),
    ]

    operations = [run_sql('0008_tree_guard_by_level')]

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0016_engagement"),
        ("catalogue", "0004_category_parent"),
    ]

    operations = [
        migrations.AddField(
            model_name="rankingversion",
            name="tree",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0011_steps_drop_version_watermark"),
    ]

    # The instant a shard's boards are exact at is called `as_of` everywhere else; a column
    # named `now` read like the wall clock. A rename keeps every row and index.
    operations = [
        migrations.RenameField(model_name="batch", old_name="now", new_name="as_of"),
        migrations.RenameField(model_name="shardstate", old_name="now", new_name="as_of"),
        migrations.RenameField(model_name="ticklog", old_name="now", new_name="as_of"),
    ]

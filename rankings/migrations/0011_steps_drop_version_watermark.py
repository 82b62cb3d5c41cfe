from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("rankings", "0010_verify_log_engine_clock"),
    ]

    operations = [
        # Written by every build and never read: catching up starts from the seq Redis holds.
        migrations.RemoveField(model_name="rankingversion", name="watermark"),
    ]

import json

import msgspec
from django.db import migrations

import rankings.models
from rankings.migrations.sql import run_sql


def _pack(apps, schema_editor):
    """Re-encode the logged batches' changes, JSON text after the type change, as MessagePack."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT shard, seq, changes FROM rankings_batch")
        for shard, seq, changes in cursor.fetchall():
            packed = msgspec.msgpack.encode(json.loads(bytes(changes)))
            cursor.execute(
                "UPDATE rankings_batch SET changes = %s WHERE shard = %s AND seq = %s", [packed, shard, seq]
            )


def _unpack(apps, schema_editor):
    """Back to JSON text, which the type change back to jsonb then parses."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT shard, seq, changes FROM rankings_batch")
        for shard, seq, changes in cursor.fetchall():
            text = json.dumps(msgspec.msgpack.decode(bytes(changes))).encode()
            cursor.execute(
                "UPDATE rankings_batch SET changes = %s WHERE shard = %s AND seq = %s", [text, shard, seq]
            )


class Migration(migrations.Migration):
    dependencies = [("rankings", "0014_ticklog_shards")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[run_sql("0015_batch_changes_packed")],
            state_operations=[
                migrations.AlterField(
                    model_name="batch",
                    name="changes",
                    field=rankings.models.PackedField(help_text="[[window, metric, category, productId, delta], …]"),
                ),
            ],
        ),
        migrations.RunPython(_pack, _unpack),
    ]

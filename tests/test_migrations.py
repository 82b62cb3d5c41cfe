"""Migrations that rewrite stored data keep it: a deployment's logged batches survive the upgrade."""

import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from rankings.engine.partitions import partitions_forget
from rankings.ingest.engagement import engagements_ingest
from rankings.models import Batch

BEFORE = [("rankings", "0014_ticklog_shards")]
AFTER = [("rankings", "0015_batch_changes_packed")]


def _migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.mark.django_db(transaction=True)
def test_batches_logged_as_json_read_back_the_same_after_packing():
    changes = [["7d", "units", "toys", "p1", 3], ["1h", "revenue", "all", "p-2", -250]]
    latest = [(app, name) for app, name in MigrationExecutor(connection).loader.graph.leaf_nodes()]
    view = {"ts": timezone.now().isoformat(), "productId": "p1", "kind": "view"}
    assert engagements_ingest(events=[view]).accepted == 1  # its day's partition is now known
    try:
        # given a batch logged before the change, as jsonb
        _migrate(BEFORE)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO rankings_batch (shard, seq, as_of, changes, sales, applied, created_at)"
                " VALUES (0, 1, now(), %s::jsonb, 2, false, now())",
                ['[["7d", "units", "toys", "p1", 3], ["1h", "revenue", "all", "p-2", -250]]'],
            )
        # when the migration packs it, then the model reads the same changes
        _migrate(AFTER)
        assert Batch.objects.get(shard=0, seq=1).changes == changes
        # and back: the packed batch becomes the same JSON again
        _migrate(BEFORE)
        with connection.cursor() as cursor:
            cursor.execute("SELECT changes FROM rankings_batch WHERE shard = 0 AND seq = 1")
            assert json.loads(cursor.fetchone()[0]) == changes  # Django reads jsonb as text
    finally:
        _migrate(latest)
        # Going back dropped the partitioned engagement table with its days; the forward
        # migration made it again without them.
        partitions_forget()
    # then a view of the same day is stored in the day's partition made again
    assert engagements_ingest(events=[view]).accepted == 1


@pytest.mark.django_db(transaction=True)
def test_going_back_before_hashed_tokens_is_refused_and_keeps_every_token(ingest_user):
    """The clear-text keys are gone after 0019: going back could only drop the hashed tokens."""
    from django.db.migrations.exceptions import IrreversibleError

    from rankings.operations.tokens import token_create

    token_create(user=ingest_user)
    latest = [(app, name) for app, name in MigrationExecutor(connection).loader.graph.leaf_nodes()]
    try:
        with pytest.raises(IrreversibleError, match="ingest_token"):
            _migrate([("rankings", "0018_snapshots")])
    finally:
        _migrate(latest)
    assert ingest_user.api_tokens.count() == 1

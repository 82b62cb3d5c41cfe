"""Raw sales (the source of truth, kept forever), the aggregation state, and its log."""

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone


class Sale(models.Model):
    """One accepted sale event. Never updated, never deleted.

    The table is partitioned by month of `counted_at` (see rankings.partitions), so
    that keeping every sale stays cheap and a query over recent windows reads only
    the recent months. Its primary key in PostgreSQL is (id, counted_at), as a
    partitioned table's must include the partition key; `id` alone is still unique
    and is the key the ORM knows. Event ids are kept unique by SaleId.
    """

    event_id = models.CharField("event id", max_length=128)
    ts = models.DateTimeField("sale time", db_index=True)
    product = models.ForeignKey(
        "catalogue.Product",
        to_field="product_id",
        db_column="product_id",
        on_delete=models.PROTECT,
        related_name="sales",
        db_index=False,  # the (product, counted_at) index serves every lookup by product
    )
    # The categories the sale counts in: the event's, or the product's at ingest.
    categories = ArrayField(models.CharField(max_length=50))
    qty = models.IntegerField()
    amount_cents = models.BigIntegerField("amount (cents)")
    return_of = models.CharField(max_length=128, null=True, blank=True)
    # The instant whose bucket the sale counts in: its own ts, or for a return
    # the original sale's ts (a window holds the net sales made in it).
    counted_at = models.DateTimeField(db_index=True)
    received_at = models.DateTimeField(auto_now_add=True)
    # Hash of the event as sent, so a resend is told apart from a reuse of its id.
    digest = models.CharField(max_length=32)

    class Meta:
        # Few indexes: each one costs every ingest batch. Returns are a small
        # share of sales, so only they are indexed by the sale they return.
        indexes = [
            models.Index(fields=["product", "counted_at"]),
            models.Index(
                fields=["return_of"], condition=models.Q(return_of__isnull=False), name="sale_return_of"
            ),
        ]

    def __str__(self):
        return self.event_id


class SaleId(models.Model):
    """The event id of a stored sale: where event ids are unique.

    A unique index on the partitioned sales table would have to include the
    month, so it could not catch an id reused in another month. The ingest
    inserts the id here in the same statement as the sale: a concurrent batch
    with the same id waits on this row, then sees it (a duplicate or a reuse).
    """

    event_id = models.CharField(max_length=128, primary_key=True)
    # Hash of the event as sent, so a resend is told apart from a reuse of its id.
    digest = models.CharField(max_length=32)
    # The sale's key in the partitioned table; with counted_at, a lookup reads one partition.
    sale_id = models.BigIntegerField()
    counted_at = models.DateTimeField()


class PendingSale(models.Model):
    """A sale not yet folded into one shard's buckets: the work queue of the tick.

    Claimed with DELETE … FOR UPDATE SKIP LOCKED rather than a max-id cursor,
    because sequence values commit out of order and a cursor would skip rows.
    """

    pk = models.CompositePrimaryKey("shard", "sale")
    shard = models.PositiveSmallIntegerField()
    # The primary key (shard, sale) serves the claim; no index of its own.
    sale = models.ForeignKey(
        Sale, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    # The sale's partition key, so that the claim's join reads one month per sale, not every month.
    counted_at = models.DateTimeField()


class Bucket(models.Model):
    """Net units and revenue of one product in one category during one bucket of time."""

    pk = models.CompositePrimaryKey("size", "category", "start", "product_id")
    size = models.IntegerField(help_text="bucket length in seconds")
    start = models.BigIntegerField(help_text="bucket start, epoch seconds (UTC)")
    category = models.CharField(max_length=50)
    product_id = models.CharField(max_length=64)
    shard = models.PositiveSmallIntegerField()
    units = models.BigIntegerField(default=0)
    revenue_cents = models.BigIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["shard", "size", "start"]),
            # A product page's daily chart: one product's buckets, without scanning every product's.
            models.Index(fields=["product_id", "size", "category", "start"], name="bucket_product"),
        ]


class ShardState(models.Model):
    """Where one shard's aggregation stands: its last batch and the instant it reached.

    The tick locks this row while it claims and folds a batch, so that the
    batch sequence and the shard's clock advance together.
    """

    shard = models.PositiveSmallIntegerField(primary_key=True)
    seq = models.BigIntegerField(default=0)
    now = models.DateTimeField(null=True)
    too_old = models.BigIntegerField(default=0, help_text="sales too old for every window")


class Batch(models.Model):
    """One committed batch of a shard: the net board changes as its clock moved to `now`.

    Committed before it is applied to Redis and marked applied after; a tick
    that finds an unapplied batch replays it, and Redis refuses a sequence
    number it has already seen, so a replay is a no-op. Applied batches are
    kept for a while so that a version built by a backfill, or one switched
    back to, can catch up by replaying the very same changes.
    """

    pk = models.CompositePrimaryKey("shard", "seq")
    shard = models.PositiveSmallIntegerField()
    seq = models.BigIntegerField()
    now = models.DateTimeField()
    changes = models.JSONField(help_text="[[window, metric, category, productId, delta], …]")
    sales = models.IntegerField(default=0)
    applied = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["shard", "applied"], condition=models.Q(applied=False), name="batch_unapplied"
            )
        ]


class TickLog(models.Model):
    """One finished tick: what it did and how long it took."""

    started_at = models.DateTimeField(db_index=True)
    # The engine's instant, by which the log is pruned.
    now = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField()
    sales = models.IntegerField(default=0)
    batches = models.IntegerField(default=0)
    redis_writes = models.IntegerField(default=0)
    too_old = models.IntegerField(default=0)
    rebuilt_shards = models.IntegerField(default=0)

    class Meta:
        ordering = ["-started_at"]


class IngestLog(models.Model):
    """One ingest call (an API batch or an import chunk) and what became of its events."""

    # The clock the batch was validated against (the wall clock, or a replayed history's).
    at = models.DateTimeField(default=timezone.now, db_index=True)
    source = models.CharField(max_length=20)
    accepted = models.IntegerField()
    duplicates = models.IntegerField()
    rejected = models.IntegerField()


class RankingVersion(models.Model):
    """One generation of every board in Redis; exactly one is active and serves reads.

    A rebuild replays the raw sales into a new version while the active one
    keeps serving and ticking; a switch-over makes it active atomically; the
    previous version is kept for a grace period so it can be switched back to.
    """

    class State(models.TextChoices):
        BUILDING = "building"
        READY = "ready"
        ACTIVE = "active"
        RETIRED = "retired"
        FAILED = "failed"
        DELETED = "deleted"

    number = models.PositiveIntegerField(primary_key=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.BUILDING, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    built_at = models.DateTimeField(null=True, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    # Where the snapshot stood: {shard: [batch seq, instant]}; replay starts after it.
    watermark = models.JSONField(default=dict, blank=True)
    progress = models.FloatField(default=0.0, help_text="0…1")
    sales = models.BigIntegerField(default=0, help_text="raw sales replayed")
    rate = models.FloatField(default=0.0, help_text="sales per second")
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-number"]
        permissions = [
            ("rebuild_rankings", "Can rebuild rankings into a new version"),
            ("switch_rankings", "Can switch the active rankings version"),
            ("view_status", "Can view the operator's status page"),
        ]

    def __str__(self):
        return f"v{self.number} ({self.state})"

    @classmethod
    def active_number(cls) -> int:
        """The active version; 1 until a rebuild has been switched to."""
        number = cls.objects.filter(state=cls.State.ACTIVE).values_list("number", flat=True).first()
        return number or 1

"""Raw sales (the source of truth, kept forever), the aggregation state, and its log."""

import datetime as dt
import functools
import hashlib
import hmac
import re

import msgspec
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.functions import RandomUUID
from django.db import connection, models
from django.db.models.functions import Now
from django.db.models.signals import pre_delete
from django.dispatch import receiver
from django.utils import timezone

from catalogue.models import RESERVED_SLUG


class Sale(models.Model):
    """One accepted sale event (docs/api.md, POST /v1/sales). Never updated, never deleted.

    The table is partitioned by month of `counted_at` (see rankings.engine.partitions), so
    that keeping every sale stays cheap and a query over recent windows reads only
    the recent months. Its primary key in PostgreSQL is (id, counted_at), as a
    partitioned table's must include the partition key; `id` alone is still unique
    and is the key the ORM knows. Event ids are kept unique by SaleId.
    """

    event_id = models.CharField("event id", max_length=128)
    # Not indexed: the admin lists and filters sales by counted_at, whose index the windows need anyway.
    ts = models.DateTimeField("sale time")
    # No foreign key in the database: ingest makes each sale's product (a placeholder, if need be) in
    # the sale's own transaction, and the key's check, a lock on each sale's product row at every
    # batch's commit, cost a fifth of PostgreSQL's CPU a sale. A product that sales name is kept
    # from deletion by _keep_products_with_sales, which looks for one sale; PROTECT would read them
    # all, a best seller's millions, to list them.
    product = models.ForeignKey(
        "catalogue.Product",
        to_field="product_id",
        db_column="product_id",
        on_delete=models.DO_NOTHING,
        related_name="sales",
        db_index=False,  # the (product, counted_at) index serves every lookup by product
        db_constraint=False,
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
        # What ingest validates, refused by the database as well, so that no
        # other path (a script, a migration, a bug) can store a sale the
        # aggregation would miscount.
        constraints = [
            models.CheckConstraint(condition=models.Q(amount_cents__gte=0), name="sale_amount_not_negative"),
            models.CheckConstraint(condition=~models.Q(qty=0), name="sale_qty_not_zero"),
            # A return, and only a return, has a negative qty and names its original.
            models.CheckConstraint(
                condition=models.Q(qty__lt=0, return_of__isnull=False)
                | models.Q(qty__gt=0, return_of__isnull=True),
                name="sale_return_iff_negative_qty",
            ),
        ]

    def __str__(self):
        return self.event_id


@receiver(pre_delete, sender="catalogue.Product")
def _keep_products_with_sales(sender, instance, **kwargs):
    """Refuse to delete a product that sales name, for the ORM and the admin alike (Sale.product).

    First the sales table is locked against inserts until the delete commits: that waits for every
    batch storing a sale meanwhile, whose sale is then seen; a batch that comes after waits for the
    delete and makes the product again, a placeholder (rankings.ingest.sales.SaleIngest.layout_lock_sql).
    """
    with connection.cursor() as cursor:
        # The partitioned table alone: every insert takes it, and its months need no lock of their own.
        cursor.execute(f"LOCK TABLE ONLY {Sale._meta.db_table} IN SHARE MODE")
        cursor.execute(
            f"SELECT EXISTS (SELECT 1 FROM {Sale._meta.db_table} WHERE product_id = %s)",
            [instance.product_id],
        )
        (sold,) = cursor.fetchone()
    if sold:
        raise models.ProtectedError(
            f"product '{instance.product_id}' has sales and cannot be deleted", {instance}
        )


class SaleId(models.Model):
    """The event id of a stored sale: where event ids are unique.

    A unique index on the partitioned sales table would have to include the
    month, so it could not catch an id reused in another month. The ingest
    inserts the id here in the same statement as the sale: a concurrent batch
    with the same id waits on this row, then sees it (a duplicate or a reuse).
    """

    # In the C collation, so that the key alone serves a search by an id's beginning (LIKE 'x%'): in
    # another collation that needs a second index, written for every sale.
    event_id = models.CharField(max_length=128, primary_key=True, db_collation="C")
    # Hash of the event as sent, so a resend is told apart from a reuse of its id.
    digest = models.CharField(max_length=32)
    # The sale's key in the partitioned table; with counted_at, a lookup reads one partition.
    sale_id = models.BigIntegerField()
    counted_at = models.DateTimeField()


class NameChange(models.Model):
    """A product whose name Redis's copy may not have yet (rankings.engine.store.names).

    Written by triggers on the catalogue's products in the edit's own transaction, whoever the writer
    (the admin, the catalogue API, a bulk path, plain SQL): a rename, a product's id changed, a
    delete (migration 0028). Taken, and Redis mended, by rankings.engine.names_copy. One row a
    product however many edits wait, so the table never holds more rows than the catalogue had.
    """

    # In the C collation: a key in another collation needs a second, pattern-ops index.
    product_id = models.CharField(max_length=64, primary_key=True, db_collation="C")


class PendingSale(models.Model):
    """A sale not yet folded into one shard's buckets: the work queue of the tick.

    Claimed with DELETE … RETURNING of the rows a statement sees rather than a max-id
    cursor, because sequence values commit out of order and a cursor would skip rows.
    """

    pk = models.CompositePrimaryKey("shard", "sale")
    shard = models.PositiveSmallIntegerField()
    # The primary key (shard, sale) serves the claim; no index of its own.
    sale = models.ForeignKey(
        Sale, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    # The boards of this shard the sale counts in (with `all` in its shard), fixed at ingest: the
    # tick never consults the catalogue, so a category deleted or re-sharded meanwhile loses nothing.
    categories = ArrayField(models.CharField(max_length=50))
    # The sale's partition key, so that the claim's join reads one month per sale, not every month.
    counted_at = models.DateTimeField()


# The buckets of the board of every sale: `all`, or its parts when it is split (`all#0`, `all#1`, …,
# the mark as rankings.engine.split's PART_MARK; no slug holds a `#`). A read that filters by this
# very condition may use the index it bounds (rankings.serving.sales_periods), in any collation.
ALL_BOARDS = models.Q(category=RESERVED_SLUG) | models.Q(category__startswith=f"{RESERVED_SLUG}#")


class Bucket(models.Model):
    """Net units and revenue, views and wishes of one product in one category during one bucket of time."""

    pk = models.CompositePrimaryKey("size", "category", "start", "product_id")
    size = models.IntegerField(help_text="bucket length in seconds")
    start = models.BigIntegerField(help_text="bucket start, epoch seconds (UTC)")
    category = models.CharField(max_length=50)
    product_id = models.CharField(max_length=64)
    shard = models.PositiveSmallIntegerField()
    units = models.BigIntegerField(default=0)
    revenue_cents = models.BigIntegerField(default=0)
    # Engagement events (rankings.ingest.engagement); a default in the database too, so that a
    # statement written for sales alone leaves them at 0.
    views = models.BigIntegerField(default=0, db_default=0)
    wishes = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        indexes = [
            models.Index(fields=["shard", "size", "start"]),
            # A product page's daily chart: one product's buckets of `all`, without scanning every
            # product's. Only `all`'s: a sale's categories' buckets, most of what a tick writes, are
            # never read by product (their entries were a seventh of the fold statement's time).
            models.Index(
                fields=["product_id", "size", "start"], name="bucket_product_all", condition=ALL_BOARDS
            ),
        ]


class ShardState(models.Model):
    """Where one shard's aggregation stands: its last batch and the instant it reached.

    The tick locks this row while it claims and folds a batch, so that the
    batch sequence and the shard's clock advance together.
    """

    shard = models.PositiveSmallIntegerField(primary_key=True)
    seq = models.BigIntegerField(default=0)
    as_of = models.DateTimeField(null=True)
    too_old = models.BigIntegerField(default=0, help_text="sales too old for every window")
    # A shard whose tick raised is retried with a growing wait; a success clears these.
    failures = models.PositiveIntegerField(default=0, help_text="consecutive failed ticks")
    last_error = models.TextField(blank=True, default="")
    retry_at = models.DateTimeField(null=True, blank=True, help_text="not ticked again before this")


class PackedField(models.BinaryField):
    """A list of rows stored as MessagePack bytes rather than JSON: a tick over a backlog logs
    hundreds of thousands of changes, and as jsonb each string is quoted by the client and parsed
    by the server, many times the cost of the batch's other work."""

    def from_db_value(self, value, expression, connection):
        return None if value is None else msgspec.msgpack.decode(value)

    def to_python(self, value):
        if isinstance(value, bytes | memoryview):
            return msgspec.msgpack.decode(value)
        return value

    def get_prep_value(self, value):
        return None if value is None else msgspec.msgpack.encode(value)


class RankedIdsField(models.TextField):
    """Product ids in rank order, stored as one text, separated by spaces (no product id holds one):
    PostgreSQL stores a snapshot's thousand ids as it stores any text, where an array's thousand
    elements were each parsed and checked (two thirds of the time a rebuild's history took to store);
    a read splits it in one call. Read and written as a list of ids."""

    def from_db_value(self, value, expression, connection):
        return None if value is None else _ids(value)

    def to_python(self, value):
        return _ids(value) if isinstance(value, str) else value

    def get_prep_value(self, value):
        return None if value is None else " ".join(value)


def _ids(text: str) -> list[str]:
    return text.split(" ") if text else []


class Batch(models.Model):
    """One committed batch of a shard: the net board changes as its clock moved to `as_of`.

    Committed before it is applied to Redis and marked applied after; a tick
    that finds an unapplied batch replays it, and Redis refuses a sequence
    number it has already seen, so a replay is a no-op. Applied batches are
    kept for a while so that a version built by a backfill, or one switched
    back to, can catch up by replaying the very same changes.
    """

    pk = models.CompositePrimaryKey("shard", "seq")
    shard = models.PositiveSmallIntegerField()
    seq = models.BigIntegerField()
    as_of = models.DateTimeField()
    changes = PackedField(help_text="[[window, metric, category, productId, delta], …]")
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
    as_of = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField()
    sales = models.IntegerField(default=0)
    batches = models.IntegerField(default=0)
    redis_writes = models.IntegerField(default=0)
    too_old = models.IntegerField(default=0)
    rebuilt_shards = models.IntegerField(default=0)
    # The shards this tick brought to `as_of`: every shard, or the group of a fanned-out tick.
    shards = ArrayField(models.PositiveSmallIntegerField(), default=list, blank=True)

    class Meta:
        ordering = ["-started_at"]


class VerifyLog(models.Model):
    """One run of the sampled verify (or of rankings_verify --repair): boards compared, shards rebuilt."""

    # The engine's clock, like every log the prune keeps by age.
    at = models.DateTimeField(default=timezone.now, db_index=True)
    source = models.CharField(max_length=20)
    boards = models.IntegerField(default=0)
    repaired = ArrayField(models.PositiveSmallIntegerField(), default=list, blank=True)

    class Meta:
        ordering = ["-at"]


class IngestLog(models.Model):
    """One ingest call (an API batch or an import chunk) and what became of its events."""

    # The clock the batch was validated against (the wall clock, or a replayed history's).
    at = models.DateTimeField(default=timezone.now, db_index=True)
    source = models.CharField(max_length=20)
    accepted = models.IntegerField()
    duplicates = models.IntegerField()
    rejected = models.IntegerField()
    # Engagement events already older than the retention on arrival: accepted, not stored.
    too_old = models.IntegerField(default=0, db_default=0)


class MetricCount(models.Model):
    """A running total that /metrics serves (events ingested by outcome, ticks by duration), kept as
    a few stripes a total, each written by the sessions whose server process number falls in it.

    Every process adds to the shared row rather than keeping its own count, so the total is what
    every web process and worker did, on one machine or many; an ingest adds in the very
    transaction that stores its events, so the counts are those of the replies even when a process
    dies in between. Stripes keep concurrent ingests from queueing on one row until they commit.
    The table holds at most names × keys × stripes rows: it never grows with time.
    """

    pk = models.CompositePrimaryKey("name", "key", "stripe")
    name = models.CharField(max_length=40)
    key = models.CharField(max_length=40)
    stripe = models.PositiveSmallIntegerField()
    value = models.BigIntegerField(default=0)


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
    progress = models.FloatField(default=0.0, help_text="0…1")
    sales = models.BigIntegerField(default=0, help_text="raw sales replayed")
    rate = models.FloatField(default=0.0, help_text="sales per second")
    message = models.TextField(blank=True)
    # Which switch made the version active: every switch takes the next number, so the
    # readers' pointer in Redis can refuse a write from before the latest switch, even
    # one that names a higher version number (a switch back).
    switch_epoch = models.PositiveBigIntegerField(default=0)
    # The layout the version's boards are laid out with (the active version's rules everywhere):
    # `shards` shards in all, the last len(pinned) of which each hold one pinned category.
    shards = models.PositiveSmallIntegerField()
    pinned = ArrayField(models.CharField(max_length=50), default=list, blank=True)
    # The switch-over that last re-laid out the shards when this version's positions in Redis were
    # set: it renumbered every shard's batches, so a version of an earlier one cannot catch up.
    log_era = models.PositiveBigIntegerField(default=0)
    # The category tree the version counts with, frozen when it is built: child slug -> parent slug,
    # for the categories that have a parent. A sale counts once in each ancestor of its categories
    # in the active version's tree, so a tree edit takes effect only through a rebuild and switch.
    tree = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.CheckConstraint(condition=models.Q(shards__gte=1), name="version_shards_positive")
        ]
        permissions = [
            ("rebuild_rankings", "Can rebuild rankings into a new version"),
            ("switch_rankings", "Can switch the active rankings version"),
            ("view_status", "Can view the operator's status page"),
        ]

    def __str__(self):
        return f"v{self.number} ({self.state})"

    # The active version: the row marked active, else version 1's (active until a rebuild is
    # switched to, and made so by no switch, so its epoch is 0); no row while neither is recorded.
    # A statement of its own so that the tick reads it with its shard's state in one round trip.
    ACTIVE_ROW_SQL = f"""
        SELECT number, CASE WHEN state = '{State.ACTIVE.value}' THEN switch_epoch ELSE 0 END, shards,
               pinned
        FROM rankings_rankingversion WHERE state = '{State.ACTIVE.value}' OR number = 1
        ORDER BY state <> '{State.ACTIVE.value}' LIMIT 1
    """

    @classmethod
    def active_row(cls) -> tuple[int, int, int, list[str]] | None:
        """(number, the switch that made it active, shards, pinned) of the active version, in one
        read (ACTIVE_ROW_SQL); None while none is recorded."""
        with connection.cursor() as cursor:
            cursor.execute(cls.ACTIVE_ROW_SQL)
            return cursor.fetchone()


class ProductTotal(models.Model):
    """A product's lifetime gross: units and revenue of its accepted sales (returns do not count).

    Every board member's score is a net of the product's sales over a window,
    so it is at most this gross; ingest keeps the gross within what a Redis
    score (a double) and a bucket sum hold exactly, and refuses a sale past it.
    """

    product_id = models.CharField(max_length=64, primary_key=True)
    units = models.BigIntegerField(default=0)
    revenue_cents = models.BigIntegerField(default=0)
    # The ts of its earliest accepted sale (returns excluded): its release, unless an editor set one.
    first_sold_at = models.DateTimeField(null=True, db_index=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(units__gte=0), name="product_total_units_not_negative"),
            models.CheckConstraint(
                condition=models.Q(revenue_cents__gte=0), name="product_total_revenue_not_negative"
            ),
        ]

    def __str__(self):
        return self.product_id


class Engagement(models.Model):
    """One accepted engagement event (a product viewed or wished for; docs/api.md, POST /v1/engagements).

    The table is partitioned by UTC day of `ts` (rankings.engine.partitions) and
    a day is dropped whole once it is older than the retention, measured against
    the engine's clock (rankings.conf.engagement_retention_seconds): boards and
    rebuilds never read older events. Its primary key in PostgreSQL is (id, ts).
    Event ids, which are optional, are kept unique by EngagementId.
    """

    class Kind(models.TextChoices):
        VIEW = "view"
        WISH = "wish"

    event_id = models.CharField("event id", max_length=128, null=True, blank=True)
    ts = models.DateTimeField("event time")
    product_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=4, choices=Kind.choices)
    # The categories the event counts in: the event's, or the product's at ingest.
    categories = ArrayField(models.CharField(max_length=50))
    # Stamped by PostgreSQL as the statement storing the event starts, not sent with each row: a
    # batch's COPY parsed a time from text for every view, a sixth of what it cost.
    received_at = models.DateTimeField(db_default=Now())

    def __str__(self):
        return f"{self.kind} {self.product_id}"


class EngagementId(models.Model):
    """The id of a stored engagement event that came with one: where those ids are unique.

    Rows older than the retention are pruned with their events' partitions; an
    event that old is dropped on arrival, so de-duplication holds within it.
    """

    # Looked up by the whole id only: migration 0024 drops the pattern-ops index Django adds to a
    # text key, which every event would write and no query reads.
    event_id = models.CharField(max_length=128, primary_key=True)
    # Hash of the event as sent, so a resend is told apart from a reuse of its id.
    digest = models.CharField(max_length=32)
    ts = models.DateTimeField(db_index=True)


class PendingEngagement(models.Model):
    """Engagement events not yet folded into one shard's buckets: the tick's second work queue.

    One row per batch's group of events of one product, second, and list of
    categories (with how many of them are views and wishes), not per event: a
    burst of views of a hot product is a few rows to write and claim, and the
    tick counts whole seconds anyway. A row carries all the tick needs, so the
    claim reads no raw event, and a day dropped by the retention can never
    strand a queued one. Raw events less these rows is what a shard's boards hold.
    """

    pk = models.CompositePrimaryKey("shard", "entry")
    shard = models.PositiveSmallIntegerField()
    # Drawn from the raw events' sequence: one per group, the same on each shard the group is queued for.
    entry = models.BigIntegerField()
    product_id = models.CharField(max_length=64)
    ts = models.DateTimeField(help_text="the events' time, to the whole second")
    # The boards of this shard the events count in (with `all` in its shard).
    categories = ArrayField(models.CharField(max_length=50))
    # The categories the events named (or their product's), before the tree added ancestors: what a
    # switch to another tree counts the row's events in again.
    named = ArrayField(models.CharField(max_length=50))
    views = models.IntegerField()
    wishes = models.IntegerField()
    queued_at = models.DateTimeField()


class Snapshot(models.Model):
    """The first SNAPSHOT_DEPTH ranks of one board as of one UTC hour (rankings/engine/snapshots.py).

    One row per board and hour, the product ids in rank order (rank = place + 1): a few kilobytes,
    compressed by PostgreSQL, and no row for a board that was empty. Kept in PostgreSQL rather
    than Redis: they are history, not a serving copy, so they must survive a Redis that lost its
    data (what the live ticks recorded cannot be brought back by a rebuild). They belong to
    a version: the live ticks record the active version's, a rebuild its own version's history
    from the sales (rankings/engine/history.py), and a switch carries the hours ticked meanwhile
    over to the version it makes active, so each version keeps its own history and a switch back
    restores it. A version's snapshots are deleted with the version.
    """

    version = models.PositiveIntegerField()
    at = models.DateTimeField()
    window = models.CharField(max_length=8)
    metric = models.CharField(max_length=16)
    category = models.CharField(max_length=50)
    # Compressed with LZ4 (migrations 0025 and 0031): a rebuild writes tens of thousands of these at
    # once.
    products = RankedIdsField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["version", "category", "window", "metric", "at"], name="snapshot_version_board_at"
            ),
        ]
        indexes = [models.Index(fields=["at"], name="snapshot_at")]


class SnapshotHour(models.Model):
    """A version's history has the snapshots of hour `at` (a board without a row was empty then): the
    hours a product's rank history has points for, and the hours a board can be compared with."""

    pk = models.CompositePrimaryKey("version", "at")
    version = models.PositiveIntegerField()
    at = models.DateTimeField(db_index=True)


class SnapshotMark(models.Model):
    """A shard has taken its snapshots of hour `at`: a tick resumes after its shard's last mark."""

    pk = models.CompositePrimaryKey("shard", "at")
    shard = models.PositiveSmallIntegerField()
    at = models.DateTimeField(db_index=True)


# The permission backends whose grants a token's lookup reads itself (ApiToken.grants).
_READ_WITH_TOKEN = frozenset(
    {"axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"}
)


@functools.cache
def _permission_names_sql() -> str:
    """An array of the token's user's permissions as "app_label.codename", its own and its groups',
    as Django's ModelBackend grants them (the token's row is the statement's `rankings_apitoken`).
    Every table and column is named as the models name it, a swapped user model's too."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission
    from django.contrib.contenttypes.models import ContentType

    user = get_user_model()
    own = user._meta.get_field("user_permissions")
    groups = user._meta.get_field("groups")
    granted = Group._meta.get_field("permissions")
    return f"""ARRAY(
        SELECT type.app_label || '.' || permission.codename
        FROM {Permission._meta.db_table} permission
        JOIN {ContentType._meta.db_table} type ON type.id = permission.content_type_id
        WHERE permission.id IN (
            SELECT own.{own.m2m_reverse_name()} FROM {own.m2m_db_table()} own
            WHERE own.{own.m2m_column_name()} = rankings_apitoken.user_id
            UNION ALL
            SELECT granted.{granted.m2m_reverse_name()} FROM {groups.m2m_db_table()} member
            JOIN {granted.m2m_db_table()} granted
                ON granted.{granted.m2m_column_name()} = member.{groups.m2m_reverse_name()}
            WHERE member.{groups.m2m_column_name()} = rankings_apitoken.user_id
        )
    )"""


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def of_key(self, key: str) -> "ApiToken | None":
        """The token whose key this is, with its user and the user's permissions; None for any other
        string.

        Found by the key's first characters, then told apart by the hash, compared in constant
        time. A string that cannot be a key (a NUL, a space, a megabyte) is never looked up.
        """
        if not ApiToken.KEY_PATTERN.fullmatch(key):
            return None
        digest = ApiToken.digest_of(key)
        found = (
            self.filter(prefix=key[: ApiToken.PREFIX_LENGTH])
            .select_related("user")
            .annotate(permission_names=models.expressions.RawSQL(_permission_names_sql(), []))
        )
        for token in found:
            if hmac.compare_digest(token.digest, digest):
                return token
        return None


class ApiToken(models.Model):
    """A key for the API (`Authorization: Token <key>`), stored only as its SHA-256.

    A key holds 256 random bits, so a plain hash cannot be reversed and a copy of the database
    holds no usable key. Its first PREFIX_LENGTH characters are kept readable: they find the
    row and tell tokens apart in the admin. Keys made before hashing (40 hex digits) hash the
    same way.
    """

    PREFIX_LENGTH = 8
    KEY_PATTERN = re.compile(r"[A-Za-z0-9_-]{40,64}")
    # A request records its token's use only when the last record is older than this: one
    # write per token and hour at most, not one per request.
    LAST_USED_STEP = dt.timedelta(hours=1)

    prefix = models.CharField(max_length=PREFIX_LENGTH, db_index=True, editable=False)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    created = models.DateTimeField(default=timezone.now, editable=False)
    last_used = models.DateTimeField(null=True, blank=True, editable=False)

    objects = ApiTokenQuerySet.as_manager()
    # The holder's permissions, "app_label.codename", read with the token by `of_key`.
    permission_names: list[str]

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}…"

    @staticmethod
    def digest_of(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    def grants(self, permission: str) -> bool:
        """Whether the token's holder holds `permission` ("app_label.codename"), as User.has_perm
        answers, from the permissions its lookup (`of_key`) read with it: Django's answer costs two
        more statements a request. Django answers where that read is not the whole answer: a token
        not found by its key (the admin's, a test's), or a permission backend configured beside Axes
        (which grants nothing) and ModelBackend (whose grants the lookup reads)."""
        user = self.user
        names = getattr(self, "permission_names", None)
        if names is None or not _READ_WITH_TOKEN.issuperset(settings.AUTHENTICATION_BACKENDS):
            return user.has_perm(permission)
        return user.is_active and (user.is_superuser or permission in names)

    def used(self) -> None:
        """Record that the token authenticated a request, to the hour."""
        now = timezone.now()
        if self.last_used is None or now - self.last_used >= self.LAST_USED_STEP:
            ApiToken.objects.filter(pk=self.pk).update(last_used=now)
            self.last_used = now


class Alert(models.Model):
    """A seller's rank alert: POST a webhook when a product's rank on one board crosses a line or moves
    by some places between two hourly snapshots (rankings/engine/alerts.py judges it, in the
    transaction that records the hour; rankings/operations/webhooks.py delivers what fires)."""

    class Rule(models.TextChoices):
        ENTERS = "enters", "enters the top N"
        LEAVES = "leaves", "leaves the top N"
        CLIMBS = "climbs", "climbs k places or more"
        FALLS = "falls", "falls k places or more"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="rank_alerts", db_index=False
    )
    product_id = models.CharField("product id", max_length=64)
    category = models.CharField(max_length=50)
    window = models.CharField(max_length=8)
    metric = models.CharField(max_length=16)
    rule = models.CharField(max_length=8, choices=Rule.choices)
    number = models.PositiveIntegerField(help_text="N of enters and leaves, k of climbs and falls")
    url = models.URLField("webhook URL", max_length=2000)
    # Where deliveries go, lower case: a sender holds at most ALERTS_HOST_CONCURRENCY of them at once.
    host = models.CharField(max_length=253, editable=False)
    # The signing key, as Standard Webhooks write it (whsec_ and base64); shown once, at creation. Kept
    # readable, unlike a token's key: every delivery is signed with it.
    secret = models.CharField(max_length=64, editable=False)
    # The shard of the category's boards in the active layout: the tick of that shard judges the alert.
    # Re-keyed by a switch-over that changes the layout (rankings/engine/relayout.py).
    shard = models.PositiveSmallIntegerField(editable=False)
    # The engine's clock when the alert was made: it is judged at the hours after it only.
    since = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # A firing was given up (a day of refused deliveries); cleared by the next delivery that succeeds.
    failing_since = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        indexes = [
            models.Index(fields=["shard"], name="alert_shard"),
            models.Index(fields=["user", "id"], name="alert_user"),
            models.Index(fields=["product_id"], name="alert_product"),
        ]
        constraints = [
            models.CheckConstraint(condition=models.Q(number__gte=1), name="alert_number_positive")
        ]

    def __str__(self):
        return (
            f"{self.product_id} {self.rule} {self.number} in {self.category} ({self.window}, {self.metric})"
        )


class AlertFiring(models.Model):
    """An alert's rule held at one hour: one webhook message, delivered at least once. Made by the tick
    that records the hour's snapshot, in its transaction, once: (alert, hour) is unique, so an hour
    taken again (a reshard's new shard, a clock reset) fires nothing more."""

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed", "given up"

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="firings", db_index=False)
    at = models.DateTimeField(help_text="the hour of the snapshot judged", db_index=True)
    kind = models.CharField(max_length=16, help_text="rank.entered, rank.left, rank.climbed or rank.fell")
    rank = models.PositiveIntegerField(null=True, blank=True)
    rank_before = models.PositiveIntegerField(null=True, blank=True)
    # The webhook-id of every attempt (a receiver drops a message it has seen).
    message_id = models.UUIDField(db_default=RandomUUID(), editable=False)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # When it is sent next: the hour at first, after a refusal the backoff's, while a sender holds it
    # the end of its lease; null once delivered or given up.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    first_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["alert", "at"], name="alert_firing_once")]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=models.Q(next_attempt_at__isnull=False),
                name="firing_due",
            )
        ]

    @property
    def webhook_id(self) -> str:
        return f"msg_{self.message_id.hex}"


class AlertAttempt(models.Model):
    """One delivery of a firing: when, what the receiver answered (or why none came), how long it took."""

    firing = models.ForeignKey(AlertFiring, on_delete=models.CASCADE, related_name="deliveries")
    # The firing's alert again, so that an alert's latest attempts are one index range.
    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="attempts", db_index=False)
    at = models.DateTimeField(db_index=True)
    status = models.PositiveSmallIntegerField("answer", null=True, blank=True, help_text="the HTTP status")
    error = models.CharField(max_length=200, blank=True, default="")
    duration_ms = models.FloatField(default=0.0)

    class Meta:
        indexes = [models.Index(fields=["alert", "-at"], name="attempt_alert_at")]

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

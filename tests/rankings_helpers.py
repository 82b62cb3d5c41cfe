"""A small driver for engine tests: a shop with a clock, sales, ticks and the recompute check."""

import datetime as dt
from decimal import Decimal

from django.db import connection

from catalogue.models import Category
from rankings.conf import METRICS, rankings_settings
from rankings.engine import store
from rankings.engine.tick import tick
from rankings.ingest.engagement import engagements_ingest
from rankings.ingest.sales import sales_ingest
from rankings.operations.verify import rankings_verify
from rankings.serving import memory, selectors

from . import oracle

START = dt.datetime(2026, 3, 2, 12, 0, 0, tzinfo=dt.UTC)


def table_rows_read(table: str) -> int:
    """Rows of `table` (a name, qualified if need be: a table's TOAST) this transaction has read so
    far, by scans and by index."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_all_tables"
            " WHERE relid = %s::regclass",
            [table],
        )
        return cursor.fetchone()[0]


def run_keys(client, pattern: str = "*") -> list[bytes]:
    """The keys of this run's prefix that match `pattern`. SCAN walks the whole keyspace whatever
    the pattern, and its default of 10 keys a call takes a round trip for every 10 keys of the
    server (other runs' too): this takes store.SCAN_COUNT a call, as the store does."""
    return list(client.scan_iter(f"{rankings_settings.KEY_PREFIX}:{pattern}", count=store.SCAN_COUNT))


class Shop:
    def __init__(self, now: dt.datetime = START):
        self.now = now
        self._n = 0

    def sale(
        self, product, categories=("toys",), qty=1, amount=None, ago=dt.timedelta(0), event_id=None, **extra
    ):
        self._n += 1
        event = {
            "id": event_id or f"s{self._n}",
            "ts": (self.now - ago).isoformat(),
            "productId": product,
            "categories": list(categories),
            "qty": qty,
            **extra,
        }
        if amount is not None:
            event["amount"] = amount
        return event

    def send(self, *events):
        result = sales_ingest(events=list(events), now=self.now)
        assert not result.rejected, result.rejected
        return result

    def engagement(self, product, kind="view", categories=("toys",), ago=dt.timedelta(0), event_id=None):
        """An engagement event; without `event_id` it carries no id (every such event counts)."""
        event = {
            "ts": (self.now - ago).isoformat(),
            "productId": product,
            "categories": list(categories),
            "kind": kind,
        }
        if event_id is not None:
            event["id"] = event_id
        return event

    def engage(self, *events):
        result = engagements_ingest(events=list(events), now=self.now)
        assert not result.rejected, result.rejected
        return result

    def advance(self, **delta):
        self.now += dt.timedelta(**delta)

    def tick(self):
        return tick(now=self.now)

    def top(self, category="toys", window="7d", metric="units"):
        """[(product, score)] of a board, read straight from Redis."""
        from rankings.engine.shards import version_layout

        version = store.served_version()
        shard = version_layout(version).shard_of(category)
        return store.board_read_all(store.board_key(version, shard, window, metric, category))

    def assert_exact(self):
        report = rankings_verify()
        assert report.exact, "\n".join(d.describe() for d in report.differences)
        return report

    def assert_served_exact(self, parents: dict[str, str | None]):
        """Every board of every category, as the API serves it (a split board merged), is the tests'
        own reference as of now under the tree `parents`: windows, returns, the tree and the order
        by the contract alone."""
        memory.forget_all()
        want = oracle.boards(self.now, parents)
        for category in [oracle.ALL, *Category.objects.values_list("slug", flat=True)]:
            for window in rankings_settings.WINDOWS:
                for metric in METRICS:
                    top = selectors.board_top(
                        category=category, window=window, metric=metric, limit=100, offset=0
                    )
                    got = [(item.product_id, getattr(item, metric)) for item in top.items]
                    rows = want.get((window, metric, category), [])
                    if metric == "revenue":
                        rows = [(pid, Decimal(cents) / 100) for pid, cents in rows]
                    assert got == rows, (window, metric, category)
                    assert top.total == len(rows)

"""Random histories against the batch recompute: after every tick, every board is exact.

A hypothesis state machine plants a random category tree (up to six levels),
sends new sales (recent, late, too old, slightly ahead of the clock, naming a
category together with one of its ancestors), resends, partial returns,
engagement events (views and wishes, with and without ids, resent, late, too
old, older than the retention), moves the clock by minutes to weeks (crossing
no hour boundary, one, or hundreds; past the retention of engagement), prunes,
subscribes rank alerts, and ticks with batches of every size. After each tick every board of every
metric in Redis must equal the GROUP BY over raw sales and engagement events,
each counted once in every ancestor of its categories, and every hourly
snapshot taken so far the GROUP BY as of its hour over what was counted by then
(rankings/engine/snapshots.py): the hours a tick crossed are computed when it
has run and must never change afterwards. The alerts' firings must be exactly
those the rules give from the recompute's snapshots of each hour crossed and
the hour before it, each once, whatever rebuilds and switches happen between. A history also rebuilds once:
the new version's snapshots must be the recompute as of each hour from every
sale known, carried on by the ticks. A second machine also moves categories in
the catalogue, rebuilds with the edited tree, switches to it and back, with
sales still flowing: every board must be exact after each switch, and each
version's history its own, carried on with the hours ticked meanwhile.
"""

import datetime as dt
import math
import os
from decimal import Decimal

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.color import no_style
from django.db import connection, transaction
from django.db.models import Min
from django.test import override_settings
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from catalogue.models import MAX_TREE_DEPTH, Category, Product, subtree_height, tree_problem
from rankings.conf import METRICS, rankings_settings
from rankings.engine import store
from rankings.engine.prune import engagement_prune, engine_now
from rankings.engine.recompute import boards_recompute, snapshots_recompute
from rankings.engine.shards import ALL, Layout, active
from rankings.engine.tree import active_tree
from rankings.models import (
    AlertFiring,
    Engagement,
    RankingVersion,
    Sale,
    ShardState,
    Snapshot,
    SnapshotHour,
    SnapshotMark,
)
from rankings.operations import backfill
from rankings.operations.alerts import AlertRefused, alert_create
from rankings.serving import memory, moves, selectors
from rankings.serving.rank_then import gain_percent

from . import oracle
from .rankings_helpers import Shop, run_keys

HOUR = 3600  # seconds
PRODUCTS = [f"p{i}" for i in range(6)]
CATEGORIES = [f"c{i}" for i in range(8)]

ages = st.one_of(
    st.integers(0, 3599).map(lambda s: dt.timedelta(seconds=s)),  # this hour
    st.integers(1, 29 * 24).map(lambda h: dt.timedelta(hours=h)),  # late, still in some window
    st.integers(31 * 24, 40 * 24).map(lambda h: dt.timedelta(hours=h)),  # too old for every window
    st.integers(1, 299).map(lambda s: dt.timedelta(seconds=-s)),  # slightly ahead of the clock
)
engagement_ages = st.one_of(
    ages,
    st.integers(36 * 24, 60 * 24).map(lambda h: dt.timedelta(hours=h)),  # older than the retention
)


def _alerts_wanted(categories, metrics, *, most: int):
    return st.lists(
        st.tuples(
            st.sampled_from(PRODUCTS),
            st.sampled_from(categories),
            st.sampled_from(["1d", "7d"]),
            st.sampled_from(metrics),
            st.sampled_from(["enters", "leaves", "climbs", "falls"]),
            # Small numbers, and those where an unranked product (past the depth) crosses the line or not.
            st.sampled_from([1, 2, 3, 5, 997, 998, 999, 1000]),
        ),
        min_size=1,
        max_size=most,
    )


wanted_alerts = _alerts_wanted([ALL, *CATEGORIES], METRICS, most=4)
# Boards that move with nearly every sale: `all`'s above all, a sales metric most often.
watched_alerts = _alerts_wanted([ALL, ALL, ALL, "c0", "c1"], ["units", "units", "revenue", "views"], most=8)
clock_steps = st.one_of(
    st.just(dt.timedelta(0)),
    st.integers(1, 59).map(lambda m: dt.timedelta(minutes=m)),
    st.integers(1, 48).map(lambda h: dt.timedelta(hours=h)),
    st.integers(1, 10).map(lambda d: dt.timedelta(days=d)),
    st.integers(1, 6).map(lambda w: dt.timedelta(weeks=w)),
)


def _reset():
    """Empties the tables of a history the way the database is emptied after every test that commits
    (tests/conftest.py), and the boards in Redis."""
    tables = [
        table
        for table in connection.introspection.django_table_names(only_existing=True, include_views=False)
        if table.startswith(("rankings_", "catalogue_"))
    ]
    with transaction.atomic():
        connection.ops.execute_sql_flush(connection.ops.sql_flush(no_style(), tables))
    r = store.patient()
    keys = run_keys(r)
    if keys:
        r.delete(*keys)
    store.reset_clients()
    memory.forget_all()


def _ancestors(slug: str, parents: dict[str, str | None]) -> list[str]:
    found, current = [], parents.get(slug)
    while current is not None:
        found.append(current)
        current = parents.get(current)
    return found


class SalesHistory(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        _reset()
        self.shop = Shop()
        self.sent: list[dict] = []
        self.originals: dict[str, list] = {}  # id -> [product, qty, returned]
        self.engagements: list[dict] = []
        self.n = 0
        self.ticked_at: dt.datetime | None = None
        self.counted_before = 0  # the last sale id stored before the previous tick
        self.engaged_before = 0  # the last engagement event id stored before the previous tick
        # The active version's history: its snapshots and hours. A rebuild's come from the sales.
        self.snapshots: dict[tuple[int, str, str, str], list[str]] = {}
        self.hours: set[int] = set()
        self.marked: set[int] = set()  # the hours the ticks took
        self.histories: dict[int, tuple[dict, set[int]]] = {}  # other versions' (a switch back's)
        self.rebuilt = False
        self.parents: dict[str, str | None] = {}  # the catalogue's tree
        self.live_parents: dict[str, str | None] = {}  # the active version's: the last switched to
        self.trees: dict[int, dict[str, str | None]] = {}  # each version's tree
        self.alerts: list[oracle.Alert] = []
        self.fired: set[tuple] = set()  # (alert id, hour, type, rank, rank before)

    @initialize(data=st.data())
    def plant_tree(self, data):
        """A random forest over the categories, up to MAX_TREE_DEPTH levels, frozen into the active
        version by a rebuild switched to before any sale."""
        for slug in CATEGORIES:
            candidates = [c for c in self.parents if len(_ancestors(c, self.parents)) + 1 < MAX_TREE_DEPTH]
            parent = data.draw(st.one_of(st.none(), st.sampled_from(candidates)) if candidates else st.none())
            self.parents[slug] = parent
            Category.objects.create(
                slug=slug, name=slug, parent=Category.objects.get(slug=parent) if parent else None
            )
        self.rebuild_and_switch()

    def _id(self) -> str:
        self.n += 1
        return f"e{self.n}"

    @rule(
        data=st.data(),
        count=st.integers(1, 8),
    )
    def send_new_sales(self, data, count):
        events = []
        for _ in range(count):
            product = data.draw(st.sampled_from(PRODUCTS))
            categories = data.draw(st.lists(st.sampled_from(CATEGORIES), max_size=3))
            ancestors = _ancestors(categories[0], self.parents) if categories else []
            if ancestors and data.draw(st.booleans()):  # a category and its ancestor, named together
                categories.append(data.draw(st.sampled_from(ancestors)))
            qty = data.draw(st.integers(1, 5))
            amount = data.draw(st.one_of(st.none(), st.decimals(0, 500, places=2).map(str)))
            event = self.shop.sale(
                product,
                categories=categories,
                qty=qty,
                amount=amount,
                ago=data.draw(ages),
                event_id=self._id(),
            )
            events.append(event)
        result = self.shop.send(*events)
        assert result.accepted == len(events)
        for event in events:
            self.sent.append(event)
            self.originals[event["id"]] = [event["productId"], event["qty"], 0]

    @rule(data=st.data(), count=st.integers(1, 12))
    def send_engagement(self, data, count):
        events = []
        for _ in range(count):
            with_id = data.draw(st.booleans())
            events.append(
                self.shop.engagement(
                    data.draw(st.sampled_from(PRODUCTS)),
                    kind=data.draw(st.sampled_from(["view", "view", "wish"])),
                    categories=data.draw(st.lists(st.sampled_from(CATEGORIES), max_size=3)),
                    ago=data.draw(engagement_ages),
                    event_id=self._id() if with_id else None,
                )
            )
        result = self.shop.engage(*events)
        assert result.accepted == len(events) and result.duplicates == 0
        self.engagements.extend(events)

    @precondition(lambda self: self.engagements)
    @rule(data=st.data())
    def resend_engagement(self, data):
        """Events with an id are duplicates (or too old by now); those without count again."""
        events = data.draw(st.lists(st.sampled_from(self.engagements), min_size=1, max_size=4))
        result = self.shop.engage(*events)
        assert result.accepted + result.duplicates == len(events)
        assert result.accepted >= sum(1 for event in events if "id" not in event)

    @precondition(lambda self: len(self.alerts) < MOST_ALERTS)
    @rule(wanted=wanted_alerts)
    def subscribe(self, wanted):
        """Alerts, judged from the engine's next hour on, of products an editor puts in the catalogue
        first if need be; one on a split board is refused."""
        user, _ = get_user_model().objects.get_or_create(username="property-seller")
        split = active().layout.split
        for product, category, window, metric, kind, number in wanted:
            Product.objects.get_or_create(product_id=product, defaults={"name": product})
            try:
                alert, _ = alert_create(
                    user=user, product_id=product, category=category, window=window, metric=metric,
                    rule=kind, number=number, url="https://hooks.example.com/ranks",
                )  # fmt: skip
            except AlertRefused as refused:
                assert refused.field == "category" and category in split
                continue
            assert alert.since == self.ticked_at
            self.alerts.append(
                oracle.Alert(alert.id, product, category, window, metric, kind, number, self.ticked_at)
            )

    @rule()
    def prune(self):
        now = engine_now()
        if now is not None:
            engagement_prune(now)

    @precondition(lambda self: self.sent)
    @rule(data=st.data())
    def resend(self, data):
        events = data.draw(st.lists(st.sampled_from(self.sent), min_size=1, max_size=4))
        result = self.shop.send(*events)
        assert result.accepted == 0 and result.duplicates == len(events)

    @precondition(lambda self: any(q > r for _, q, r in self.originals.values()))
    @rule(data=st.data())
    def return_units(self, data):
        open_sales = sorted(i for i, (_, q, r) in self.originals.items() if q > r)
        original = data.draw(st.sampled_from(open_sales))
        product, qty, returned = self.originals[original]
        units = data.draw(st.integers(1, qty - returned))
        event = {
            "id": self._id(),
            "ts": self.shop.now.isoformat(),
            "productId": product,
            "qty": -units,
            "returnOf": original,
        }
        result = self.shop.send(event)
        assert result.accepted == 1
        self.originals[original][2] += units

    @rule(product=st.sampled_from(PRODUCTS), days=st.one_of(st.none(), st.integers(-3, 45)))
    def set_release(self, product, days):
        """An editor sets (or clears) a product's release: it overrides the first sale's time."""
        released = None if days is None else self.shop.now - dt.timedelta(days=days)
        Product.objects.filter(product_id=product).update(released_at=released)

    @rule(step=clock_steps)
    def advance_clock(self, step):
        self.shop.now += step

    @rule(
        batch_size=st.sampled_from([1, 2, 3, 7, 5000]),
        # 2: the shards side by side in threads, as a tick over a backlog ticks them
        threads=st.sampled_from([1, 2]),
        product=st.sampled_from(PRODUCTS),
        category=st.sampled_from([ALL, *CATEGORIES]),
    )
    def tick(self, batch_size, threads, product, category):
        ticking = {"BATCH_SIZE": batch_size, "TICK_THREADS": threads, "TICK_PARALLEL_FROM": 1}
        with override_settings(RANKINGS={**settings.RANKINGS, **ticking}):
            self.shop.tick()
        self.shop.assert_exact()
        self.shop.assert_served_exact(self.live_parents)
        self.assert_merged_reads_exact()
        self._check_snapshots()
        # One category's boards of each snapshot window and metric, read as the API reads them.
        if category != ALL and not Category.objects.filter(slug=category).exists():
            return
        if category in active().layout.split:
            # A split board's parts are snapshotted apart: its movers are refused, not guessed.
            with pytest.raises(selectors.NotKept):
                moves.board_movers(category=category, window="1d", metric="units", limit=10)
            return
        # What a reader remembers (answers for half a second, category names for a second or
        # more) would be a moment behind the tick just run: forgotten, the reads are of now.
        memory.forget_all()
        boards = self._boards_now()
        released = self._releases()
        for window in rankings_settings.SNAPSHOT_WINDOWS:
            for metric in METRICS:
                board = boards.get((window, metric, category), [])
                self._check_movers(category, window, metric, board)
                self._check_new(category, window, metric, board, released)
                self._check_history(product, category, window, metric)

    def _releases(self) -> dict[str, dt.datetime]:
        """Each product's release: the editor's date, else its first sale's time (returns excluded)."""
        first_sold = dict(
            Sale.objects.filter(qty__gt=0)
            .values("product_id")
            .annotate(first=Min("ts"))
            .values_list("product_id", "first")
        )
        set_by_editor = dict(
            Product.objects.exclude(released_at=None).values_list("product_id", "released_at")
        )
        # An editor's date counts for a product never sold too (one only viewed or wished for).
        return {**first_sold, **set_by_editor}

    def _boards_now(self) -> dict[tuple[str, str, str], list[str]]:
        """Every board as of now by the tests' own reference, product ids in ranking order."""
        boards = oracle.boards(self.shop.now, self.live_parents)
        return {key: [pid for pid, _ in rows] for key, rows in boards.items()}

    def _check_movers(self, category, window, metric, board):
        """Movers by their definition (docs/api.md, "What moves"), against the snapshot 24 hours before the hour."""
        now = int(self.shop.now.timestamp())
        then = now - now % HOUR - 24 * HOUR
        before = {
            pid: i + 1 for i, pid in enumerate(self.snapshots.get((then, window, metric, category), []))
        }
        depth = rankings_settings.SNAPSHOT_DEPTH
        moved = []
        for i, pid in enumerate(board[:depth]):
            rank, rank_then = i + 1, before.get(pid)
            if rank_then is None or rank_then > rank:
                gain = None if rank_then is None else (100 * (rank_then - rank)) // rank
                moved.append((pid, rank, rank_then, gain))
        moved.sort(key=lambda m: (m[2] is not None, -(m[3] or 0), m[1], m[0].encode()))
        answer = moves.board_movers(category=category, window=window, metric=metric, limit=100)
        # No snapshot of that hour in the version's history: unknown, not "all new".
        assert answer.then == (dt.datetime.fromtimestamp(then, dt.UTC) if then in self.hours else None)
        assert answer.total == len(moved)
        assert [
            (item.product_id, item.rank, item.rank_then, gain_percent(item.rank, item.rank_then))
            for item in answer.items
        ] == moved[:100]

    def _check_new(self, category, window, metric, board, released):
        """New releases by their definition: released at most NEW_DAYS days before now, ranked
        among themselves."""
        cutoff = self.shop.now - dt.timedelta(days=rankings_settings.NEW_DAYS)
        # A product never sold (only viewed or wished for) and not dated by an editor has no release.
        expected = [(pid, released[pid]) for pid in board if released.get(pid) and released[pid] >= cutoff]
        answer = moves.board_new(category=category, window=window, metric=metric, limit=100, offset=0)
        assert answer.total == len(expected)
        assert [(item.product_id, item.released_at) for item in answer.items] == expected[:100]
        assert [item.rank for item in answer.items] == list(range(1, len(answer.items) + 1))

    def _check_history(self, product, category, window, metric):
        """History: one point per hour snapshotted in the last 32 days, the product's rank in each."""
        if not Product.objects.filter(product_id=product).exists():
            return
        answer = moves.product_history(
            product_id=product, category=category, window=window, metric=metric, days=32
        )
        hours = sorted(self.hours)
        hours = [h for h in hours if h > hours[-1] - 32 * 86400] if hours else []
        expected = []
        for h in hours:
            row = self.snapshots.get((h, window, metric, category), [])
            expected.append(
                (dt.datetime.fromtimestamp(h, dt.UTC), row.index(product) + 1 if product in row else None)
            )
        assert [(point.at, point.rank) for point in answer.points] == expected

    def _check_snapshots(self):
        """The hours this tick crossed (the first tick: its own, if on the hour), as of each;
        then every snapshot taken so far against what it was when taken."""
        now = self.shop.now
        keep = rankings_settings.SNAPSHOT_KEEP_SECONDS
        lowest = -(-(int(now.timestamp()) - keep) // HOUR) * HOUR
        if self.ticked_at is None:
            first = int(now.timestamp())
        else:
            first = int(self.ticked_at.timestamp()) // HOUR * HOUR + HOUR
        hours = [h for h in range(max(first, lowest), int(now.timestamp()) + 1, HOUR) if h % HOUR == 0]
        recomputed = snapshots_recompute(
            hours=hours,
            earlier_sale_id=self.counted_before,
            earlier_engagement_id=self.engaged_before,
            tree=active_tree(),
            layout=active().layout,
        )
        own = oracle.snapshots(
            hours, self.live_parents, earlier_sale=self.counted_before, earlier_engagement=self.engaged_before
        )
        _assert_same_snapshots(recomputed, own)
        self.snapshots.update(recomputed)
        self.hours.update(hours)
        self.marked.update(hours)
        self._check_firings(hours)
        self._assert_history_stored()
        marks = set(SnapshotMark.objects.values_list("shard", "at"))
        shards = active().layout.shards
        assert marks == {
            (s, dt.datetime.fromtimestamp(h, dt.UTC)) for s in range(shards) for h in self.marked
        }
        self.ticked_at = now
        self.counted_before = Sale.objects.order_by("-id").values_list("id", flat=True).first() or 0
        self.engaged_before = Engagement.objects.order_by("-id").values_list("id", flat=True).first() or 0

    def _check_firings(self, hours: list[int]) -> None:
        """Each hour the tick crossed, whose previous hour the active version's history has, fires the
        alerts whose rule holds between the two snapshots; every firing so far exists once."""
        for hour in sorted(hours):
            if hour - HOUR in self.hours:
                self.fired |= oracle.firings(self.alerts, self.snapshots, hour)
        stored = AlertFiring.objects.values_list("alert_id", "at", "kind", "rank", "rank_before")
        assert {
            (a, int(at.timestamp()), kind, rank, before) for a, at, kind, rank, before in stored
        } == self.fired

    def _assert_history_stored(self):
        """The active version's snapshots and hours are the model's."""
        version = active().number
        stored = {
            (int(at.timestamp()), window, metric, category): products
            for at, window, metric, category, products in Snapshot.objects.filter(
                version=version
            ).values_list("at", "window", "metric", "category", "products")
        }
        assert stored == self.snapshots
        hours = SnapshotHour.objects.filter(version=version).values_list("at", flat=True)
        assert {int(at.timestamp()) for at in hours} == self.hours

    @precondition(lambda self: self.ticked_at is not None and not self.rebuilt)
    @rule()
    def rebuild(self):
        """Once in a history, after a tick (a rebuild costs a second or so): its history from the sales."""
        self.rebuild_and_switch()
        self.rebuilt = True

    def rebuild_and_switch(self):
        """A rebuild switched to: its version's history is every hour up to the engine's clock as of
        each from every sale known (the recompute with nothing counted before the hour)."""
        before = active().number
        backfill.version_build(activate=True)
        self.live_parents = dict(self.parents)
        self.trees[active().number] = self.live_parents
        self._switched(before, self._history_from_sales())
        self._assert_history_stored()
        self.shop.assert_exact()

    def _history_from_sales(self) -> tuple[dict, set[int]]:
        clock = ShardState.objects.filter(as_of__isnull=False).aggregate(m=Min("as_of"))["m"]
        earliest = Sale.objects.aggregate(m=Min("counted_at"))["m"]
        if clock is None or earliest is None:
            return {}, set()
        t = clock.timestamp()
        keep = rankings_settings.SNAPSHOT_KEEP_SECONDS
        first = max(math.ceil(earliest.timestamp() / HOUR), math.ceil((t - keep) / HOUR)) * HOUR
        hours = list(range(first, math.floor(t / HOUR) * HOUR + 1, HOUR))
        recomputed = snapshots_recompute(
            hours=hours,
            earlier_sale_id=0,
            earlier_engagement_id=0,
            tree=active_tree(),
            layout=active().layout,
        )
        _assert_same_snapshots(recomputed, oracle.snapshots(hours, self.live_parents))
        return recomputed, set(hours)

    def _switched(self, before: int, history: tuple[dict, set[int]]) -> None:
        """The active version's history after a switch from `before`: `history` (its own), carried on
        with the hours `before` had after its last."""
        self.histories[before] = (self.snapshots, self.hours)
        snapshots, hours = history
        last = max(hours, default=None)
        carried = {h for h in self.hours if last is None or h > last}
        self.snapshots = {
            **snapshots,
            **{key: row for key, row in self.snapshots.items() if key[0] in carried},
        }
        self.hours = hours | carried

    def assert_merged_reads_exact(self):
        """A split board's merged reads are the recompute of the board as one (every sale counted)."""
        layout = active().layout
        if not layout.split:
            return
        for slug in set(layout.split) - {"all"}:  # a category no sale has named yet is not in the catalogue
            Category.objects.get_or_create(slug=slug, defaults={"name": slug})
        memory.forget_all("answers")
        memory.forget_all("categories")
        whole = boards_recompute(shard=0, layout=Layout(1), now=self.shop.now.timestamp(), tree=active_tree())
        for category in layout.split:
            for window in rankings_settings.WINDOWS:
                for metric in ("units", "revenue"):
                    want = whole.get((window, metric, category), [])
                    top = selectors.board_top(
                        category=category, window=window, metric=metric, limit=100, offset=0
                    )
                    got = [(item.product_id, getattr(item, metric)) for item in top.items]
                    assert [
                        (pid, score if metric == "units" else Decimal(score) / 100) for pid, score in want
                    ] == got
                    assert top.total == len(want)
                    for place, (pid, _) in enumerate(want):
                        found = selectors.product_rank(
                            product_id=pid, category=category, window=window, metric=metric
                        )
                        assert (found.rank, found.total) == (place + 1, len(want))


def _assert_same_snapshots(recomputed: dict, own: dict) -> None:
    """The recompute's snapshots are the tests' own reference's, board by board (a split board's
    parts are the layout's, which the reference does not know: those are left to the recompute)."""
    split = active().layout.split

    def whole(snapshots):
        return {
            key: row
            for key, row in snapshots.items()
            if key[3] not in split and not any(key[3].startswith(f"{slug}#") for slug in split)
        }

    assert whole(recomputed) == whole(own)


class AlertHistory(SalesHistory):
    """Sales histories watched by alerts from the start, sold in and ticked hour after hour, so that
    most hours are judged against the one before with sales in between."""

    @initialize(data=st.data())
    def plant_tree(self, data):
        super().plant_tree(data)
        self.subscribe(data.draw(watched_alerts))

    @rule(
        data=st.data(), count=st.integers(1, 4), minutes=st.integers(0, 59), threads=st.sampled_from([1, 2])
    )
    def sell_then_tick_next_hour(self, data, count, minutes, threads):
        self.send_new_sales(data=data, count=count)
        t = int(self.shop.now.timestamp())
        self.shop.now = dt.datetime.fromtimestamp(t - t % HOUR + HOUR + 60 * minutes, dt.UTC)
        self.tick(batch_size=5000, threads=threads, product=PRODUCTS[0], category=ALL)


class TreeEditHistory(SalesHistory):
    """Sales histories in which editors move categories and the edited tree goes live (and back)."""

    @rule(data=st.data())
    def move_category(self, data):
        slug = data.draw(st.sampled_from(CATEGORIES))
        parent = data.draw(st.one_of(st.none(), st.sampled_from(CATEGORIES)))
        wanted = {**self.parents, slug: parent}
        if parent is not None and tree_problem(slug, wanted, height=subtree_height(slug, wanted)):
            return  # refused, as the model, the admin and the database refuse it
        Category.objects.filter(slug=slug).update(parent=Category.objects.filter(slug=parent).first())
        self.parents[slug] = parent

    @rule()
    def rebuild_again(self):
        self.rebuild_and_switch()

    def _retired(self) -> int | None:
        """The version the last switch retired, while Redis holds it (one retired before it ever
        ticked never had boards to switch back to)."""
        retired = RankingVersion.objects.filter(state=RankingVersion.State.RETIRED).order_by("-retired_at")
        number = retired.values_list("number", flat=True).first()
        return number if number is not None and store.generation_get(number) else None

    @precondition(lambda self: self._retired() is not None)
    @rule()
    def switch_back(self):
        before, number = active().number, self._retired()
        backfill.version_switch(number=number)
        self.live_parents = self.trees[number]
        self._switched(before, self.histories[number])
        self._assert_history_stored()
        self.shop.assert_exact()


# 24 random histories in all, in parts that parallel test workers share; each part
# draws its own (Hypothesis seeds every run afresh), so every run adds draws to the last. Each is a
# history of the same rules, as long and as checked whatever the count; PROPERTY_HISTORIES asks for
# more (`make soak`: 600) or fewer (the second run of `make test`, on a Redis Cluster: 20). Histories
# under alerts are a twelfth as many, those with tree edits, each with several rebuilds and
# switches, a sixteenth (one a part at least).
HISTORIES = int(os.environ.get("PROPERTY_HISTORIES", 24))
# Alerts a history subscribes at most: each costs its judging a few rows an hour.
MOST_ALERTS = 12
PARTS = 4


# The same histories with split boards (all in 3 parts, c1 in 2): each part on a shard of its own.
SPLIT = "all:3,c1:2"
CASES = [(part, "") for part in range(PARTS)] + [(part, SPLIT) for part in range(PARTS // 2)]


@pytest.mark.parametrize(("part", "split"), CASES)
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("partitions_dropped")
def test_random_histories_match_the_batch_recompute(part, split, settings):
    settings.RANKINGS = {**settings.RANKINGS, "SPLIT": split}
    run_state_machine_as_test(
        SalesHistory,
        settings=hypothesis_settings(
            max_examples=HISTORIES // PARTS,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("partitions_dropped")
def test_random_histories_fire_the_alerts_the_recomputed_snapshots_say():
    """Histories ticked hour after hour under alerts made from the start: the firings are the rules
    applied to the recompute's snapshots of each hour and the one before."""
    run_state_machine_as_test(
        AlertHistory,
        settings=hypothesis_settings(
            max_examples=max(1, HISTORIES // 12),
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


@pytest.mark.parametrize("part", range(PARTS))
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("partitions_dropped")
def test_random_tree_edits_going_live_match_the_batch_recompute(part):
    """A tree edit counts only once switched to, whole: before the switch every board follows the
    old tree, after it the new one, and switching back restores the old one, each exactly."""
    run_state_machine_as_test(
        TreeEditHistory,
        settings=hypothesis_settings(
            max_examples=max(1, HISTORIES // PARTS // 4),
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


@pytest.mark.parametrize("kind", ["sale", "view"])
@pytest.mark.django_db(transaction=True)
def test_a_switch_does_not_put_in_an_hour_s_snapshot_an_event_after_it(kind):
    """An event a moment ahead of the clock, queued on no shard of c5 (c2 is under c1, c5's shard is
    neither c2's, c1's nor `all`'s), counts in c5 once c1 moves under c5 and the move goes live. It
    is still waiting in the other shards' queues: c5's shard claims it in its turn, so the first
    tick, on the hour, leaves it out of that hour's snapshot of c5 as of every other board."""
    history = TreeEditHistory()
    layout = active().layout
    assert layout.shard_of("c5") not in {layout.shard_of(slug) for slug in (ALL, "c1", "c2")}
    history.parents = {slug: None for slug in CATEGORIES} | {"c2": "c1"}
    for slug in CATEGORIES:
        Category.objects.create(slug=slug, name=slug)
    Category.objects.filter(slug="c2").update(parent=Category.objects.get(slug="c1"))
    backfill.version_build(activate=True)
    assert history.shop.now.timestamp() % HOUR == 0
    ahead = dt.timedelta(seconds=-141)
    if kind == "sale":
        history.shop.send(history.shop.sale("p2", categories=["c2"], ago=ahead))
    else:
        history.shop.engage(history.shop.engagement("p2", kind=kind, categories=["c2"], ago=ahead))
    Category.objects.filter(slug="c1").update(parent=Category.objects.get(slug="c5"))
    history.parents["c1"] = "c5"
    history.rebuild_and_switch()
    history.tick(batch_size=1, threads=1, product="p2", category="c5")

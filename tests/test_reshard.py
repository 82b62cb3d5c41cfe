"""Online resharding and pinned categories: a rebuild lays a version out with another layout while
sales keep arriving and ticks keep running; the switch-over re-keys the queue and every shard's
state, and loses or doubles no sale, either way."""

import datetime as dt
import functools
import threading
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from rankings import tasks
from rankings.engine import locks, store
from rankings.engine.recompute import boards_recompute
from rankings.engine.shards import ALL, Layout, ShardCountMismatch, active
from rankings.ingest import sales
from rankings.ingest.engagement import EngagementIngest
from rankings.models import Batch, PendingEngagement, PendingSale, RankingVersion, Sale, ShardState
from rankings.operations import backfill, compare
from rankings.serving import memory, selectors

from .rankings_helpers import Shop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CATEGORIES = [f"k{i:02d}" for i in range(20)]
# How long a premise may take to come true on a loaded machine.
DEADLINE = 60  # seconds


def _categories(i: int) -> list[str]:
    first = CATEGORIES[i % len(CATEGORIES)]
    second = CATEGORIES[(3 * i + 1) % len(CATEGORIES)]
    return [first] if i % 3 or second == first else [first, second]


def _history(shop: Shop, n: int) -> None:
    shop.send(
        *[
            shop.sale(f"p{i % 13}", categories=_categories(i), qty=1 + i % 3, amount=f"{1 + i % 5}.50",
                      event_id=f"old-{i}")
            for i in range(n)
        ]
    )  # fmt: skip


class Seller(threading.Thread):
    """Sells in every category (returns too) and ticks, on a clock of its own, until stopped."""

    def __init__(self, shop: Shop, tag: str):
        super().__init__()
        self.tag = tag
        self.shop = Shop(now=shop.now)
        self.sent = 0
        self.ticks = 0
        self.errors: list[BaseException] = []
        self._stopping = threading.Event()

    def run(self):
        try:
            n = 0
            while not self._stopping.is_set():
                n += 1
                self._sell(n)
                self.shop.advance(seconds=40)
                self.shop.tick()
                self.ticks += 1
        except BaseException as error:  # surfaced by the test
            self.errors.append(error)
        finally:
            connection.close()

    def _sell(self, n: int) -> None:
        events = [
            self.shop.sale(f"p{(7 * n + i) % 17}", categories=_categories(n + i), qty=1 + (n + i) % 3,
                           amount=f"{2 + i}.25", event_id=f"{self.tag}-{n}-{i}")
            for i in range(4)
        ]  # fmt: skip
        if n > 1 and n % 4 == 0:  # a return of one unit of the previous round's first sale
            events.append(
                {"id": f"{self.tag}-return-{n}", "ts": self.shop.now.isoformat(), "productId": f"p{(7 * (n - 1)) % 17}",
                 "qty": -1, "returnOf": f"{self.tag}-{n - 1}-0"}
            )  # fmt: skip
        self.shop.send(*events)
        self.sent += len(events)

    def wait_for_more(self, *, sales: int, ticks: int) -> None:
        """Until it has sold and ticked past these counts; fails loudly otherwise."""
        deadline = time.monotonic() + DEADLINE
        while not (self.sent > sales and self.ticks > ticks):
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"the seller stalled at {self.sent} sales, {self.ticks} ticks"
            time.sleep(0.02)

    def stop(self) -> Shop:
        self._stopping.set()
        self.join()
        assert not self.errors, self.errors
        return self.shop


def _queue_follows(layout: Layout) -> None:
    """Every pending row names only categories of its shard, and no sale is queued twice for one."""
    counted: dict[tuple[int, str], int] = {}
    for shard, sale, categories in PendingSale.objects.values_list("shard", "sale_id", "categories"):
        for category in categories:
            assert layout.shard_of(category) == shard, (sale, category, shard)
            counted[(sale, category)] = counted.get((sale, category), 0) + 1
    assert all(n == 1 for n in counted.values())


def _state_follows(layout: Layout) -> None:
    """Shard states, buckets and batches are keyed by the layout's shards, and the active version's
    Redis state agrees with PostgreSQL's on every shard."""
    version = store.served_version(fresh=True)
    assert sorted(ShardState.objects.values_list("shard", flat=True)) == list(range(layout.shards))
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT category, shard FROM rankings_bucket")
        assert all(layout.shard_of(category) == shard for category, shard in cursor.fetchall())
    assert not Batch.objects.filter(shard__gte=layout.shards).exists()
    for shard, seq in ShardState.objects.values_list("shard", "seq"):
        assert int(store.shard_state(version, shard).get("seq", 0)) == seq, shard


def _reads_equal_the_recompute(categories) -> int:
    """Every category's 7-day board as readers get it equals the recompute of its shard; returns the reads."""
    memory.forget_all()
    version = store.served_version(fresh=True)
    _, _, layout = active()
    reads = 0
    for category in categories:
        shard = layout.shard_of(category)
        as_of = float(store.shard_state(version, shard)["asof"])
        expected = boards_recompute(shard=shard, layout=layout, now=as_of).get(("7d", "units", category), [])
        board = selectors.board_top(category=category, window="7d", metric="units", limit=100, offset=0)
        assert [(item.product_id, item.units) for item in board.items] == expected[:100], category
        reads += 1
    return reads


def _reshard_during_ingestion(shop: Shop, layout: Layout) -> Shop:
    """Rebuild into `layout` and switch while a seller sells and ticks; the premise is asserted."""
    seller = Seller(shop, tag=f"to{layout.shards}")
    seller.start()
    try:
        seller.wait_for_more(sales=0, ticks=0)
        sent, ticks = seller.sent, seller.ticks
        version = backfill.version_build(layout=layout)
        assert version.state == RankingVersion.State.READY
        # the premise: sales were ingested and ticked between the rebuild's start and the switch
        seller.wait_for_more(sales=sent, ticks=ticks)
        backfill.version_switch(number=version.number)
        assert store.served_version(fresh=True) == version.number
        assert (active().number, active().layout) == (version.number, layout)
        # and after it: sales queued and ticked under the new layout, and boards exact meanwhile
        sent, ticks = seller.sent, seller.ticks
        seller.wait_for_more(sales=sent, ticks=ticks)
        Shop().assert_exact()
    finally:
        shop = seller.stop()
    _queue_follows(layout)
    return shop


def test_resharding_4_to_16_to_4_during_ingestion_loses_and_doubles_no_sale(settings):
    # given 4 shards with history, and a seller that keeps selling and ticking
    shop = Shop()
    _history(shop, 150)
    shop.tick()
    assert active().layout == Layout(4)
    # when the shards go to 16, then back to 4, each while sales arrive and ticks run
    for layout in (Layout(16), Layout(4)):
        shop = _reshard_during_ingestion(shop, layout)
        # then every board is exact, where readers find it
        _state_follows(layout)
        assert _reads_equal_the_recompute([ALL, *CATEGORIES]) == 1 + len(CATEGORIES)
        Shop().assert_exact()
    # and at the end, with every pending sale ticked, the board of every sale counts each once
    shop.advance(seconds=1)
    shop.tick()
    assert not PendingSale.objects.exists()
    report = Shop().assert_exact()
    assert report.members > 0
    net_units = sum(Sale.objects.values_list("qty", flat=True))
    assert sum(score for _, score in shop.top(ALL, window="30d")) == net_units
    assert RankingVersion.objects.get(number=3).shards == 4


def _layout_lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND NOT granted",
            [locks.LAYOUT_NAMESPACE],
        )
        return cursor.fetchone()[0]


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


class PausedIngest:
    """An ingest in a thread of its own, paused after it read the layout and wrote its events with
    their queue rows, holding the layout lock shared, until `resume`."""

    def __init__(self, monkeypatch, shop: Shop, events: list[dict], stager=sales.SaleIngest):
        real_write, self.layout_read, self._go = stager.write, threading.Event(), threading.Event()

        def write_then_wait(ingest, cursor, rows, queue_of):
            stored = real_write(ingest, cursor, rows, queue_of)
            self.layout_read.set()
            assert self._go.wait(DEADLINE)
            return stored

        monkeypatch.setattr(stager, "write", write_then_wait)
        send = shop.send if stager is sales.SaleIngest else shop.engage
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=_run, args=(lambda: send(*events), self.errors))
        self._thread.start()
        _wait(self.layout_read.is_set, "the ingest to read the layout")

    def resume(self) -> None:
        self._go.set()
        self._thread.join()
        assert not self.errors, self.errors

    def switch_meanwhile(self, number: int) -> None:
        """Switch to version `number` while the ingest is paused: the switch waits for the ingest's
        layout lock, the old version still active (the premise); then the ingest commits first."""
        before = active().number
        errors: list[BaseException] = []
        switch = threading.Thread(target=_run, args=(lambda: backfill.version_switch(number=number), errors))
        switch.start()
        _wait(lambda: _layout_lock_waiters() == 1, "the switch to wait for the ingest's layout lock")
        assert active().number == before
        self.resume()
        switch.join()
        assert not errors, errors


def _sales(shop: Shop, tag: str) -> list[dict]:
    return [shop.sale(f"p{i}", categories=_categories(i), qty=1, event_id=f"{tag}-{i}") for i in range(12)]


def _run(work, errors: list) -> None:
    try:
        work()
    except BaseException as error:  # surfaced by the test
        errors.append(error)
    finally:
        connection.close()


def test_a_sale_queued_under_the_old_layout_while_the_switch_runs_is_re_keyed(monkeypatch):
    """An ingest that read the old layout holds the switch off until it commits; its rows are then
    re-keyed with the rest, never left under a shard number of the layout that was left."""
    # given a 16-shard version ready, and an ingest paused after it read the active 4-shard layout
    shop = Shop()
    _history(shop, 40)
    shop.tick()
    version = backfill.version_build(layout=Layout(16))
    ingest = PausedIngest(monkeypatch, shop, _sales(shop, "late"))
    # when the switch runs meanwhile, it waits for the ingest, which then commits under the old layout
    ingest.switch_meanwhile(version.number)
    # and the switch re-keyed its rows: every sale queued once per shard of the new layout, and exact
    assert (active().number, active().layout) == (version.number, Layout(16))
    assert PendingSale.objects.filter(sale__event_id__startswith="late-").exists()
    _queue_follows(Layout(16))
    shop.advance(seconds=30)
    shop.tick()
    assert not PendingSale.objects.exists()
    Shop().assert_exact()


def test_a_switch_that_cannot_get_the_layout_in_time_changes_nothing(monkeypatch):
    # given a 16-shard version ready, an ingest holding the layout, and a switch that waits 0.2 s for it
    shop = Shop()
    _history(shop, 40)
    shop.tick()
    version = backfill.version_build(layout=Layout(16))
    monkeypatch.setattr(
        locks, "layout_change_lock", functools.partial(locks.layout_change_lock, timeout="200ms")
    )
    ingest = PausedIngest(monkeypatch, shop, _sales(shop, "held"))
    # when it is switched to, then it is refused, and the 4-shard layout stays whole
    with pytest.raises(
        backfill.VersionError, match="ingest held the shard layout too long; nothing switched"
    ):
        backfill.version_switch(number=version.number)
    ingest.resume()
    assert (active().number, active().layout) == (1, Layout(4))
    assert RankingVersion.objects.get(number=version.number).state == RankingVersion.State.READY
    _state_follows(Layout(4))
    _queue_follows(Layout(4))
    shop.advance(seconds=30)
    shop.tick()
    Shop().assert_exact()
    # and once the ingest is done, the same switch goes through, exact
    backfill.version_switch(number=version.number)
    _state_follows(Layout(16))
    Shop().assert_exact()


def test_switching_back_and_forth_between_layouts_is_exact():
    # given version 2 with 16 shards switched to, and sales ticked under it
    shop = Shop()
    _history(shop, 120)
    shop.tick()
    version = backfill.version_build(layout=Layout(16), activate=True)
    assert version.shards == 16
    shop.advance(minutes=5)
    _history_more(shop, "after-16")
    shop.tick()
    _history_more(shop, "pending-16")  # left in the queue across the switch back
    # when the operator switches back to version 1 (4 shards, retired within its grace period)
    backfill.version_switch(number=1)
    # then it caught up with every batch ticked under 16 shards, and the queue follows its layout
    assert (active().number, active().layout) == (1, Layout(4))
    _queue_follows(Layout(4))
    _state_follows(Layout(4))
    Shop().assert_exact()
    shop.advance(minutes=5)
    shop.tick()
    Shop().assert_exact()
    # and forth again, to version 2, caught up with what 4 shards ticked meanwhile
    _history_more(shop, "pending-4")
    backfill.version_switch(number=version.number)
    _queue_follows(Layout(16))
    _state_follows(Layout(16))
    Shop().assert_exact()
    shop.advance(minutes=5)
    shop.tick()
    assert not PendingSale.objects.exists()
    Shop().assert_exact()
    assert _reads_equal_the_recompute([ALL, *CATEGORIES]) == 1 + len(CATEGORIES)


def _history_more(shop: Shop, tag: str) -> None:
    shop.send(
        *[
            shop.sale(f"p{i % 7}", categories=_categories(5 * i + 2), qty=1 + i % 2, amount="3.00",
                      event_id=f"{tag}-{i}")
            for i in range(40)
        ]
    )  # fmt: skip


def test_a_lagging_shard_with_an_unapplied_batch_is_settled_before_the_layout_changes(monkeypatch):
    """A failing shard lags: its batch is committed but not applied, and it backs off while the others
    tick on. The switch applies the batch and brings it to the others' instant before re-keying."""
    # given sales that leave the 1-hour window within minutes, a 16-shard version ready, then a tick
    # whose Redis writes fail on one shard
    shop = Shop()
    _history(shop, 60)
    shop.send(*[shop.sale(f"p{i}", categories=_categories(i), ago=dt.timedelta(minutes=55), event_id=f"hour-{i}")
                for i in range(40)])  # fmt: skip
    shop.tick()
    version = backfill.version_build(layout=Layout(16))
    failing = Layout(4).shard_of("k01")
    real_apply = store.batch_apply

    def failing_on_one_shard(**kwargs):
        if kwargs["shard"] == failing:
            raise store.Unreachable("Redis went away")
        return real_apply(**kwargs)

    monkeypatch.setattr(store, "batch_apply", failing_on_one_shard)
    shop.advance(minutes=2)
    _history_more(shop, "unapplied")
    assert shop.tick().failed_shards == [failing]
    monkeypatch.undo()
    # and the others tick on, later, while it backs off
    shop.advance(minutes=7)
    _history_more(shop, "later")
    assert shop.tick().backing_off_shards == [failing]
    # (the premise: one shard lags, with a batch not applied)
    instants = dict(ShardState.objects.values_list("shard", "as_of"))
    assert instants[failing] < max(instants.values())
    assert Batch.objects.filter(shard=failing, applied=False).exists()
    # when the new layout is switched to
    backfill.version_switch(number=version.number)
    # then every new shard stands at the latest instant, the batches were applied and replayed, and
    # the boards stay exact as the ticks go on; so does the version left, switched back to
    assert set(ShardState.objects.values_list("as_of", flat=True)) == {max(instants.values())}
    assert not Batch.objects.exists()
    _state_follows(Layout(16))
    Shop().assert_exact()
    shop.advance(minutes=3)
    _history_more(shop, "after")
    shop.tick()
    Shop().assert_exact()
    backfill.version_switch(number=1)
    Shop().assert_exact()


def test_a_version_built_before_the_shards_were_re_laid_out_cannot_be_switched_to():
    # given a rebuild of the 4-shard layout, ready, then a switch to 16 shards
    shop = Shop()
    _history(shop, 30)
    shop.tick()
    stale = backfill.version_build()
    backfill.version_build(layout=Layout(16), activate=True)
    # when the stale one is switched to, then it is refused with the reason, and nothing changed
    with pytest.raises(backfill.VersionError, match="built before the last switch-over that re-laid out"):
        backfill.version_switch(number=stale.number)
    assert active().layout == Layout(16)
    Shop().assert_exact()


def test_the_comparison_of_a_resharded_version_matches_board_for_board():
    shop = Shop()
    _history(shop, 80)
    shop.tick()
    version = backfill.version_build(layout=Layout(7))
    shop.advance(minutes=3)
    _history_more(shop, "after-build")
    shop.tick()

    comparisons = compare.versions_compare(number=version.number, top_n=20)

    assert comparisons and all(c.equal for c in comparisons)


def test_the_shard_setting_may_keep_the_first_count_or_follow_the_active_one_but_says_no_more(settings):
    # given 4 shards at install, resharded to 16
    shop = Shop()
    _history(shop, 10)
    shop.tick()
    backfill.version_build(layout=Layout(16), activate=True)
    # when the setting still says 4, or says 16, then ingest, ticks and checks go on
    for count in (4, 16):
        settings.RANKINGS = {**settings.RANKINGS, "SHARDS": count}
        shop.send(shop.sale("p1", categories=["k01"], event_id=f"setting-{count}"))
        shop.tick()
        call_command("check")
    # but a count that is neither is refused, with what to do
    settings.RANKINGS = {**settings.RANKINGS, "SHARDS": 8}
    with pytest.raises(ShardCountMismatch) as refused:
        shop.tick()
    assert str(refused.value) == (
        "RANKINGS_SHARDS=8 but the installation started with 4 shards and the active version 2 has 16 shards;"
        " the setting only gives a fresh install's count: set it back to 4 and change the layout with a"
        " rebuild (rankings_rebuild --shards)"
    )
    settings.RANKINGS = {**settings.RANKINGS, "SHARDS": 4}
    Shop().assert_exact()


# --- a hot category on a shard of its own -----------------------------------------------------


def test_a_pinned_category_lives_on_its_own_shard_and_its_board_is_exact(redis_client):
    # given 4 shards with sales in every category, the hot one among them
    shop = Shop()
    _history(shop, 100)
    shop.send(
        *[shop.sale(f"h{i % 9}", categories=["hot", "k01"], qty=2, event_id=f"hot-{i}") for i in range(30)]
    )
    shop.tick()
    # when the operator pins it through a rebuild that is switched to
    call_command("rankings_rebuild", "--pin", "hot", "--activate")
    # then the version has the 4 hashed shards and a fifth that holds the hot category alone
    number, _, layout = active()
    assert layout == Layout(5, ("hot",))
    assert layout.shard_of("hot") == 4
    assert all(layout.shard_of(slug) < 4 for slug in [ALL, *CATEGORIES])
    own = {key.decode().split(":b:", 1)[1].split(":", 2)[2] for key in redis_client.scan_iter(
        store.board_key(number, 4, "*", "*", "*"))}  # fmt: skip
    assert own == {"hot"}
    # and sales keep flowing to it: queued on its shard alone, ticked, exact, and read from there
    shop.advance(minutes=2)
    shop.send(
        *[shop.sale(f"h{i % 4}", categories=["hot", "k02"], qty=1, event_id=f"hot2-{i}") for i in range(12)]
    )
    queued = PendingSale.objects.filter(shard=4).values_list("categories", flat=True)
    assert len(queued) == 12 and all(categories == ["hot"] for categories in queued)
    shop.tick()
    Shop().assert_exact()
    assert _reads_equal_the_recompute(["hot", "k01", "k02", ALL]) == 4
    board = selectors.board_top(category="hot", window="7d", metric="units", limit=3, offset=0)
    assert board.items[0].units > 0


def test_unpinning_puts_the_category_back_among_the_hashed_shards():
    shop = Shop()
    _history(shop, 40)
    shop.send(shop.sale("h1", categories=["hot"], qty=3, event_id="hot-1"))
    shop.tick()
    call_command("rankings_rebuild", "--pin", "hot", "--shards", "3", "--activate")
    assert active().layout == Layout(4, ("hot",))

    call_command("rankings_rebuild", "--unpin", "hot", "--activate")

    assert active().layout == Layout(3)
    _state_follows(Layout(3))
    Shop().assert_exact()
    assert shop.top("hot") == [("h1", 3)]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--shards", "0"], "--shards must be at least 1 (got 0)"),
        (["--shards", "300"], "300 hashed shards + 0 pinned is more than 256 shards in all"),
        (["--pin", "nope"], "no category 'nope' in the catalogue to pin"),
        (["--unpin", "k01"], "category 'k01' is not pinned; pinned: none"),
    ],
)
def test_the_rebuild_command_refuses_a_layout_it_cannot_build(arguments, message):
    shop = Shop()
    _history(shop, 5)
    shop.tick()

    with pytest.raises(CommandError) as refused:
        call_command("rankings_rebuild", *arguments)

    assert str(refused.value) == message
    assert RankingVersion.objects.count() == 1


def test_pinning_a_pinned_category_again_is_refused():
    shop = Shop()
    _history(shop, 5)
    shop.tick()
    call_command("rankings_rebuild", "--pin", "k01", "--activate")

    with pytest.raises(CommandError, match="category 'k01' is already pinned to its own shard"):
        call_command("rankings_rebuild", "--pin", "k01")


def test_the_admins_rebuild_form_reshards_and_pins(admin_client, monkeypatch):
    # given a shop, and the rebuild task run at once instead of on a worker
    shop = Shop()
    _history(shop, 30)
    shop.tick()
    monkeypatch.setattr(tasks.version_build, "delay", lambda **kwargs: tasks.version_build(**kwargs))
    # when the operator asks for 6 hashed shards and pins k03, switching at once
    reply = admin_client.post(
        "/admin/rankings/rankingversion/rebuild/", {"activate": "on", "shards": "6", "pin": "k03"}
    )
    # then the new version serves, laid out so, and exact
    assert reply.status_code == 302
    assert (active().number, active().layout) == (2, Layout(7, ("k03",)))
    Shop().assert_exact()
    page = admin_client.get("/admin/rankings/rankingversion/").content.decode()
    assert "6 hashed shards + 1 pinned (k03)" in page


def test_the_admins_rebuild_form_says_why_it_refuses_a_layout(admin_client):
    shop = Shop()
    _history(shop, 5)
    shop.tick()

    reply = admin_client.post(
        "/admin/rankings/rankingversion/rebuild/", {"shards": "2", "pin": "nope"}, follow=True
    )

    assert (
        "Nothing was rebuilt: no category &#x27;nope&#x27; in the catalogue to pin" in reply.content.decode()
    )
    assert RankingVersion.objects.count() == 1


def test_views_waiting_when_the_layout_changes_are_re_keyed_with_what_they_named(monkeypatch):
    """Views an ingest queued under the old layout while the switch ran are re-keyed whole, the
    categories they named included, and count once on the new layout's boards."""
    # given a 16-shard version ready, and an ingest of views paused after it read the 4-shard layout
    shop = Shop()
    _history(shop, 20)
    shop.tick()
    version = backfill.version_build(layout=Layout(16))
    views = [shop.engagement(f"p{i % 5}", categories=_categories(i)) for i in range(7)]
    ingest = PausedIngest(monkeypatch, shop, views, stager=EngagementIngest)
    # when the switch runs meanwhile, waiting for the ingest
    ingest.switch_meanwhile(version.number)
    # then the views wait on the new layout's shards, naming what they named, and count once
    assert (active().number, active().layout) == (version.number, Layout(16))
    named = {tuple(row) for row in PendingEngagement.objects.values_list("named", flat=True)}
    assert named == {tuple(event["categories"]) for event in views}
    shop.advance(seconds=30)
    shop.tick()
    assert not PendingEngagement.objects.exists()
    Shop().assert_exact()

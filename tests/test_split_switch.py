"""Splitting and un-splitting a board goes through a rebuild and a switch-over, with sales flowing:
the queue, the buckets and every shard's state follow the new split, no sale is lost or doubled,
and the merged reads equal the recompute of the board as one."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from rankings.engine import store
from rankings.engine.recompute import boards_recompute
from rankings.engine.shards import ALL, Layout, active, layout_plan
from rankings.models import PendingSale, RankingVersion, Sale
from rankings.operations import backfill, compare
from rankings.serving import memory, selectors

from .rankings_helpers import Shop
from .test_reshard import (
    CATEGORIES,
    _history,
    _history_more,
    _queue_follows,
    _reshard_during_ingestion,
    _state_follows,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SPLIT = {ALL: 3, "k01": 2}


def _bucket_categories() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT category FROM rankings_bucket")
        return {category for (category,) in cursor.fetchall()}


def _merged_reads_equal_the_whole_recompute(shop: Shop, categories) -> None:
    """With every shard ticked to one instant, each board read (merged where split) is the recompute
    of the board as one: first page, size, and every product's rank."""
    shop.advance(seconds=1)
    shop.tick()
    assert not PendingSale.objects.exists()
    memory.forget_all()
    whole = boards_recompute(shard=0, layout=Layout(1), now=shop.now.timestamp())
    listed = set()
    for category in categories:
        for metric in ("units", "revenue"):
            want = whole.get(("7d", metric, category), [])
            board = selectors.board_top(category=category, window="7d", metric=metric, limit=100, offset=0)
            scores = [item.units if metric == "units" else int(item.revenue * 100) for item in board.items]
            assert list(zip([item.product_id for item in board.items], scores, strict=True)) == want[:100]
            assert board.total == len(want)
            for place, (product_id, _) in enumerate(want):
                rank = selectors.product_rank(
                    product_id=product_id, category=category, window="7d", metric=metric
                )
                assert (rank.rank, rank.total) == (place + 1, len(want)), (category, product_id)
                # the product page's ranks in each of its catalogue categories, split ones merged
                ranks = selectors.product_ranks(product_id=product_id, window="7d", metric=metric).ranks
                for found in ranks:
                    if found.category == category:
                        assert (found.rank, found.total) == (place + 1, len(want)), (category, product_id)
                        listed.add(category)
    assert "k01" in listed, "the premise: a split category is among a product's catalogue categories"


def test_splitting_then_unsplitting_all_during_ingestion_loses_and_doubles_no_sale():
    # given 4 shards with history, and a seller that keeps selling and ticking
    shop = Shop()
    _history(shop, 150)
    shop.tick()
    split = layout_plan(Layout(4), split=SPLIT)
    assert split.split == SPLIT and split.shards == 4 + 5
    # when `all` (and k01) are split, then un-split, each while sales arrive and ticks run
    for layout in (split, Layout(4)):
        shop = _reshard_during_ingestion(shop, layout)
        # then the queue, the buckets and every shard's state follow the new split
        _state_follows(layout)
        buckets = _bucket_categories()
        if layout.split:
            assert ALL not in buckets and {"all#0", "all#1", "all#2", "k01#0", "k01#1"} <= buckets
        else:
            assert not any("#" in category for category in buckets)
        # and every board is exact, merged where split
        Shop().assert_exact()
        _merged_reads_equal_the_whole_recompute(shop, [ALL, *CATEGORIES])
    # and the board of every sale counts each once
    net_units = sum(Sale.objects.values_list("qty", flat=True))
    assert sum(score for _, score in shop.top(ALL, window="30d")) == net_units


def test_switching_back_and_forth_between_split_and_whole_is_exact():
    # given version 2 with `all` split, switched to, and sales ticked under it
    shop = Shop()
    _history(shop, 120)
    shop.tick()
    split = layout_plan(Layout(4), split=SPLIT)
    version = backfill.version_build(layout=split, activate=True)
    shop.advance(minutes=5)
    _history_more(shop, "after-split")
    shop.tick()
    _history_more(shop, "pending-split")  # queued for the parts, left across the switch back
    assert PendingSale.objects.filter(categories__overlap=["all#0", "all#1", "all#2"]).exists()
    # when the operator switches back to version 1 (whole boards)
    backfill.version_switch(number=1)
    # then its queue names whole boards again, and every board is exact
    assert (active().number, active().layout) == (1, Layout(4))
    _queue_follows(Layout(4))
    _state_follows(Layout(4))
    assert not PendingSale.objects.filter(categories__overlap=["all#0", "all#1", "all#2"]).exists()
    Shop().assert_exact()
    # and forth again, to the split version, caught up with what the whole boards ticked meanwhile
    _history_more(shop, "pending-whole")
    backfill.version_switch(number=version.number)
    _queue_follows(split)
    _state_follows(split)
    Shop().assert_exact()
    _merged_reads_equal_the_whole_recompute(shop, [ALL, *CATEGORIES])


def test_the_comparison_of_a_split_version_with_a_whole_one_finds_no_difference():
    shop = Shop()
    _history(shop, 100)
    shop.tick()
    version = backfill.version_build(layout=layout_plan(Layout(4), split=SPLIT))
    comparisons = compare.versions_compare(number=version.number)
    assert comparisons and all(c.equal for c in comparisons)
    # boards are compared whole: no part is named
    assert not any("#" in c.category for c in comparisons)


def test_the_rebuild_command_splits_as_told_and_refuses_a_bad_split(settings):
    shop = Shop()
    _history(shop, 30)
    shop.tick()
    call_command("rankings_rebuild", "--split", "all:3", "--activate")
    number, _, layout = active()
    assert layout.split == {ALL: 3} and RankingVersion.objects.get(number=number).pinned == [
        "all#0",
        "all#1",
        "all#2",
    ]
    Shop().assert_exact()
    # RANKINGS_SPLIT is what a rebuild follows when --split is not given: here, no split
    settings.RANKINGS = {**settings.RANKINGS, "SPLIT": ""}
    call_command("rankings_rebuild", "--activate")
    assert active().layout.split == {}
    with pytest.raises(CommandError, match="SLUG:PARTS"):
        call_command("rankings_rebuild", "--split", "all")
    with pytest.raises(CommandError, match="no category 'nope'"):
        call_command("rankings_rebuild", "--split", "nope:2")
    with pytest.raises(CommandError, match="1 to 64 parts"):
        call_command("rankings_rebuild", "--split", "all:65")
    assert store.served_version(fresh=True) == number + 1


def test_a_split_setting_the_active_version_does_not_follow_is_reported_until_a_rebuild(settings):
    from rankings.engine.shards import shard_setting_check

    Shop().tick()  # version 1, whole boards
    settings.RANKINGS = {**settings.RANKINGS, "SPLIT": "all:3"}
    assert [m.id for m in shard_setting_check()] == ["rankings.W001"]
    backfill.version_build(layout=layout_plan(active().layout, split={ALL: 3}), activate=True)
    assert shard_setting_check() == []
    settings.RANKINGS = {**settings.RANKINGS, "SPLIT": "all"}
    assert [m.id for m in shard_setting_check()] == ["rankings.E002"]

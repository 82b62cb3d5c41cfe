"""What it takes to climb: the exact-with-ties counting in Redis against a plain sort, and the
thresholds, histogram and "N more units would make it #R" through the API and the product page."""

import datetime as dt
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from catalogue.models import Category, Product
from rankings.engine import store
from rankings.engine.recompute import boards_recompute
from rankings.engine.shards import active
from rankings.serving import memory, thresholds

from .conftest import built_once_for_the_class
from .rankings_helpers import Shop

BOARD = {"version": 1, "shard": 0, "window": "7d", "metric": "units", "category": "toys"}
KEY = store.board_key(1, 0, "7d", "units", "toys")

# Few distinct scores and ids of every length and byte: ties everywhere, ids that are prefixes of
# one another, and bytes whose order a locale would change.
ids = st.text(alphabet="aAbB0._:-zZ", min_size=1, max_size=6)
boards = st.dictionaries(ids, st.integers(min_value=1, max_value=4), max_size=60)


def _ordered(board: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(board.items(), key=lambda row: (-row[1], row[0].encode()))


def _write(redis_client, board: dict[str, int]) -> None:
    redis_client.delete(KEY)
    if board:
        redis_client.zadd(KEY, {member: -score for member, score in board.items()})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(board=boards, member=ids, score=st.integers(min_value=1, max_value=5))
def test_members_ordered_before_a_score_and_id_are_those_a_sort_puts_first(
    redis_client, board, member, score
):
    _write(redis_client, board)
    others = {m: s for m, s in board.items() if m != member and (s, m) != (score, member)}
    expected = sum(1 for m, s in others.items() if s > score or (s == score and m.encode() < member.encode()))
    # a product climbs: on the board, it has a lower score than the one asked about
    assume(board.get(member, 0) < score)
    assert store.ordered_before(**BOARD, score=score, product_id=member) == expected


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    board=boards, ranks=st.lists(st.integers(min_value=1, max_value=70), min_size=1, max_size=5, unique=True)
)
def test_thresholds_and_histogram_are_those_of_the_sorted_board(redis_client, board, ranks):
    _write(redis_client, board)
    ranks = sorted(ranks)
    edges = [1, 2, 4]

    found = store.board_thresholds(**BOARD, ranks=ranks, edges=edges)

    ordered = _ordered(board)
    assert found.total == len(board)
    assert found.ranks == [(r, *ordered[r - 1]) for r in ranks if r <= len(ordered)]
    scores = [s for _, s in ordered]
    assert found.counts == [
        sum(1 for s in scores if 1 <= s < 2),
        sum(1 for s in scores if 2 <= s < 4),
        sum(1 for s in scores if s >= 4),
    ]


def _toys() -> Shop:
    """A toys board of 30 products whose units tie in groups: p00…p29, p{i} sold 1 + i // 4 units."""
    toys = Category.objects.create(slug="toys", name="Toys")
    for i in range(30):
        Product.objects.create(product_id=f"p{i:02d}", name=f"Toy {i}", price_cents=100).categories.set(
            [toys]
        )
    Product.objects.create(product_id="p99", name="Unsold", price_cents=100).categories.set([toys])
    shop = Shop(now=dt.datetime.now(dt.UTC).replace(microsecond=0))
    shop.send(*(shop.sale(f"p{i:02d}", qty=1 + i // 4, amount=f"{1 + i}.00") for i in range(30)))
    shop.tick()
    return shop


toys_once = built_once_for_the_class(_toys)


def _recomputed(shop, metric="units") -> list[tuple[str, int]]:
    _, _, layout = active()
    boards = {}
    for shard in range(layout.shards):
        boards.update(boards_recompute(shard=shard, layout=layout, now=shop.now.timestamp()))
    return boards[("7d", metric, "toys")]


def _climb_after(board: list[tuple[str, int]], product: str, more: int) -> int:
    """The product's rank were its score `more` higher: the plain sort of the changed board."""
    changed = dict(board)
    changed[product] = changed.get(product, 0) + more
    return [m for m, _ in _ordered(changed)].index(product) + 1


@pytest.mark.django_db
class TestClimbsOnOneBoard:
    """Thresholds and climbs of the toys board, built once for the class: each test finds the
    database and Redis as the build left them."""

    @pytest.fixture
    def toys(self, toys_once):
        shop = toys_once.restored()
        memory.forget_all("answers")
        return shop

    @pytest.mark.parametrize("metric", ["units", "revenue"])
    def test_thresholds_api_gives_the_scores_at_ranks_1_and_10_and_every_product_in_a_bucket(
        self, api, toys, metric
    ):
        board = _recomputed(toys, metric)

        body = api.get(f"/v1/categories/toys/thresholds?metric={metric}").json()

        def score(value):
            return value if metric == "units" else f"{value / 100:.2f}"

        assert body["total"] == len(board) == 30
        assert body["thresholds"] == [{"rank": r, "score": score(board[r - 1][1])} for r in (1, 10)]
        assert sum(b["count"] for b in body["buckets"]) == 30
        for bucket in body["buckets"]:
            low, high = (float(bucket["min"]), float(bucket["max"]))
            inside = [s for _, s in board if low <= (s if metric == "units" else s / 100) <= high]
            assert bucket["count"] == len(inside)

    @pytest.mark.parametrize("product", ["p00", "p13", "p20", "p99"])
    def test_the_climb_to_the_next_threshold_is_the_least_that_passes_it(self, toys, product):
        board = _recomputed(toys)
        ranks = {m: i + 1 for i, (m, _) in enumerate(board)}
        score = dict(board).get(product, 0)

        climb = thresholds.product_climb(
            product_id=product,
            category="toys",
            window="7d",
            metric="units",
            rank=ranks.get(product),
            score=score,
        )

        target = max(r for r in (1, 10) if ranks.get(product) is None or r < ranks[product])
        # the least: one unit fewer does not reach the threshold rank; this many does, at the rank said
        assert _climb_after(board, product, climb.more - 1) > target
        assert climb.rank == _climb_after(board, product, climb.more) <= target

    def test_the_product_page_says_how_many_more_units_reach_the_next_threshold(self, client, toys):
        board = _recomputed(toys)
        rank = [m for m, _ in board].index("p13") + 1

        page = client.get("/p/p13/").content.decode()

        more, reached = re.search(r"(\d+) more units? this week would make it #(\d+) in Toys", page).groups()
        assert _climb_after(board, "p13", int(more)) == int(reached) <= 10 < rank
        assert _climb_after(board, "p13", int(more) - 1) > 10

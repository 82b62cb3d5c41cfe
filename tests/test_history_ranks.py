"""The history's ranking of a board hour after hour: the first ranks it keeps track of from the last
hour's, and those it makes of every hour at once, are those of sorting every score again."""

from unittest import mock

import numpy as np
from django.test import override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from rankings.conf import METRICS
from rankings.engine import history
from rankings.engine.history import _Leaders, _ranked
from rankings.engine.hourly import Board, Hourly
from rankings.engine.shards import ALL, Layout
from rankings.engine.snapshots import HOUR
from rankings.engine.tree import Tree


def _sorted_first(scores: list[int], depth: int) -> list[int]:
    """The obvious way: every positive score, highest first, ties by column."""
    ranked = sorted(
        (column for column, score in enumerate(scores) if score > 0), key=lambda c: (-scores[c], c)
    )
    return ranked[:depth]


_SMALL = st.integers(-9, 9)


@st.composite
def _boards(draw, deltas=_SMALL, changes=20, hours=40):
    width = draw(st.integers(1, 30))
    change = st.tuples(st.integers(0, width - 1), deltas)
    hours = draw(st.lists(st.lists(change, max_size=changes), min_size=1, max_size=hours))
    return width, draw(st.integers(1, 4)), hours


@settings(max_examples=400, deadline=None)
@given(_boards())
def test_each_hour_s_first_ranks_are_those_of_sorting_every_score(board):
    """Scores rising, falling, below zero, many tied, boards shorter and longer than the depth: the
    leaders' floor raised and lowered as they go, and still the same ranks as a full sort."""
    _held_to_a_full_sort(*board)


@settings(max_examples=200, deadline=None)
@given(_boards(_SMALL | st.integers(2**54, 2**58) | st.integers(-(2**58), -(2**54)), changes=4, hours=4))
def test_scores_too_large_to_share_a_number_with_their_column_are_ranked_alike(board):
    """A score and its column share one number (the sort by one key) only while the score fits above
    the column's bits (on these boards, under 2^57 to 2^61; at 2^53, the most a product's revenue
    in cents can reach, on a board of at most 512 products): other hours are ranked by score and
    column apart, and as a full sort still. At most sixteen changes of 2^58: no score leaves an
    int64."""
    _held_to_a_full_sort(*board)


def _held_to_a_full_sort(width: int, depth: int, hours: list[list[tuple[int, int]]]) -> None:
    leaders = _Leaders(width, depth)
    scores = [0] * width
    for changes in hours:
        if changes:
            columns = np.array([column for column, _ in changes], dtype=np.int64)
            leaders.change(columns, np.array([delta for _, delta in changes], dtype=np.int64))
        for column, delta in changes:
            scores[column] += delta
        assert leaders.first().tolist() == _sorted_first(scores, depth)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda width: st.tuples(
            st.just(width),
            st.lists(st.lists(st.integers(0, width - 1), max_size=60), min_size=1, max_size=5),
        )
    )
)
def test_a_board_s_products_are_those_its_buckets_name_each_once_in_order(catalogue):
    """One board after another from the same buckets, each naming products in any order and any
    number of times: its products are the distinct ones in the catalogue's order, and each bucket's
    column points at its own product, as sorting them gives."""
    width, boards = catalogue
    names = np.array([f"p{i:03d}" for i in range(width)], dtype=object)
    product = np.array([p for board in boards for p in board], dtype=np.int64)
    hourly = Hourly(
        products=names,
        lists=[""],
        b=np.zeros(len(product), dtype=np.int64),
        exact=np.zeros(len(product), dtype=bool),
        sums=[np.zeros(len(product), dtype=np.int64)] * 4,
        scratch=np.zeros(width, dtype=np.int64),
        pair=product,
        pair_product=np.arange(width, dtype=np.int64),
        pair_listed=np.zeros(width, dtype=np.int64),
        tallies=(np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int64)),
    )
    first = 0
    for board in boards:
        rows = np.arange(first, first + len(board), dtype=np.int64)
        first += len(board)
        made = hourly._board(rows)
        assert made.products.tolist() == [names[p] for p in sorted(set(board))]
        assert made.places.tolist() == sorted(set(board))
        assert made.products[made.column].tolist() == [names[p] for p in board]


_FIRST = 480_000 * HOUR  # the first hour a history records


_NARROW = st.integers(1, 40)


@st.composite
def _windows(draw, widths=_NARROW, values=_SMALL, buckets=60, a_product_once=False):
    """A board's buckets (hour from _FIRST, exact, column, value), in the order Hourly.read gives
    them, some before the first hour and some after the last; its width, hours, span and depth."""
    width, hours = draw(widths), draw(st.integers(1, 30))
    span = draw(st.integers(0, 6)) * HOUR
    bucket = st.tuples(st.integers(-8, hours + 2), st.booleans(), st.integers(0, width - 1), values)
    unique_by = (lambda b: b[2]) if a_product_once else None
    drawn = sorted(draw(st.lists(bucket, max_size=buckets, unique_by=unique_by)), key=lambda b: b[:2])
    return drawn, width, hours, span, draw(st.integers(1, 4))


def _each_hour_sorted(buckets, width: int, hours: int, span: int, depth: int) -> list:
    """The obvious way: as of each hour, the buckets in the window (keyed at or before it, and less
    than the span before it, or just the span where exact), every positive score added up from them,
    highest first, ties by column."""
    ranked = []
    for i in range(hours):
        at, scores = _FIRST + i * HOUR, [0] * width
        for hour, exact, column, value in buckets:
            b = _FIRST + hour * HOUR
            if b <= at and (at < b + span or (exact and at == b + span)):
                scores[column] += value
        if first := _sorted_first(scores, depth):
            ranked.append((at, "units", first))
    return ranked


def _ranked_both_ways(buckets, width: int, hours: int, span: int, depth: int) -> None:
    board = Board(
        products=np.array([f"p{i:03d}" for i in range(width)], dtype=object),
        places=np.arange(width),
        column=np.array([c for _, _, c, _ in buckets], dtype=np.int64),
        b=np.array([_FIRST + h * HOUR for h, _, _, _ in buckets], dtype=np.int64),
        exact=np.array([e for _, e, _, _ in buckets], dtype=bool),
        # Units only: the other metrics have no fact.
        sums=[np.array([v for _, _, _, v in buckets], dtype=np.int64)]
        + [np.zeros(0, np.int64)] * (len(METRICS) - 1),
    )
    expected = _each_hour_sorted(buckets, width, hours, span, depth)
    with override_settings(RANKINGS={"SNAPSHOT_DEPTH": depth}):
        for at_once_cells in (0, width * (hours + 1)):  # hour by hour, then at once
            with mock.patch.object(history, "AT_ONCE_CELLS", at_once_cells):
                made = [
                    (at, metric, first.tolist()) for at, metric, first in _ranked(board, _FIRST, hours, span)
                ]
            assert made == expected, f"at once up to {at_once_cells} cells"


@settings(max_examples=300, deadline=None)
@given(_windows())
def test_a_board_is_ranked_hour_after_hour_as_a_sort_of_the_buckets_in_its_window_each_hour(window):
    """Buckets entering and leaving, exact ones a bucket later, before the first hour and past the
    last; boards narrower and wider than the depth: ranked from the last hour's, or every hour at
    once, the same ranks as sorting each hour's scores."""
    _ranked_both_ways(*window)


_REVENUE = st.integers(2**25, 2**40)  # cents, beyond a 32-bit key on a board of even one product


@settings(max_examples=200, deadline=None)
@given(_windows(values=_SMALL | _REVENUE))
def test_a_board_ranked_at_once_with_scores_too_large_for_a_32_bit_key(window):
    """Revenue in cents: score and column as one 64-bit number, ties and the cut at 0 as before."""
    _ranked_both_ways(*window)


def test_a_product_s_buckets_of_one_hour_are_added_up_exactly_at_the_bound_of_its_lifetime_totals():
    """One hour, a product's buckets of two lists added up in one cell as doubles: 2^52 and 2^52 - 1
    make 2^53 - 1, ranked above another's 2^53 - 2; a third's sale of 2^53 - 1 less a refund of
    2^53 - 3 leaves 2, ranked third (a sum a float of fewer bits would round)."""
    buckets = [
        (0, False, 0, 2**52),
        (0, False, 0, 2**52 - 1),
        (0, False, 1, 2**53 - 2),
        (0, False, 2, 2**53 - 1),
        (0, False, 2, -(2**53 - 3)),
    ]
    _ranked_both_ways(buckets, width=1100, hours=3, span=2 * HOUR, depth=4)


_LARGE = st.sampled_from([2**52, 2**53 - 1])  # a product's revenue in cents may reach 2^53 - 1


@settings(max_examples=100, deadline=None)
@given(_windows(widths=st.integers(1025, 1200), values=_SMALL | _LARGE, buckets=24, a_product_once=True))
def test_a_board_ranked_at_once_with_scores_too_large_to_share_a_number_with_their_column(window):
    """On a board of more than 1,024 products, a score of 2^52 or more does not fit above its
    column's bits: such hours are sorted by score and column apart, many products tied, and still
    rank as the obvious sort (each product in one bucket: its sum stays within what ingest allows)."""
    _ranked_both_ways(*window)


@settings(max_examples=20, deadline=None)
@given(st.integers(257, 300), st.randoms(use_true_random=False))
def test_each_category_s_board_holds_the_buckets_of_the_lists_that_count_in_it_in_order(lists, rng):
    """More lists than a byte numbers, each in a category of its own and one of 40 others, one a
    parent of some, and a category every list counts in: each board holds exactly the buckets of the
    lists counting in it, in the buckets' order, and `all` every bucket, after every category."""
    named = [f"everywhere,c{rng.randrange(40):02d},own{j}" for j in range(lists)]
    tree = Tree(parents={f"c{i:02d}": "c00" for i in range(1, 10)})
    # A pair a list, each in a bucket at least, as every list read is some fact's.
    listed = [*range(len(named)), *(rng.randrange(len(named)) for _ in range(rng.randint(0, 2000)))]
    rng.shuffle(listed)
    buckets = len(listed)
    pair = np.array(listed, dtype=np.int64)
    hourly = Hourly(
        products=np.array(["p"], dtype=object),
        lists=named,
        b=np.arange(buckets, dtype=np.int64),  # each bucket's key its place: the order it must keep
        exact=np.zeros(buckets, dtype=bool),
        sums=[np.ones(buckets, dtype=np.int64)] + [np.zeros(0, np.int64)] * (len(METRICS) - 1),
        scratch=np.zeros(1, dtype=np.int64),
        pair=pair,
        pair_product=np.zeros(len(named), dtype=np.int64),
        pair_listed=np.arange(len(named), dtype=np.int64),
        tallies=(np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int64)),
    )
    made = [
        (name, board.b.tolist()) for boards in hourly.boards(tree, Layout(shards=1)) for name, board in boards
    ]
    counted_in = [{ALL, *tree.expand(text.split(","))} for text in named]
    expected = {
        category: [b for b in range(buckets) if category in counted_in[pair[b]]]
        for category in set().union(*counted_in)
    }
    assert dict(made) == expected
    assert made[-1][0] == ALL

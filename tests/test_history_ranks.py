"""The history's ranking of an hour's board from the last hour's: the first ranks it keeps track of,
hour after hour, are those of sorting every score again."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rankings.engine.history import _Leaders
from rankings.engine.hourly import Hourly


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

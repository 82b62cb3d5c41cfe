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
from rankings.engine.snapshots import HOUR


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
        for at_once_width in (0, width):  # hour by hour, then at once
            with mock.patch.object(history, "AT_ONCE_WIDTH", at_once_width):
                made = [
                    (at, metric, first.tolist()) for at, metric, first in _ranked(board, _FIRST, hours, span)
                ]
            assert made == expected, f"at once up to {at_once_width} products"


@settings(max_examples=300, deadline=None)
@given(_windows())
def test_a_board_is_ranked_hour_after_hour_as_a_sort_of_the_buckets_in_its_window_each_hour(window):
    """Buckets entering and leaving, exact ones a bucket later, before the first hour and past the
    last; boards narrower and wider than the depth: ranked from the last hour's, or every hour at
    once, the same ranks as sorting each hour's scores."""
    _ranked_both_ways(*window)


_LARGE = st.sampled_from([2**52, 2**53 - 1])  # a product's revenue in cents may reach 2^53 - 1


@settings(max_examples=100, deadline=None)
@given(_windows(widths=st.integers(1025, 1200), values=_SMALL | _LARGE, buckets=24, a_product_once=True))
def test_a_board_ranked_at_once_with_scores_too_large_to_share_a_number_with_their_column(window):
    """On a board of more than 1,024 products, a score of 2^52 or more does not fit above its
    column's bits: such hours are sorted by score and column apart, many products tied, and still
    rank as the obvious sort (each product in one bucket: its sum stays within what ingest allows)."""
    _ranked_both_ways(*window)

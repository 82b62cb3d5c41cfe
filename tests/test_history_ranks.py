"""The history's ranking of an hour's board from the last hour's: the first ranks it keeps track of,
hour after hour, are those of sorting every score again."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rankings.engine.history import _Leaders


def _sorted_first(scores: list[int], depth: int) -> list[int]:
    """The obvious way: every positive score, highest first, ties by column."""
    ranked = sorted(
        (column for column, score in enumerate(scores) if score > 0), key=lambda c: (-scores[c], c)
    )
    return ranked[:depth]


@st.composite
def _boards(draw):
    width = draw(st.integers(1, 30))
    change = st.tuples(st.integers(0, width - 1), st.integers(-9, 9))
    hours = draw(st.lists(st.lists(change, max_size=20), min_size=1, max_size=40))
    return width, draw(st.integers(1, 4)), hours


@settings(max_examples=400, deadline=None)
@given(_boards())
def test_each_hour_s_first_ranks_are_those_of_sorting_every_score(board):
    """Scores rising, falling, below zero, many tied, boards shorter and longer than the depth: the
    leaders' floor raised and lowered as they go, and still the same ranks as a full sort."""
    width, depth, hours = board
    leaders = _Leaders(width, depth)
    scores = [0] * width
    for changes in hours:
        if changes:
            columns = np.array([column for column, _ in changes], dtype=np.int64)
            leaders.change(columns, np.array([delta for _, delta in changes], dtype=np.int64))
        for column, delta in changes:
            scores[column] += delta
        assert leaders.first().tolist() == _sorted_first(scores, depth)

"""Split boards obey the lists' depth as one board does: a page past 10,000 ranks is 404 before any
read, and a deep page or a threshold reads a bounded number of rows from each part, even when the
parts are uneven (one part's members all ranked before the others'), exactly as one sorted set."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankings.engine import store
from rankings.engine.split import part_index
from rankings.serving import merge, selectors, thresholds

from .test_split_reads import SINGLE, SPLIT, WINDOW, _same, _write, catalogue, ids  # noqa: F401 - a fixture

pytestmark = pytest.mark.usefixtures("catalogue")

PARTS = 3


@pytest.fixture
def rows_read(monkeypatch):
    """Every range the parts are read in, as (shard, part, start, stop): probes and pages alike."""
    ranges = []
    for name in ("parts_ranges", "parts_rows"):
        real = getattr(store, name)
        monkeypatch.setattr(store, name, lambda real=real, **kw: ranges.extend(kw["ranges"]) or real(**kw))
    return ranges


def _rows(ranges) -> int:
    return sum(max(0, stop - start + 1) for _, _, start, stop in ranges)


def _uneven(redis_client, size: int):
    """`size` products in 3 parts, those of part 0 all ranked before the others (ties among them)."""
    board = {}
    for i in range(size):
        pid = f"p{i:05}"
        first = part_index(pid, PARTS) == 0
        board[pid] = (10_000 + i % 40 if first else 1 + i % 30, 1 + i % 7)
    return _write(redis_client, board, PARTS)


def test_a_split_boards_page_past_10_000_ranks_is_404_before_any_read(redis_client, client, rows_read):
    _uneven(redis_client, 120)
    assert client.get(f"/c/{SPLIT}/?page=3").status_code == 200
    rows_read.clear()
    for page in (201, 1800, 999_999_999):
        assert client.get(f"/c/{SPLIT}/?page={page}").status_code == 404
    assert rows_read == []


def test_a_deep_page_of_uneven_parts_reads_a_bounded_number_of_rows(redis_client, rows_read):
    """Ranks 6,001-6,050 of 9,000 where part 0 holds ranks 1-3,000: its place is far from the guess,
    and each part's place is found by halves, not by reading every member before the page."""
    _uneven(redis_client, 9000)
    args = {"window": WINDOW, "metric": "units", "limit": 50, "offset": 6000}
    split = selectors.board_top(category=SPLIT, **args)
    assert _rows(rows_read) < 2500, _rows(rows_read)
    _same(split, selectors.board_top(category=SINGLE, **args))


def test_a_parts_size_read_apart_from_its_window_never_makes_a_deep_page_wrong(redis_client, monkeypatch):
    """A part's window and its size are two commands, between which a tick may change the part: a
    size that says the window reached the part's end, when it did not, lets no unread member by."""
    # given: ranks 6,001-6,050 of 9,000 where part 0 holds ranks 1-3,000, far from the guess
    _uneven(redis_client, 9000)
    real = store.parts_rows

    def sizes_stale(**kw):
        read = real(**kw)
        for found, (_, _, low, _) in zip(read, kw["ranges"], strict=True):
            found.total = min(found.total, low + len(found.rows))  # as if it ended with the window
        return read

    monkeypatch.setattr(store, "parts_rows", sizes_stale)
    args = {"window": WINDOW, "metric": "units", "limit": 50, "offset": 6000}
    # when
    split = selectors.board_top(category=SPLIT, **args)
    # then
    assert split.items == selectors.board_top(category=SINGLE, **args).items


def test_thresholds_of_uneven_parts_read_a_bounded_number_of_rows(redis_client, rows_read):
    _uneven(redis_client, 9000)
    split = thresholds.board_thresholds(category=SPLIT, window=WINDOW, metric="units")
    assert _rows(rows_read) < 2500, _rows(rows_read)
    _same(split, thresholds.board_thresholds(category=SINGLE, window=WINDOW, metric="units"))
    assert [rank for rank, _ in split.thresholds] == [1, 10, 100, 1000]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    board=st.dictionaries(ids, st.tuples(st.integers(1, 4), st.integers(1, 6)), min_size=120, max_size=300),
    parts=st.integers(2, 5),
    pages=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 60)), min_size=1, max_size=4),
)
def test_each_parts_place_found_by_halves_gives_the_one_sorted_sets_page(
    redis_client, monkeypatch, board, parts, pages
):
    """With no window about the guessed places (every deep page found by halves): random members,
    ties everywhere and tie groups across the parts, each page and threshold equal to one board's."""
    monkeypatch.setattr(merge, "_deep_slack", lambda start: 0)
    _write(redis_client, board, parts)
    for share, limit in pages:
        offset = store.BLOB_SIZE + int(share * (len(board) - store.BLOB_SIZE))
        args = {"window": WINDOW, "metric": "units", "limit": limit, "offset": offset}
        _same(selectors.board_top(category=SPLIT, **args), selectors.board_top(category=SINGLE, **args))
    monkeypatch.setattr(thresholds, "RANKS", (1, 101, 110, len(board) - 1))
    args = {"window": WINDOW, "metric": "revenue"}
    _same(
        thresholds.board_thresholds(category=SPLIT, **args),
        thresholds.board_thresholds(category=SINGLE, **args),
    )

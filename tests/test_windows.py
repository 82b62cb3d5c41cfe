"""Window arithmetic: UTC-aligned buckets, bounds, and what leaves and enters as the clock moves."""

import datetime as dt

from rankings.engine.windows import Window, bucket_sizes, oldest_bucket_start

HOUR = Window("1d", 3600, 24)
MINUTE = Window("1h", 60, 60)
T = int(dt.datetime(2026, 3, 2, 12, 34, 56, tzinfo=dt.UTC).timestamp())
NOON = int(dt.datetime(2026, 3, 2, 12, 0, 0, tzinfo=dt.UTC).timestamp())


def test_buckets_are_aligned_to_utc():
    assert HOUR.bucket_of(T) == NOON
    assert MINUTE.bucket_of(T) == NOON + 34 * 60


def test_a_window_holds_the_bucket_of_now_and_the_ones_before_it():
    first, last = HOUR.bounds(T)

    assert last == NOON
    assert first == NOON - 23 * 3600


def test_moving_within_a_bucket_changes_nothing():
    assert HOUR.transition(T, T + 60) == (None, None)


def test_one_bucket_leaves_and_one_enters_when_the_clock_crosses_a_boundary():
    left, entered = HOUR.transition(T, T + 3600)

    assert left == (NOON - 23 * 3600, NOON - 23 * 3600)
    assert entered == (NOON + 3600, NOON + 3600)


def test_a_jump_longer_than_the_window_replaces_it_whole():
    left, entered = HOUR.transition(T, T + 30 * 3600)

    assert left == HOUR.bounds(T)
    assert entered == HOUR.bounds(T + 30 * 3600)


def test_with_no_earlier_instant_the_whole_window_enters():
    assert HOUR.transition(None, T) == (None, HOUR.bounds(T))


def test_the_oldest_instant_any_window_holds_and_the_bucket_sizes():
    thirty = Window("30d", 3600, 720)

    assert oldest_bucket_start([MINUTE, HOUR, thirty], T) == NOON - 719 * 3600
    assert bucket_sizes([MINUTE, HOUR, thirty]) == [60, 3600]

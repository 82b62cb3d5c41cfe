"""Time arithmetic for windows and buckets: pure functions, UTC epoch seconds, no I/O.

A window of n buckets of s seconds, as of an instant `now`, holds the bucket
containing `now` and the n-1 buckets before it. Buckets are aligned to the
epoch, so they are aligned to UTC.
"""

from dataclasses import dataclass

from rankings.conf import rankings_settings


@dataclass(frozen=True)
class Window:
    name: str
    bucket_seconds: int
    buckets: int

    def bucket_of(self, t: int) -> int:
        """Start (epoch seconds) of the bucket that contains instant t."""
        return t - t % self.bucket_seconds

    def bounds(self, now: int) -> tuple[int, int]:
        """First and last bucket start inside the window as of `now`, inclusive."""
        last = self.bucket_of(now)
        return last - (self.buckets - 1) * self.bucket_seconds, last

    def transition(
        self, old_now: int | None, new_now: int
    ) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """Bucket ranges that left and that entered the window when the clock moved.

        Returns (left, entered), each an inclusive (first, last) range of bucket
        starts or None. With no previous instant every bucket of the window entered.
        """
        new_first, new_last = self.bounds(new_now)
        if old_now is None:
            return None, (new_first, new_last)
        old_first, old_last = self.bounds(old_now)
        step = self.bucket_seconds
        left_last = min(old_last, new_first - step)
        left = (old_first, left_last) if left_last >= old_first else None
        entered_first = max(new_first, old_last + step)
        entered = (entered_first, new_last) if entered_first <= new_last else None
        return left, entered


def oldest_bucket_start(windows, now: int) -> int:
    """The earliest instant that some window still holds as of `now`."""
    return min(w.bounds(now)[0] for w in windows)


def bucket_sizes(windows) -> list[int]:
    return sorted({w.bucket_seconds for w in windows})


def configured_windows() -> dict[str, Window]:
    """The windows of the settings (RANKINGS["WINDOWS"]), by name."""
    return {
        name: Window(name=name, bucket_seconds=size, buckets=count)
        for name, (size, count) in rankings_settings.WINDOWS.items()
    }

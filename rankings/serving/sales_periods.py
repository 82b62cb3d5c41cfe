"""Units sold per period, from the buckets in PostgreSQL: the one read of the sales charts."""

import datetime as dt

from django.db import DatabaseError

from rankings.engine.shards import ALL, active
from rankings.engine.windows import configured_windows
from rankings.serving.answers import UnitsPerPeriod

# --- sales over time (PostgreSQL) ---------------------------------------------------------


def chart_bucket_seconds() -> int:
    """The size of the buckets the charts add up: those of the longest window, kept the longest."""
    longest = max(configured_windows().values(), key=lambda w: w.bucket_seconds * w.buckets)
    return longest.bucket_seconds


def units_per_period(
    *, period: int, first: dt.datetime, count: int, product_id: str | None = None
) -> UnitsPerPeriod:
    """Net units sold in each of `count` periods of `period` seconds from `first` (by sale time),
    of one product or of every product.

    Read from the buckets of the `all` board, where every sale counts once whatever its
    categories; `period` is a multiple of their size. The one read that goes to PostgreSQL
    rather than Redis: the boards keep window totals, the buckets the history. One query;
    periods without sales are 0.
    """
    from django.db.models import F, Sum

    from rankings.models import ALL_BOARDS, Bucket

    size = chart_bucket_seconds()
    if period % size:
        raise ValueError(f"a period of {period} s is not a whole number of {size}-second buckets")
    start = int(first.timestamp()) // period
    try:
        # `all`'s buckets, or those of its parts when it is split.
        categories = active().layout.boards_of(ALL)
    except DatabaseError:
        return UnitsPerPeriod(periods=[], stale=True)
    # Within ALL_BOARDS, said in so many words: PostgreSQL then reads through the index by product,
    # which holds those buckets only, where it cannot tell on its own that named parts of a split
    # `all` are among them.
    rows = Bucket.objects.filter(
        ALL_BOARDS,
        size=size,
        category__in=categories,
        start__gte=start * period,
        start__lt=(start + count) * period,
    )
    if product_id is not None:
        rows = rows.filter(product_id=product_id)
    query = (
        rows.annotate(n=F("start") / period)
        .values("n")
        .annotate(units=Sum("units"))
        .values_list("n", "units")
    )
    try:
        per_period = dict(query.order_by())
    except DatabaseError:
        return UnitsPerPeriod(periods=[], stale=True)
    return UnitsPerPeriod(
        periods=[
            (dt.datetime.fromtimestamp(n * period, tz=dt.UTC), int(per_period.get(n, 0)))
            for n in range(start, start + count)
        ]
    )

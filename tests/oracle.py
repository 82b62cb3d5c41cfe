"""The tests' own reference: every board and hourly snapshot from the raw rows, by the contract alone.

Plain Python over the stored sales and engagement events, written from the
meaning of the numbers (docs/api.md; the engine's own recompute is checked
against it, not trusted): nothing here comes from `rankings.engine`, so a wrong
window bound, tree expansion or split layout there cannot agree with it.

- A window of n buckets of s seconds, as of `now`, holds the events whose time
  falls in the UTC-aligned bucket containing `now` (a moment ahead of `now`
  included) or in the n-1 before it.
- A return counts at its original sale's time, in the original's categories.
- An event counts once in `all`, once in each of its categories and once in
  every ancestor of them (the active version's tree).
- A board ranks by score descending, then product id in byte order; a score of
  0 or less is not ranked.
"""

import datetime as dt
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from rankings.conf import rankings_settings
from rankings.models import Engagement, Sale

ALL = "all"

Boards = dict[tuple[str, str, str], list[tuple[str, int]]]  # (window, metric, category) -> ranked rows


@dataclass(frozen=True)
class Counted:
    """One event as the boards count it: when, what, where, how much of each metric."""

    row_id: int
    at: float  # epoch seconds
    product_id: str
    categories: tuple[str, ...]
    scores: dict[str, int]
    engagement: bool


def events() -> list[Counted]:
    """Every stored sale (a return at its original's time and categories) and engagement event."""
    sales = list(
        Sale.objects.values_list(
            "id", "event_id", "ts", "product_id", "categories", "qty", "amount_cents", "return_of"
        )
    )
    originals = {event_id: (ts, categories) for _, event_id, ts, _, categories, qty, _, _ in sales if qty > 0}
    found = []
    for row_id, _, ts, product_id, categories, qty, cents, return_of in sales:
        if return_of is not None:
            ts, categories = originals[return_of]
            cents = -cents  # a refund subtracts
        found.append(
            Counted(
                row_id, ts.timestamp(), product_id, tuple(categories), {"units": qty, "revenue": cents}, False
            )
        )
    for row_id, ts, product_id, categories, kind in Engagement.objects.values_list(
        "id", "ts", "product_id", "categories", "kind"
    ):
        scores = {"views": int(kind == "view"), "wishes": int(kind == "wish")}
        # An event counts from its whole second.
        found.append(Counted(row_id, float(int(ts.timestamp())), product_id, tuple(categories), scores, True))
    return found


def counted_in(categories: tuple[str, ...], parents: dict[str, str | None]) -> set[str]:
    """`all`, the categories and every ancestor of each, once."""
    found = {ALL}
    for slug in categories:
        while slug is not None and slug not in found:
            found.add(slug)
            slug = parents.get(slug)
    return found


def in_window(at: float, now: float, bucket_seconds: int, buckets: int) -> bool:
    """Whether an event at `at` is in the window as of `now`: its bucket is `now`'s or one of the n-1 before."""
    newest = int(now // bucket_seconds)
    return newest - buckets < int(at // bucket_seconds) <= newest


def windows() -> Iterator[tuple[str, int, int]]:
    for name, (bucket_seconds, buckets) in rankings_settings.WINDOWS.items():
        yield name, bucket_seconds, buckets


def ranked(totals: dict[str, int]) -> list[tuple[str, int]]:
    rows = [(pid, score) for pid, score in totals.items() if score > 0]
    return sorted(rows, key=lambda row: (-row[1], row[0].encode()))


def boards(now: dt.datetime, parents: dict[str, str | None], counted: list[Counted] | None = None) -> Boards:
    """Every non-empty board as of `now` under the tree `parents` (slug -> parent slug)."""
    return _boards(counted if counted is not None else events(), now.timestamp(), parents, lambda event: True)


def _boards(counted, now: float, parents, known, names=None) -> Boards:
    totals: dict[tuple[str, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for name, bucket_seconds, buckets in windows():
        if names is not None and name not in names:
            continue
        for event in counted:
            if not known(event) or not in_window(event.at, now, bucket_seconds, buckets):
                continue
            for category in counted_in(event.categories, parents):
                for metric, score in event.scores.items():
                    totals[(name, metric, category)][event.product_id] += score
    found = {key: ranked(scores) for key, scores in totals.items()}
    return {key: rows for key, rows in found.items() if rows}


def snapshots(
    hours: list[int], parents: dict[str, str | None], *, earlier_sale: int = 0, earlier_engagement: int = 0
) -> dict[tuple[int, str, str, str], list[str]]:
    """The snapshot of each hour in `hours` (epoch seconds) of every board of the snapshot windows:
    the first SNAPSHOT_DEPTH product ids as of the hour, over what was counted by then (the events
    stored up to the ids `earlier_*`, and those at or before the hour)."""
    counted = events()
    depth = rankings_settings.SNAPSHOT_DEPTH
    names = set(rankings_settings.SNAPSHOT_WINDOWS)
    found = {}
    for hour in hours:

        def known(event, hour=hour):
            earlier = earlier_engagement if event.engagement else earlier_sale
            return event.row_id <= earlier or event.at <= hour

        for (window, metric, category), rows in _boards(counted, hour, parents, known, names).items():
            found[(hour, window, metric, category)] = [pid for pid, _ in rows[:depth]]
    return found


@dataclass(frozen=True)
class Alert:
    """A rank alert as the contract states it (docs/api.md, "Rank alerts")."""

    id: int
    product_id: str
    category: str
    window: str
    metric: str
    rule: str  # enters, leaves, climbs, falls
    number: int
    since: dt.datetime | None  # judged at the hours after it only


TYPES = {"enters": "rank.entered", "leaves": "rank.left", "climbs": "rank.climbed", "falls": "rank.fell"}


def firings(
    alerts: list[Alert], snapshots: dict[tuple[int, str, str, str], list[str]], hour: int
) -> set[tuple[int, int, str, int | None, int | None]]:
    """(alert id, hour, type, rank, rank before) of each alert whose rule holds at `hour` (epoch
    seconds) between the snapshots of the hour before and of `hour`: `enters N` when the rank is at
    most N and was unranked or past N, `leaves N` the reverse, `climbs k` when it rose by k places or
    more, `falls k` when it fell by k or more; unranked counts as SNAPSHOT_DEPTH + 1."""
    past = rankings_settings.SNAPSHOT_DEPTH + 1
    found = set()
    for alert in alerts:
        if alert.since is not None and hour <= alert.since.timestamp():
            continue

        def rank(at: int, alert=alert) -> int | None:
            row = snapshots.get((at, alert.window, alert.metric, alert.category), [])
            return row.index(alert.product_id) + 1 if alert.product_id in row else None

        now, before = rank(hour), rank(hour - 3600)
        r, r_before = now or past, before or past
        holds = {
            "enters": r <= alert.number < r_before,
            "leaves": r_before <= alert.number < r,
            "climbs": r_before - r >= alert.number,
            "falls": r - r_before >= alert.number,
        }[alert.rule]
        if holds:
            found.add((alert.id, hour, TYPES[alert.rule], now, before))
    return found

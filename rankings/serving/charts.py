"""Bar charts drawn on the server as inline SVG: the geometry here, the markup in the templates."""

from dataclasses import dataclass
from typing import Any

# Of the height, for the tallest bar, so that it does not touch the edge.
ROOM = 0.92
# Of each bar's slot, the bar itself; the rest is the gap between bars.
BAR = 0.8


@dataclass(frozen=True, slots=True)
class Bar:
    at: Any  # what the bar stands for: a day, an hour
    units: int
    # In the SVG's own units, as strings, so that no locale setting can put a comma in them.
    x: str
    y: str
    width: str
    height: str


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    peak: int  # the tallest bar's units (0 when there are none)
    total: int
    best: Bar | None  # the tallest bar, None when every bar is 0
    first: Any
    last: Any


def _svg(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def bar_chart(points: list[tuple[Any, int]], *, width: int, height: int) -> Chart:
    """Bars for (label, units) points in a width×height box, scaled to the largest; below 0 draws as 0."""
    peak = max((units for _, units in points), default=0)
    step = width / len(points) if points else width
    bars = []
    for i, (at, units) in enumerate(points):
        h = height * ROOM * max(units, 0) / peak if peak > 0 else 0
        bars.append(
            Bar(
                at=at,
                units=units,
                x=_svg(i * step + step * (1 - BAR) / 2),
                y=_svg(height - h),
                width=_svg(step * BAR),
                height=_svg(h),
            )
        )
    best = max(bars, key=lambda b: b.units) if bars else None
    return Chart(
        width=width,
        height=height,
        bars=bars,
        peak=peak,
        total=sum(units for _, units in points),
        best=best if peak else None,
        first=points[0][0] if points else None,
        last=points[-1][0] if points else None,
    )


@dataclass(frozen=True, slots=True)
class RankPoint:
    at: Any  # the hour
    rank: int | None  # None: not in the snapshot's first ranks
    x: str
    y: str | None


@dataclass(frozen=True, slots=True)
class RankChart:
    width: int
    height: int
    points: list[RankPoint]
    lines: list[str]  # polyline coordinates, one per run of ranked hours: gaps where unranked
    dots: list[RankPoint]  # a ranked hour alone between two gaps, drawn as a dot
    best: int | None  # the highest rank reached (the smallest number)
    worst: int | None
    first: Any
    last: Any


def rank_chart(points: list[tuple[Any, int | None]], *, width: int, height: int) -> RankChart:
    """A line of ranks over time in a width×height box: rank 1 at the top, the worst rank shown at
    the bottom, broken where the product was unranked."""
    ranks = [rank for _, rank in points if rank is not None]
    best, worst = (min(ranks), max(ranks)) if ranks else (None, None)
    step = width / len(points) if points else width
    top, span = height * (1 - ROOM) / 2, height * ROOM

    def y(rank: int) -> float:
        assert worst is not None  # only ranked points are drawn, and then there is a worst
        return top if worst == 1 else top + span * (rank - 1) / (worst - 1)

    drawn = [
        RankPoint(
            at=at, rank=rank, x=_svg(i * step + step / 2), y=_svg(y(rank)) if rank is not None else None
        )
        for i, (at, rank) in enumerate(points)
    ]
    lines, dots, run = [], [], []
    for point in [*drawn, None]:
        if point is not None and point.rank is not None:
            run.append(point)
            continue
        if len(run) > 1:
            lines.append(" ".join(f"{p.x},{p.y}" for p in run))
        elif run:
            dots.append(run[0])
        run = []
    return RankChart(
        width=width,
        height=height,
        points=drawn,
        lines=lines,
        dots=dots,
        best=best,
        worst=worst,
        first=points[0][0] if points else None,
        last=points[-1][0] if points else None,
    )

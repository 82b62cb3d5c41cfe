"""Pages of what moves: movers and shakers, hot new releases, rank arrows and rank-history charts.
They call selectors only (rankings/serving/moves.py), like the other pages."""

from django.core.paginator import Paginator
from django.shortcuts import render
from django.urls import reverse

from rankings.conf import METRICS, rankings_settings
from rankings.serving import moves, selectors
from rankings.serving.charts import rank_chart
from rankings.serving.layouts import split_board
from rankings.serving.page_parts import (
    CHART_HEIGHT,
    CHART_WIDTH,
    DEFAULT_METRIC,
    DEFAULT_WINDOW,
    METRIC_LABELS,
    PAGE_SIZE,
    WINDOW_CHOICES,
    WINDOW_LABELS,
    category_url,
    choice_param,
    freshness_of,
    page_links,
    page_number,
    page_view,
    query_string,
    ranked_rows,
)
from rankings.serving.rank_then import gain_percent

MOVERS_SHOWN = 100  # rows of the movers page
HISTORY_DAYS = 7  # days of rank history on a product's page
HISTORY_CATEGORIES = 6  # charts on a product's page at most: its best-ranked categories


def mover_text(item, *, known: bool = True) -> str:
    """ "#12, was #1,234 (+10,183%)" or "#12, previously unranked"; "#12" alone when the ranks 24
    hours before are not `known`."""
    if not known:
        return f"#{item.rank:,}"
    if item.rank_then is None:
        return f"#{item.rank:,}, previously unranked"
    return f"#{item.rank:,}, was #{item.rank_then:,} (+{gain_percent(item.rank, item.rank_then):,}%)"


def _snapshot_params(request) -> tuple[str, str]:
    windows = list(rankings_settings.SNAPSHOT_WINDOWS)
    window = choice_param(
        request, "window", windows, DEFAULT_WINDOW if DEFAULT_WINDOW in windows else windows[0]
    )
    return window, choice_param(request, "metric", METRICS, DEFAULT_METRIC)


def _url(name: str, slug: str, window: str, metric: str, **extra) -> str:
    return reverse(name, args=[slug]) + query_string(window, metric, **extra)


def _switches(name: str, slug: str, window: str, metric: str, windows) -> dict:
    return {
        "windows": [
            {"label": WINDOW_CHOICES.get(w, w), "url": _url(name, slug, w, metric), "current": w == window}
            for w in windows
        ],
        "metrics": [
            {"label": METRIC_LABELS.get(m, m), "url": _url(name, slug, window, m), "current": m == metric}
            for m in METRICS
        ],
    }


@page_view
def movers(request, slug):
    """Movers and shakers of a category: the largest climbs of the last 24 hours."""
    window, metric = _snapshot_params(request)
    name = selectors.category_name(slug)
    board = moves.board_movers(category=slug, window=window, metric=metric, limit=MOVERS_SHOWN)
    rows = [
        {"row": row, "text": mover_text(row.item, known=board.then is not None)}
        for row in ranked_rows(board.items, window=window, metric=metric, known=board.then is not None)
    ]
    return render(
        request,
        "rankings/movers.html",
        {
            "category": {"slug": slug, "name": name, "url": category_url(slug, window=window, metric=metric)},
            "window": window,
            "metric": metric,
            "window_label": WINDOW_LABELS.get(window, window),
            "metric_label": METRIC_LABELS.get(metric, metric),
            "switches": _switches("movers", slug, window, metric, rankings_settings.SNAPSHOT_WINDOWS),
            "rows": rows,
            "total": board.total,
            "then": board.then,
            "freshness": freshness_of(board),
        },
    )


@page_view
def new_releases(request, slug):
    """Hot new releases of a category: its best sellers released in the last RANKINGS_NEW_DAYS days."""
    window = choice_param(request, "window", list(rankings_settings.WINDOWS), DEFAULT_WINDOW)
    metric = choice_param(request, "metric", METRICS, DEFAULT_METRIC)
    page = page_number(request)
    offset = (page - 1) * PAGE_SIZE
    name = selectors.category_name(slug)
    board = moves.board_new(category=slug, window=window, metric=metric, limit=PAGE_SIZE, offset=offset)
    pages = Paginator(range(board.total), PAGE_SIZE, allow_empty_first_page=True)
    if page > pages.num_pages:
        raise selectors.NotFound(f"page {page} is past the end of the new releases of {name}.")
    links = page_links(
        page, pages, lambda p: _url("new-releases", slug, window, metric, page=p if p > 1 else None)
    )
    return render(
        request,
        "rankings/new.html",
        {
            "category": {"slug": slug, "name": name, "url": category_url(slug, window=window, metric=metric)},
            "window": window,
            "metric": metric,
            "window_label": WINDOW_LABELS.get(window, window),
            "metric_label": METRIC_LABELS.get(metric, metric),
            "switches": _switches("new-releases", slug, window, metric, rankings_settings.WINDOWS),
            "items": ranked_rows(board.items, window=window, metric=metric),
            "total": board.total,
            "days": rankings_settings.NEW_DAYS,
            "pages": links,
            "freshness": freshness_of(board),
        },
    )


def rank_charts(product_id: str, ranked, names: dict, window: str, metric: str) -> list[dict]:
    """A rank-history chart for each category the product ranks in (its best first), of the page's
    window where it has snapshots, else 7 days'; one query for them all."""
    if window not in rankings_settings.SNAPSHOT_WINDOWS:
        window = DEFAULT_WINDOW
    # A split board's parts are snapshotted apart: it has no rank history.
    shown = [
        r.category
        for r in sorted(ranked, key=lambda r: (r.percentile, r.category))
        if not split_board(r.category)
    ][:HISTORY_CATEGORIES]
    if not shown:
        return []
    try:
        histories = moves.product_histories(
            product_id=product_id, categories=shown, window=window, metric=metric, days=HISTORY_DAYS
        )
    except (selectors.Unavailable, selectors.NotFound):
        return []
    return [
        {
            "category": category,
            "name": names.get(category, category),
            "window_label": WINDOW_LABELS.get(window, window),
            "chart": rank_chart(
                [(p.at, p.rank) for p in histories[category].points], width=CHART_WIDTH, height=CHART_HEIGHT
            ),
        }
        for category in shown
        if histories[category].points
    ]

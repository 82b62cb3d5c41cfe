"""Server-rendered pages: each category's best sellers and a product's ranks; they call selectors only."""

import datetime as dt
import math
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from rankings.conf import ENGAGEMENT_METRICS, MAX_DEPTH
from rankings.engine.shards import ALL
from rankings.serving import selectors, thresholds
from rankings.serving.charts import bar_chart
from rankings.serving.moves_pages import rank_charts
from rankings.serving.page_parts import (
    CHART_HEIGHT,
    CHART_WIDTH,
    DEFAULT_METRIC,
    DEFAULT_WINDOW,
    METRIC_LABELS,
    PAGE_SIZE,
    WINDOW_LABELS,
    board_params,
    category_url,
    cursor_param,
    freshness_of,
    page_links,
    page_number,
    page_of,
    page_view,
    product_url,
    query_string,
    ranked_rows,
    switch_links,
)

# The home page: the overall leaders and each category's first three, over a week by units.
HOME_OVERALL = 10
HOME_PER_CATEGORY = 3
# Categories per home page: a page stays one screenful of cards and one Redis
# round trip however many categories the catalogue holds.
HOME_CATEGORIES = 100
# A category's page shows the first of the categories right under it, each with its leader; a page
# of their own lists them all, this many at a time (one pipelined Redis read of their leaders).
CHILDREN_SHOWN = 20
CHILDREN_PAGE = 100
# Products shown on either side of a product on its page.
NEIGHBOURS = 2
CHART_DAYS = 30
DAY = 86400  # seconds
# Deeper than this, a badge also gives the rank as a share of the board ("top 3%"),
# which says more than "#1,204" does; past the first half a share says nothing good.
PERCENTILE_AFTER_RANK = 10
PERCENTILE_UP_TO = 50  # percent
# What a list ranks by, in a sentence ("Toys, last day, by views").
METRIC_NOUNS = {"units": "units sold", "revenue": "revenue", "views": "views", "wishes": "wish-list adds"}
# "3 more units this week would make it #9": a window as the end of that sentence.
WINDOW_PERIODS = {"1h": "this hour", "1d": "today", "7d": "this week", "30d": "this month"}


def _home_links(number: int | None, shown: selectors.CategoriesPage) -> dict:
    """Pages numbered as far as MAX_DEPTH rows; from there on (and for a page found by cursor, which
    has no number), the next page follows the last category of the one before."""
    home = reverse("home")
    if shown.next is None:
        following = None
    elif number is not None and number * HOME_CATEGORIES < MAX_DEPTH:
        following = f"{home}?page={number + 1}"
    else:
        following = f"{home}?{urlencode({'after': shown.next})}"
    counted = shown.total if shown.total is not None and shown.total <= MAX_DEPTH else None
    return {
        "number": number,
        "last": math.ceil(counted / HOME_CATEGORIES) if counted is not None else None,
        "previous": (home + (f"?page={number - 1}" if number > 2 else "")) if number and number > 1 else None,
        "first": home if number is None else None,
        "next": following,
    }


# --- pages --------------------------------------------------------------------------


@page_view
def home(request):
    """The overall leaders and the first three of each category, HOME_CATEGORIES to a page, over 7 days by units."""
    window, metric = DEFAULT_WINDOW, DEFAULT_METRIC
    # The top of the tree: a category under another counts in it, and shows on its parent's page.
    after = cursor_param(request)
    number = None if after else page_number(request, size=HOME_CATEGORIES)
    shown = selectors.top_categories(
        limit=HOME_CATEGORIES, offset=(number - 1) * HOME_CATEGORIES if number else 0, after=after
    )
    if number and number > 1 and not shown.items:
        raise selectors.NotFound(f"page {number} is past the end of the categories.")
    limits = {ALL: HOME_OVERALL} | {slug: HOME_PER_CATEGORY for slug, _ in shown.items}
    boards = selectors.boards_top_many(limits=limits, window=window, metric=metric)
    overall = boards.pop(ALL)

    def card(slug: str, name: str, board: selectors.Board) -> dict:
        return {
            "slug": slug,
            "name": name,
            "url": category_url(slug, window=window, metric=metric),
            "total": board.total,
            "items": ranked_rows(board.items, window=window, metric=metric, known=board.then is not None),
        }

    return render(
        request,
        "rankings/home.html",
        {
            "window_label": WINDOW_LABELS.get(window, window),
            "overall": card(ALL, selectors.category_name(ALL), overall),
            "categories": [card(slug, name, boards[slug]) for slug, name in shown.items],
            "pages": _home_links(number, shown),
            "freshness": freshness_of(overall, *boards.values()),
        },
    )


@page_view
def category(request, slug):
    """A category's best sellers, PAGE_SIZE to a page, for one window and metric."""
    window, metric = board_params(request)
    page = page_number(request)
    offset = (page - 1) * PAGE_SIZE
    highlight = request.GET.get("highlight") or None
    name = selectors.category_name(slug)
    board = selectors.board_top(category=slug, window=window, metric=metric, limit=PAGE_SIZE, offset=offset)
    pages = Paginator(range(board.total), PAGE_SIZE, allow_empty_first_page=True)
    if page > pages.num_pages:
        last = pages.num_pages
        raise selectors.NotFound(
            f"page {page} is past the end of {name}: the list has {last} page{'s' * (last > 1)}."
        )
    links = page_links(
        page, pages, lambda p: category_url(slug, window=window, metric=metric, page=p if p > 1 else None)
    )
    crumbs = _crumbs(slug, window=window, metric=metric)
    children = selectors.category_children(slug, limit=CHILDREN_SHOWN)
    subcategories, _ = _subcategories(children, window=window, metric=metric)
    return render(
        request,
        "rankings/category.html",
        {
            "category": {"slug": slug, "name": name},
            "crumbs": crumbs,
            "subcategories": subcategories,
            "more_subcategories": _children_url(slug, window, metric) if children.next else None,
            "window": window,
            "metric": metric,
            "window_label": WINDOW_LABELS.get(window, window),
            "metric_label": METRIC_LABELS.get(metric, metric),
            "metric_noun": METRIC_NOUNS.get(metric, metric),
            "engagement": metric in ENGAGEMENT_METRICS,
            "switches": switch_links(lambda w, m: category_url(slug, window=w, metric=m), window, metric),
            "items": ranked_rows(
                board.items, window=window, metric=metric, highlight=highlight, known=board.then is not None
            ),
            "total": board.total,
            "pages": {
                **links,
                "first_rank": (page - 1) * PAGE_SIZE + 1,
                "last_rank": (page - 1) * PAGE_SIZE + len(board.items),
            },
            "freshness": freshness_of(board),
        },
    )


def _crumbs(slug: str, *, window: str, metric: str) -> list[dict]:
    """The category's ancestors (root first), in the tree the boards count with."""
    above = selectors.categories_tree().path(slug)[:-1]
    names = selectors.categories_names(above)
    return [{"name": names.get(s, s), "url": category_url(s, window=window, metric=metric)} for s in above]


def _children_url(slug: str, window: str, metric: str, after: str | None = None) -> str:
    return reverse("subcategories", args=[slug]) + query_string(window, metric, after=after)


def _subcategories(children: selectors.CategoriesPage, *, window: str, metric: str) -> tuple[list, list]:
    """The categories of `children`, each with its leader (one pipelined read), and the boards read."""
    if not children.items:
        return [], []
    boards = selectors.boards_top_many(limits={c: 1 for c, _ in children.items}, window=window, metric=metric)
    rows = [
        {
            "name": child_name,
            "url": category_url(child, window=window, metric=metric),
            "leader": next(
                iter(
                    ranked_rows(
                        boards[child].items,
                        window=window,
                        metric=metric,
                        known=boards[child].then is not None,
                    )
                ),
                None,
            ),
        }
        for child, child_name in children.items
    ]
    return rows, list(boards.values())


@page_view
def subcategories(request, slug):
    """The categories right under a category, by name, CHILDREN_PAGE to a page, each with its leader."""
    window, metric = board_params(request)
    after = cursor_param(request)
    name = selectors.category_name(slug)
    children = selectors.category_children(slug, limit=CHILDREN_PAGE, after=after)
    rows, boards = _subcategories(children, window=window, metric=metric)
    return render(
        request,
        "rankings/subcategories.html",
        {
            "category": {"slug": slug, "name": name, "url": category_url(slug, window=window, metric=metric)},
            "subcategories": rows,
            "window_label": WINDOW_LABELS.get(window, window),
            "metric_noun": METRIC_NOUNS.get(metric, metric),
            "pages": {
                "first": _children_url(slug, window, metric) if after else None,
                "next": _children_url(slug, window, metric, after=children.next) if children.next else None,
            },
            "freshness": freshness_of(*boards),
        },
    )


def _percent(percentile: float | None) -> str | None:
    """A share rounded up, so it never flatters: rank 12 of 500 (2.4%) is "top 3%"."""
    if percentile is None:
        return None
    if percentile < 1:
        return f"{max(0.1, math.ceil(percentile * 10) / 10):g}%"
    return f"{math.ceil(percentile)}%"


def _badge(rank, name: str, *, product_id: str, window: str, metric: str) -> dict:
    """A rank (selectors.Rank or CategoryRank) as a link to the product's row on its board, with
    what it would take to reach the next threshold rank above it."""
    score = {
        "units": rank.units,
        "revenue": int(rank.revenue * 100),
        "views": rank.views,
        "wishes": rank.wishes,
    }.get(metric)
    climb = thresholds.product_climb(
        product_id=product_id,
        category=rank.category,
        window=window,
        metric=metric,
        rank=rank.rank,
        score=score or 0,
    )
    return {
        "climb": climb,
        "period": WINDOW_PERIODS.get(window, f"in the {WINDOW_LABELS.get(window, window).lower()}"),
        "category": rank.category,
        "name": name,
        "rank": rank.rank,
        "total": rank.total,
        "top": (
            _percent(rank.percentile)
            if rank.rank > PERCENTILE_AFTER_RANK and rank.percentile <= PERCENTILE_UP_TO
            else None
        ),
        "url": category_url(
            rank.category, window=window, metric=metric, page=page_of(rank.rank), highlight=product_id
        ),
    }


def daily_units(product_id: str, *, days: int, until: dt.datetime) -> selectors.UnitsPerPeriod:
    """The product's net units per UTC day, for the `days` days up to the one holding `until`."""
    first = dt.datetime.combine(until.date(), dt.time(), tzinfo=dt.UTC) - dt.timedelta(days=days - 1)
    return selectors.units_per_period(period=DAY, first=first, count=days, product_id=product_id)


def _product_ranks(product_id: str, window: str, metric: str) -> tuple[selectors.Rank, selectors.Ranks]:
    """Its rank overall and in each of its categories (none while the catalogue cannot say which)."""
    overall = selectors.product_rank(product_id=product_id, category=ALL, window=window, metric=metric)
    try:
        ranks = selectors.product_ranks(product_id=product_id, window=window, metric=metric, every_level=True)
    except selectors.Unavailable:
        # Its categories are unknown while the catalogue is away: the overall rank still shows.
        ranks = selectors.Ranks(product_id, window, metric, as_of=None, ranks=(), stale=True)
    return overall, ranks


def _nearby(product_id: str, ranked: list, names: dict, window: str, metric: str):
    """The products beside it where it stands highest among its own categories (the overall board
    only when it ranks in none of them): (what the page shows, the answer read), or (None, None)."""
    if not ranked:
        return None, None
    best = min(ranked, key=lambda r: (r.category == ALL, r.percentile, r.category))
    found = selectors.product_neighbors(
        product_id=product_id, category=best.category, window=window, metric=metric, n=NEIGHBOURS
    )
    shown = {
        "name": names.get(best.category, best.category),
        "url": category_url(
            best.category, window=window, metric=metric, page=page_of(best.rank), highlight=product_id
        ),
        "items": ranked_rows(found.items, window=window, metric=metric, highlight=product_id),
    }
    return shown, found


def _engagement_badges(product_id: str, names: dict, window: str, metric: str) -> list[dict]:
    """Beside a sales metric's badges, the product's ranks by views and by wishes (each linking to
    that board); none when the page already ranks by one of them."""
    if metric in ENGAGEMENT_METRICS:
        return []
    shown = []
    for m in ENGAGEMENT_METRICS:
        overall, ranks = _product_ranks(product_id, window, m)
        everywhere: tuple[selectors.Rank | selectors.CategoryRank, ...] = (overall, *ranks.ranks)
        ranked = [r for r in everywhere if r.rank]
        if ranked:
            shown.append(
                {
                    "label": METRIC_LABELS[m],
                    "badges": [
                        _badge(
                            r,
                            names.get(r.category, r.category),
                            product_id=product_id,
                            window=window,
                            metric=m,
                        )
                        for r in ranked
                    ],
                }
            )
    return shown


@page_view
def product(request, product_id):
    """A product's name and price, its rank in each of its categories, its neighbours and daily sales."""
    window, metric = board_params(request)
    detail = selectors.product_detail(product_id=product_id)
    overall, ranks = _product_ranks(product_id, window, metric)
    names = selectors.categories_names([ALL, *(r.category for r in ranks.ranks)])
    ranked = [r for r in (overall, *ranks.ranks) if r.rank]
    nearby, neighbors = _nearby(product_id, ranked, names, window, metric)
    freshness = freshness_of(detail, overall, ranks, *([neighbors] if neighbors else []))
    daily = daily_units(product_id, days=CHART_DAYS, until=freshness["as_of"] or timezone.now())
    freshness["stale"] = freshness["stale"] or daily.stale
    return render(
        request,
        "catalogue/product.html",
        {
            "product": detail,
            "window": window,
            "metric": metric,
            "window_label": WINDOW_LABELS.get(window, window),
            "metric_label": METRIC_LABELS.get(metric, metric),
            "switches": switch_links(
                lambda w, m: product_url(product_id, window=w, metric=m), window, metric
            ),
            "badges": [
                _badge(
                    r, names.get(r.category, r.category), product_id=product_id, window=window, metric=metric
                )
                for r in ranked
            ],
            "unranked": [names.get(r.category, r.category) for r in ranks.ranks if not r.rank],
            "categories_more": selectors.PRODUCT_CATEGORIES_READ if ranks.more else None,
            "engagement_badges": _engagement_badges(product_id, names, window, metric),
            "metric_noun": METRIC_NOUNS.get(metric, metric),
            "engagement": metric in ENGAGEMENT_METRICS,
            "nearby": nearby,
            "chart": bar_chart(daily.periods, width=CHART_WIDTH, height=CHART_HEIGHT),
            "rank_charts": rank_charts(product_id, ranked, names, window, metric),
            "freshness": freshness,
        },
    )

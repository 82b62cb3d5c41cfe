"""Server-rendered pages: each category's best sellers and a product's ranks; they call selectors only."""

import datetime as dt
import functools
import math
import re
from dataclasses import dataclass
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.db import DatabaseError
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import cache_control

from rankings.conf import ENGAGEMENT_METRICS, MAX_DEPTH, METRICS, rankings_settings
from rankings.engine.shards import ALL
from rankings.serving import selectors, thresholds
from rankings.serving.charts import bar_chart
from rankings.serving.paths import CategorySlug
from rankings.serving.then import move_of
from rankings.serving.throttling import PageThrottle

# Rows per page of a category's best sellers.
PAGE_SIZE = 50
DEFAULT_WINDOW = "7d"
DEFAULT_METRIC = "units"
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
# The daily chart's box, in the SVG's own units: the page stretches it to its width.
CHART_WIDTH, CHART_HEIGHT = 300, 100
DAY = 86400  # seconds
# Deeper than this, a badge also gives the rank as a share of the board ("top 3%"),
# which says more than "#1,204" does; past the first half a share says nothing good.
PERCENTILE_AFTER_RANK = 10
PERCENTILE_UP_TO = 50  # percent
# A page number longer than this is past the end of any board (and would overflow an offset).
PAGE_DIGITS = 9
# A browser or proxy may reuse a page this long; the boards move every tick (2 s).
MAX_AGE = 2  # seconds
# Told to a client with the 503 page: Redis is usually back within a few seconds.
RETRY_AFTER = 5  # seconds

WINDOW_LABELS = {"1h": "Last hour", "1d": "Last day", "7d": "Last 7 days", "30d": "Last 30 days"}
# Shorter, for the switch: four of them fit side by side on a phone.
WINDOW_CHOICES = {"1h": "1 hour", "1d": "1 day", "7d": "7 days", "30d": "30 days"}
METRIC_LABELS = {
    "units": "Units sold",
    "revenue": "Revenue",
    "views": "Most viewed",
    "wishes": "Most wished for",
}
# What a list ranks by, in a sentence ("Toys, last day, by views").
METRIC_NOUNS = {"units": "units sold", "revenue": "revenue", "views": "views", "wishes": "wish-list adds"}
# "3 more units this week would make it #9": a window as the end of that sentence.
WINDOW_PERIODS = {"1h": "this hour", "1d": "today", "7d": "this week", "30d": "this month"}


class BadRequest(ValueError):
    """A query parameter a page cannot take: answered with the 400 page."""


def page_view(view):
    """Bad parameters become the 400 page, unknown names the 404 page, no rankings at all (or no
    database where one is needed) the 503 page, and an address past its rate the 429 page.

    A page carries Cache-Control; ConditionalGetMiddleware gives it an ETag and answers a
    matching If-None-Match with 304.
    """

    cached_view = cache_control(max_age=MAX_AGE, public=True)(view)  # answers only, not errors

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        throttle = PageThrottle()
        if not throttle.allow_request(request, None):
            response = render(request, "429.html", status=429)
            response["Retry-After"] = str(max(1, math.ceil(throttle.wait() or 1)))
            return response
        try:
            response = cached_view(request, *args, **kwargs)
        except (BadRequest, selectors.NotKept) as bad:
            return render(request, "400.html", {"message": str(bad)}, status=400)
        except selectors.NotFound as missing:
            return render(request, "404.html", {"message": str(missing)}, status=404)
        except (selectors.Unavailable, DatabaseError):
            response = render(request, "503.html", status=503)
            response["Retry-After"] = str(RETRY_AFTER)
            return response
        return response

    return wrapper


# --- parameters and links -------------------------------------------------------------


def _shown(value: str) -> str:
    return value if len(value) <= 40 else value[:40] + "…"


def _choice(request, name: str, choices, default: str) -> str:
    value = request.GET.get(name, default)
    if value not in choices:
        raise BadRequest(f"{name} must be one of {', '.join(choices)}, not “{_shown(value)}”.")
    return value


def _board_params(request) -> tuple[str, str]:
    window = _choice(request, "window", list(rankings_settings.WINDOWS), DEFAULT_WINDOW)
    metric = _choice(request, "metric", METRICS, DEFAULT_METRIC)
    return window, metric


def _page_number(request, *, size: int = PAGE_SIZE) -> int:
    """The page asked for, of `size` rows each: a 404 past the end of any list (MAX_DEPTH rows)
    before anything is read."""
    raw = request.GET.get("page", "1")
    if not re.fullmatch(r"[1-9][0-9]*", raw):
        raise BadRequest(f"page must be a whole number from 1, not “{_shown(raw)}”.")
    if len(raw) > PAGE_DIGITS or int(raw) * size > MAX_DEPTH:
        raise selectors.NotFound(
            f"page {_shown(raw)} is past the end of the list: lists are shown to their {MAX_DEPTH:,}th row."
        )
    return int(raw)


def _cursor(request) -> str | None:
    """The category a page of categories follows (?after=), never given with a page number."""
    after = request.GET.get("after")
    if after is None:
        return None
    if "page" in request.GET:
        raise BadRequest("give page or after, not both.")
    if not re.fullmatch(CategorySlug.regex, after):
        raise selectors.NotFound("no category has that slug.")
    return after


def _query(window: str, metric: str, **extra) -> str:
    """A query string that leaves out the defaults, so links stay short and shareable."""
    params = {}
    if window != DEFAULT_WINDOW:
        params["window"] = window
    if metric != DEFAULT_METRIC:
        params["metric"] = metric
    params.update({k: v for k, v in extra.items() if v is not None})
    return "?" + urlencode(params) if params else ""


def category_url(
    slug: str, *, window: str, metric: str, page: int | None = None, highlight: str | None = None
):
    if page is not None and page * PAGE_SIZE > MAX_DEPTH:  # a rank no page holds: the board's first
        page = highlight = None
    url = reverse("category", args=[slug]) + _query(window, metric, page=page, highlight=highlight)
    return url + f"#{row_id(highlight)}" if highlight else url


def product_url(product_id: str, *, window: str = DEFAULT_WINDOW, metric: str = DEFAULT_METRIC) -> str:
    return reverse("product", args=[product_id]) + _query(window, metric)


def row_id(product_id: str) -> str:
    return f"product-{product_id}"


def page_of(rank: int) -> int:
    return (rank - 1) // PAGE_SIZE + 1


def _switches(make_url, window: str, metric: str) -> dict:
    """The window and metric choices as plain links, the current one marked."""
    return {
        "windows": [
            {"label": WINDOW_CHOICES.get(w, w), "url": make_url(w, metric), "current": w == window}
            for w in rankings_settings.WINDOWS
        ],
        "metrics": [
            {"label": METRIC_LABELS.get(m, m), "url": make_url(window, m), "current": m == metric}
            for m in METRICS
        ],
    }


# --- freshness ----------------------------------------------------------------------


def age_text(as_of: dt.datetime | None, now: dt.datetime) -> str | None:
    """ "3 s ago", "4 min ago", "2 h ago", "3 d ago"; "just now" for under a second (or a clock ahead)."""
    if as_of is None:
        return None
    seconds = int((now - as_of).total_seconds())
    if seconds < 1:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def _freshness(*answers) -> dict:
    """When the answer was exact, and whether it is a last known answer served while Redis is away."""
    instants = [a.as_of for a in answers if getattr(a, "as_of", None)]
    as_of = min(instants) if instants else None
    return {
        "as_of": as_of,
        "age": age_text(as_of, timezone.now()),
        "stale": any(a.stale for a in answers),
    }


@dataclass(frozen=True, slots=True)
class Row:
    """A ranked product as a page lists it: the answer's item, and where it links."""

    item: selectors.RankedProduct
    url: str
    row_id: str
    highlighted: bool
    move: dict | None = None  # the arrow against 24 hours before (then.move_of)


def _ranked(
    items, *, window: str, metric: str, highlight: str | None = None, known: bool = True
) -> list[Row]:
    """The rows of a list; `known`: whether the ranks 24 hours before are known (else no arrows)."""
    return [
        Row(
            item=item,
            url=product_url(item.product_id, window=window, metric=metric),
            row_id=row_id(item.product_id),
            highlighted=item.product_id == highlight,
            move=move_of(item, window, known=known),
        )
        for item in items
    ]


def _links(number: int, pages: Paginator, link) -> dict:
    """Where page `number` of `pages` stands, and the links to the pages beside it; the last page is
    the last within MAX_DEPTH rows, however long the list."""
    last = min(pages.num_pages, MAX_DEPTH // pages.per_page)
    return {
        "number": number,
        "last": last,
        "previous": link(number - 1) if number > 1 else None,
        "next": link(number + 1) if number < last else None,
    }


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
    counted = shown.total is not None and shown.total <= MAX_DEPTH
    return {
        "number": number,
        "last": math.ceil(shown.total / HOME_CATEGORIES) if counted else None,
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
    after = _cursor(request)
    number = None if after else _page_number(request, size=HOME_CATEGORIES)
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
            "items": _ranked(board.items, window=window, metric=metric, known=board.then is not None),
        }

    return render(
        request,
        "rankings/home.html",
        {
            "window_label": WINDOW_LABELS.get(window, window),
            "overall": card(ALL, selectors.category_name(ALL), overall),
            "categories": [card(slug, name, boards[slug]) for slug, name in shown.items],
            "pages": _home_links(number, shown),
            "freshness": _freshness(overall, *boards.values()),
        },
    )


@page_view
def category(request, slug):
    """A category's best sellers, PAGE_SIZE to a page, for one window and metric."""
    window, metric = _board_params(request)
    page = _page_number(request)
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
    links = _links(
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
            "switches": _switches(lambda w, m: category_url(slug, window=w, metric=m), window, metric),
            "items": _ranked(
                board.items, window=window, metric=metric, highlight=highlight, known=board.then is not None
            ),
            "total": board.total,
            "pages": {
                **links,
                "first_rank": (page - 1) * PAGE_SIZE + 1,
                "last_rank": (page - 1) * PAGE_SIZE + len(board.items),
            },
            "freshness": _freshness(board),
        },
    )


def _crumbs(slug: str, *, window: str, metric: str) -> list[dict]:
    """The category's ancestors (root first), in the tree the boards count with."""
    above = selectors.categories_tree().path(slug)[:-1]
    names = selectors.categories_names(above)
    return [{"name": names.get(s, s), "url": category_url(s, window=window, metric=metric)} for s in above]


def _children_url(slug: str, window: str, metric: str, after: str | None = None) -> str:
    return reverse("subcategories", args=[slug]) + _query(window, metric, after=after)


def _subcategories(children: selectors.CategoriesPage, *, window: str, metric: str) -> tuple[list, list]:
    """The categories of `children`, each with its leader (one pipelined read), and the boards read."""
    if not children.items:
        return [], []
    boards = selectors.boards_top_many(limits={c: 1 for c, _ in children.items}, window=window, metric=metric)
    rows = [
        {
            "name": child_name,
            "url": category_url(child, window=window, metric=metric),
            "leader": (
                _ranked(
                    boards[child].items, window=window, metric=metric, known=boards[child].then is not None
                )
                or [None]
            )[0],
        }
        for child, child_name in children.items
    ]
    return rows, list(boards.values())


@page_view
def subcategories(request, slug):
    """The categories right under a category, by name, CHILDREN_PAGE to a page, each with its leader."""
    window, metric = _board_params(request)
    after = _cursor(request)
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
            "freshness": _freshness(*boards),
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
        "items": _ranked(found.items, window=window, metric=metric, highlight=product_id),
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
        ranked = [r for r in (overall, *ranks.ranks) if r.rank]
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


def _rank_charts(product_id: str, ranked, names: dict, window: str, metric: str) -> list[dict]:
    from rankings.serving.moves_pages import rank_charts

    return rank_charts(product_id, ranked, names, window, metric)


@page_view
def product(request, product_id):
    """A product's name and price, its rank in each of its categories, its neighbours and daily sales."""
    window, metric = _board_params(request)
    detail = selectors.product_detail(product_id=product_id)
    overall, ranks = _product_ranks(product_id, window, metric)
    names = selectors.categories_names([ALL, *(r.category for r in ranks.ranks)])
    ranked = [r for r in (overall, *ranks.ranks) if r.rank]
    nearby, neighbors = _nearby(product_id, ranked, names, window, metric)
    freshness = _freshness(detail, overall, ranks, *([neighbors] if neighbors else []))
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
            "switches": _switches(lambda w, m: product_url(product_id, window=w, metric=m), window, metric),
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
            "rank_charts": _rank_charts(product_id, ranked, names, window, metric),
            "freshness": freshness,
        },
    )

"""Server-rendered pages: each category's best sellers and a product's ranks; they call selectors only."""

import datetime as dt
import functools
import math
import re
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.db import DatabaseError
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import get_conditional_response, patch_cache_control, set_response_etag

from catalogue.models import PRODUCT_ID_PATTERN
from rankings.conf import METRICS, rankings_settings
from rankings.engine.shards import ALL
from rankings.serving import selectors
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
# Products shown on either side of a product on its page.
NEIGHBOURS = 2
CHART_DAYS = 30
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
METRIC_LABELS = {"units": "Units sold", "revenue": "Revenue"}


class BadRequest(ValueError):
    """A query parameter a page cannot take: answered with the 400 page."""


def page_view(view):
    """Bad parameters become the 400 page, unknown names the 404 page, no rankings at all (or no
    database where one is needed) the 503 page, and an address past its rate the 429 page.

    A page carries Cache-Control and an ETag, and If-None-Match is answered with 304.
    """

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        throttle = PageThrottle()
        if not throttle.allow_request(request, None):
            response = render(request, "429.html", status=429)
            response["Retry-After"] = str(max(1, math.ceil(throttle.wait() or 1)))
            return response
        try:
            response = view(request, *args, **kwargs)
        except BadRequest as bad:
            return render(request, "400.html", {"message": str(bad)}, status=400)
        except selectors.NotFound as missing:
            return render(request, "404.html", {"message": str(missing)}, status=404)
        except (selectors.Unavailable, DatabaseError):
            response = render(request, "503.html", status=503)
            response["Retry-After"] = str(RETRY_AFTER)
            return response
        patch_cache_control(response, max_age=MAX_AGE, public=True)
        set_response_etag(response)
        return get_conditional_response(request, etag=response["ETag"], response=response)

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


def _page_number(request) -> int:
    raw = request.GET.get("page", "1")
    if not re.fullmatch(r"[1-9][0-9]*", raw):
        raise BadRequest(f"page must be a whole number from 1, not “{_shown(raw)}”.")
    if len(raw) > PAGE_DIGITS:
        raise selectors.NotFound(f"page {_shown(raw)} is past the end of the list.")
    return int(raw)


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


def _instant(iso: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(iso) if iso else None


def age_text(asof: dt.datetime | None, now: dt.datetime) -> str | None:
    """ "3 s ago", "4 min ago", "2 h ago", "3 d ago"; "just now" for under a second (or a clock ahead)."""
    if asof is None:
        return None
    seconds = int((now - asof).total_seconds())
    if seconds < 1:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def _freshness(*results: dict) -> dict:
    """When the answer was exact, and whether it is a last known answer served while Redis is away."""
    instants = [_instant(r.get("asOf")) for r in results if r.get("asOf")]
    asof = min(instants) if instants else None
    return {
        "as_of": asof,
        "age": age_text(asof, timezone.now()),
        "stale": any(r.get("stale") for r in results),
    }


def _ranked(items: list[dict], *, window: str, metric: str, highlight: str | None = None) -> list[dict]:
    return [
        {
            **item,
            "url": product_url(item["productId"], window=window, metric=metric),
            "row_id": row_id(item["productId"]),
            "highlighted": item["productId"] == highlight,
        }
        for item in items
    ]


# --- pages --------------------------------------------------------------------------


@page_view
def home(request):
    """The overall leaders and the first three of each category, HOME_CATEGORIES to a page, over 7 days by units."""
    window, metric = DEFAULT_WINDOW, DEFAULT_METRIC
    number = _page_number(request)
    pages = Paginator(selectors.categories_real(), HOME_CATEGORIES, allow_empty_first_page=True)
    if number > pages.num_pages:
        raise selectors.NotFound(f"page {number} is past the end of the categories.")
    shown = pages.page(number)
    limits = {ALL: HOME_OVERALL} | {slug: HOME_PER_CATEGORY for slug, _ in shown}
    boards = selectors.boards_top_many(limits=limits, window=window, metric=metric)
    overall = boards.pop(ALL)
    categories = [
        {
            "slug": slug,
            "name": name,
            "url": category_url(slug, window=window, metric=metric),
            "total": boards[slug]["total"],
            "items": _ranked(boards[slug]["items"], window=window, metric=metric),
        }
        for slug, name in shown
    ]

    def link(p):
        return reverse("home") + (f"?page={p}" if p > 1 else "")

    return render(
        request,
        "rankings/home.html",
        {
            "window_label": WINDOW_LABELS.get(window, window),
            "overall": {
                "name": selectors.category_name(ALL),
                "url": category_url(ALL, window=window, metric=metric),
                "total": overall["total"],
                "items": _ranked(overall["items"], window=window, metric=metric),
            },
            "categories": categories,
            "pages": {
                "number": number,
                "last": pages.num_pages,
                "previous": link(number - 1) if shown.has_previous() else None,
                "next": link(number + 1) if shown.has_next() else None,
            },
            "freshness": _freshness(overall, *boards.values()),
        },
    )


@page_view
def category(request, slug):
    """A category's best sellers, PAGE_SIZE to a page, for one window and metric."""
    window, metric = _board_params(request)
    page = _page_number(request)
    highlight = request.GET.get("highlight") or None
    name = selectors.category_name(slug)
    board = selectors.board_top(
        category=slug, window=window, metric=metric, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE
    )
    last_page = max(1, math.ceil(board["total"] / PAGE_SIZE))
    if page > last_page:
        raise selectors.NotFound(
            f"page {page} is past the end of {name}: the list has {last_page} page{'s' * (last_page > 1)}."
        )

    def link(p):
        return category_url(slug, window=window, metric=metric, page=p if p > 1 else None)

    return render(
        request,
        "rankings/category.html",
        {
            "category": {"slug": slug, "name": name},
            "window": window,
            "metric": metric,
            "window_label": WINDOW_LABELS.get(window, window),
            "metric_label": METRIC_LABELS.get(metric, metric),
            "switches": _switches(lambda w, m: category_url(slug, window=w, metric=m), window, metric),
            "items": _ranked(board["items"], window=window, metric=metric, highlight=highlight),
            "total": board["total"],
            "pages": {
                "number": page,
                "last": last_page,
                "previous": link(page - 1) if page > 1 else None,
                "next": link(page + 1) if page < last_page else None,
                "first_rank": (page - 1) * PAGE_SIZE + 1,
                "last_rank": (page - 1) * PAGE_SIZE + len(board["items"]),
            },
            "freshness": _freshness(board),
        },
    )


def _percent(percentile: float | None) -> str | None:
    """A share rounded up, so it never flatters: rank 12 of 500 (2.4%) is "top 3%"."""
    if percentile is None:
        return None
    if percentile < 1:
        return f"{max(0.1, math.ceil(percentile * 10) / 10):g}%"
    return f"{math.ceil(percentile)}%"


def _badge(rank: dict, name: str, *, product_id: str, window: str, metric: str) -> dict:
    return {
        "category": rank["category"],
        "name": name,
        "rank": rank["rank"],
        "total": rank["total"],
        "top": (
            _percent(rank["percentile"])
            if rank["rank"] > PERCENTILE_AFTER_RANK and rank["percentile"] <= PERCENTILE_UP_TO
            else None
        ),
        "url": category_url(
            rank["category"], window=window, metric=metric, page=page_of(rank["rank"]), highlight=product_id
        ),
    }


def _svg(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def chart(days: list[dict]) -> dict:
    """Bar geometry for the daily units chart, in the SVG's own units (a 300×100 box).

    Coordinates are strings, so that no locale setting can put a comma in them.
    """
    width, height = 300, 100
    room = 0.92  # of the height for the tallest bar, so it does not touch the edge
    peak = max((d["units"] for d in days), default=0)
    step = width / len(days) if days else width
    bars = []
    for i, d in enumerate(days):
        units = max(d["units"], 0)
        h = height * room * units / peak if peak else 0
        bars.append(
            {
                "date": d["date"],
                "units": d["units"],
                "x": _svg(i * step + step * 0.1),
                "y": _svg(height - h),
                "width": _svg(step * 0.8),
                "height": _svg(h),
            }
        )
    total = sum(d["units"] for d in days)
    best = max(days, key=lambda d: d["units"]) if days else None
    return {
        "width": width,
        "height": height,
        "bars": bars,
        "peak": peak,
        "total": total,
        "best": best if peak else None,
        "first": days[0]["date"] if days else None,
        "last": days[-1]["date"] if days else None,
    }


@page_view
def product(request, product_id):
    """A product's name and price, its rank in each of its categories, its neighbours and daily sales."""
    if not re.fullmatch(PRODUCT_ID_PATTERN, product_id):
        raise selectors.NotFound("no product has that id.")
    window, metric = _board_params(request)
    detail = selectors.product_detail(product_id=product_id)
    overall = selectors.product_rank(product_id=product_id, category=ALL, window=window, metric=metric)
    try:
        ranks = selectors.product_ranks(product_id=product_id, window=window, metric=metric)
    except selectors.Unavailable:
        # Its categories are unknown while the catalogue is away: the overall rank still shows.
        ranks = {"ranks": [], "asOf": None, "stale": True}
    names = selectors.categories_map()

    every = [overall] + ranks["ranks"]
    ranked = [r for r in every if r["rank"]]
    badges = [
        _badge(
            r, names.get(r["category"], r["category"]), product_id=product_id, window=window, metric=metric
        )
        for r in ranked
    ]
    unranked = [names.get(r["category"], r["category"]) for r in ranks["ranks"] if not r["rank"]]

    # Neighbours where the product stands highest among its own categories
    # (the overall board only when it ranks in none of them).
    nearby = None
    if ranked:
        best = min(ranked, key=lambda r: (r["category"] == ALL, r["percentile"], r["category"]))
        found = selectors.product_neighbors(
            product_id=product_id, category=best["category"], window=window, metric=metric, n=NEIGHBOURS
        )
        nearby = {
            "name": names.get(best["category"], best["category"]),
            "url": category_url(
                best["category"],
                window=window,
                metric=metric,
                page=page_of(best["rank"]),
                highlight=product_id,
            ),
            "items": _ranked(found["items"], window=window, metric=metric, highlight=product_id),
        }

    freshness = _freshness(detail, overall, ranks, *([found] if nearby else []))
    daily = selectors.product_daily_units(
        product_id=product_id, days=CHART_DAYS, now=freshness["as_of"] or timezone.now()
    )
    freshness["stale"] = freshness["stale"] or daily["stale"]
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
            "badges": badges,
            "unranked": unranked,
            "nearby": nearby,
            "chart": chart(daily["days"]),
            "freshness": freshness,
        },
    )

"""What every page shares: its parameters, links, freshness, rows and error pages."""

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

from rankings.conf import MAX_DEPTH, METRICS, rankings_settings
from rankings.serving import selectors
from rankings.serving.paths import CategorySlug
from rankings.serving.rank_then import move_of
from rankings.serving.throttling import PageThrottle

# Rows per page of a category's best sellers.
PAGE_SIZE = 50
DEFAULT_WINDOW = "7d"
DEFAULT_METRIC = "units"
# The daily chart's box, in the SVG's own units: the page stretches it to its width.
CHART_WIDTH, CHART_HEIGHT = 300, 100
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


def shown_value(value: str) -> str:
    return value if len(value) <= 40 else value[:40] + "…"


def choice_param(request, name: str, choices, default: str) -> str:
    value = request.GET.get(name, default)
    if value not in choices:
        raise BadRequest(f"{name} must be one of {', '.join(choices)}, not “{shown_value(value)}”.")
    return value


def board_params(request) -> tuple[str, str]:
    window = choice_param(request, "window", list(rankings_settings.WINDOWS), DEFAULT_WINDOW)
    metric = choice_param(request, "metric", METRICS, DEFAULT_METRIC)
    return window, metric


def page_number(request, *, size: int = PAGE_SIZE) -> int:
    """The page asked for, of `size` rows each: a 404 past the end of any list (MAX_DEPTH rows)
    before anything is read."""
    raw = request.GET.get("page", "1")
    if not re.fullmatch(r"[1-9][0-9]*", raw):
        raise BadRequest(f"page must be a whole number from 1, not “{shown_value(raw)}”.")
    if len(raw) > PAGE_DIGITS or int(raw) * size > MAX_DEPTH:
        raise selectors.NotFound(
            f"page {shown_value(raw)} is past the end of the list: lists are shown to their {MAX_DEPTH:,}th row."
        )
    return int(raw)


def cursor_param(request) -> str | None:
    """The category a page of categories follows (?after=), never given with a page number."""
    after = request.GET.get("after")
    if after is None:
        return None
    if "page" in request.GET:
        raise BadRequest("give page or after, not both.")
    if not re.fullmatch(CategorySlug.regex, after):
        raise selectors.NotFound("no category has that slug.")
    return after


def query_string(window: str, metric: str, **extra) -> str:
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
    url = reverse("category", args=[slug]) + query_string(window, metric, page=page, highlight=highlight)
    return url + f"#{row_id(highlight)}" if highlight else url


def product_url(product_id: str, *, window: str = DEFAULT_WINDOW, metric: str = DEFAULT_METRIC) -> str:
    return reverse("product", args=[product_id]) + query_string(window, metric)


def row_id(product_id: str) -> str:
    return f"product-{product_id}"


def page_of(rank: int) -> int:
    return (rank - 1) // PAGE_SIZE + 1


def switch_links(make_url, window: str, metric: str) -> dict:
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


def freshness_of(*answers) -> dict:
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


def ranked_rows(
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


def page_links(number: int, pages: Paginator, link) -> dict:
    """Where page `number` of `pages` stands, and the links to the pages beside it; the last page is
    the last within MAX_DEPTH rows, however long the list."""
    last = min(pages.num_pages, MAX_DEPTH // pages.per_page)
    return {
        "number": number,
        "last": last,
        "previous": link(number - 1) if number > 1 else None,
        "next": link(number + 1) if number < last else None,
    }

"""The HTTP API under /v1/: DRF views that call services (ingest) and selectors only."""

import functools
import logging
import threading

from cachetools import LRUCache
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404, JsonResponse
from django.utils.cache import patch_cache_control
from django.views import defaults
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from rankings.conf import METRICS, rankings_settings
from rankings.engine.shards import ShardCountMismatch
from rankings.ingest.events import SaleEventSerializer
from rankings.ingest.sales import sales_ingest
from rankings.operations.status import liveness_read, status_cached
from rankings.serving import selectors

logger = logging.getLogger(__name__)


def exception_handler(exc, context):
    """Every error is JSON {"error": "…"} with the status DRF chose; a 429 says when to retry."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "not found")
    elif isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge(f"request body larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes")
    elif isinstance(exc, DatabaseError):
        # PostgreSQL is away where a read could not do without it (a token to
        # look up, a batch to store): a retryable 503, never a 500.
        logger.warning("database unavailable: %s", exc)
        exc = ServiceUnavailable("the database is unavailable right now; try again shortly")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.Throttled):
        response["Retry-After"] = str(max(1, exc.wait or 0))
    detail = response.data
    if isinstance(detail, dict) and "detail" in detail:
        message = str(detail["detail"])
    elif isinstance(detail, dict) and "error" in detail:
        return response
    else:
        from rankings.ingest.events import first_error

        message = first_error(detail)
    response.data = {"error": message}
    return response


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "too many events in one batch"


class CanAddSales(BasePermission):
    def has_permission(self, request, view):
        return bool(request.user and request.user.has_perm("rankings.add_sale"))


_IngestReply = inline_serializer(
    "IngestReply",
    {
        "accepted": serializers.IntegerField(),
        "duplicates": serializers.IntegerField(),
        "rejected": inline_serializer(
            "Rejection",
            {
                "index": serializers.IntegerField(),
                "id": serializers.CharField(allow_null=True),
                "error": serializers.CharField(),
            },
            many=True,
        ),
    },
)
_Error = inline_serializer("Error", {"error": serializers.CharField()})
_THROTTLED = OpenApiResponse(
    _Error, description="too many requests; the Retry-After header says when to retry"
)
# What every board read may answer besides 200, 400 and 404.
_READ_ERRORS = {
    304: OpenApiResponse(description="not modified: If-None-Match still matches the ETag"),
    429: _THROTTLED,
    503: OpenApiResponse(_Error, description="Redis is unreachable and no earlier answer is known"),
}


class SalesIngestApi(APIView):
    """Accept a batch of sale events; valid events are stored even when others are rejected."""

    permission_classes = [CanAddSales]
    throttle_scope = "ingest"

    class InputSerializer(serializers.Serializer):
        events = serializers.ListField(child=SaleEventSerializer(), max_length=5000)

    @extend_schema(
        operation_id="sales_ingest",
        request=InputSerializer,
        responses={
            200: _IngestReply,
            400: OpenApiResponse(_Error, description='body is not {"events": [...]}'),
            401: _Error,
            403: _Error,
            413: OpenApiResponse(_Error, description="more than 5,000 events, or a body over 4 MB"),
            429: _THROTTLED,
            503: OpenApiResponse(_Error, description="the service is misconfigured; nothing was stored"),
        },
    )
    def post(self, request):
        try:
            body = request.data
        except RecursionError:  # JSON nested deeper than the parser's stack
            raise exceptions.ParseError("JSON parse error - nested too deeply") from None
        if not isinstance(body, dict) or not isinstance(body.get("events"), list):
            raise exceptions.ValidationError({"error": 'body must be {"events": [ ... ]}'})
        events = body["events"]
        limit = rankings_settings.MAX_BATCH_EVENTS
        if len(events) > limit:
            raise PayloadTooLarge(f"at most {limit} events per batch; this one has {len(events)}")
        try:
            result = sales_ingest(events=events, source="api")
        except ShardCountMismatch as error:  # an operator's mistake: nothing stored, the client retries
            raise ServiceUnavailable(str(error)) from error
        return Response(result.as_dict())


# --- the read path ------------------------------------------------------------------

MAX_DEPTH = 10_000


def _board_params(**extra):
    fields = {
        "window": serializers.ChoiceField(choices=list(rankings_settings.WINDOWS), default="7d"),
        "metric": serializers.ChoiceField(choices=list(METRICS), default="units"),
        **extra,
    }
    return type("BoardParams", (serializers.Serializer,), fields)


# Validated query strings, per parameter class: a hot board is asked the same
# question thousands of times a second, and building a serializer costs more
# than answering from memory.
_valid_params: LRUCache = LRUCache(maxsize=10_000)
_valid_params_lock = threading.Lock()


def _params(serializer_class, request) -> dict:
    key = (serializer_class, request.META.get("QUERY_STRING", ""))
    with _valid_params_lock:
        cached = _valid_params.get(key)
    if cached is not None:
        return cached
    serializer = serializer_class(data=request.query_params)
    # DRF takes `?limit=` for "left out" and would apply the default; a parameter given
    # with no value is a client's mistake, said as such.
    empty = sorted(name for name in serializer.fields if request.query_params.get(name) == "")
    if empty:
        raise exceptions.ValidationError({empty[0]: f"{empty[0]} may not be empty"})
    serializer.is_valid(raise_exception=True)
    params = dict(serializer.validated_data)
    with _valid_params_lock:
        _valid_params[key] = params
    return params


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "rankings are unavailable right now; try again shortly"


# Readers may reuse an answer this long; a tick every 2 s makes anything longer pointless.
READ_MAX_AGE = 2  # seconds


def _selected(call, **kwargs) -> Response:
    """Run a selector; errors become 404/503 JSON, a stale answer carries a Warning header."""
    try:
        body = call(**kwargs)
    except selectors.NotFound as missing:
        raise exceptions.NotFound(str(missing)) from missing
    except selectors.Unavailable as down:
        raise ServiceUnavailable(str(down)) from down
    response = Response(body)
    patch_cache_control(response, max_age=READ_MAX_AGE, public=True)
    if body.get("stale"):
        response["Warning"] = '110 - "Response is Stale"'
    return response


class CategoryListParams(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=100)
    offset = serializers.IntegerField(min_value=0, max_value=2**31 - 1, default=0)


class CategoryListApi(APIView):
    """The categories, `limit` from `offset`, with `all` (the board of every sale) first."""

    throttle_scope = "reads"

    @extend_schema(
        operation_id="categories_list",
        parameters=[CategoryListParams],
        responses={
            200: inline_serializer(
                "CategoryList",
                {
                    "total": serializers.IntegerField(),
                    "items": inline_serializer(
                        "CategoryItem",
                        {
                            "slug": serializers.CharField(),
                            "name": serializers.CharField(),
                            "url": serializers.URLField(),
                        },
                        many=True,
                    ),
                },
            ),
            304: _READ_ERRORS[304],
            400: _Error,
            429: _THROTTLED,
        },
    )
    def get(self, request):
        page = selectors.categories_page(**_params(CategoryListParams, request))
        items = [
            {"slug": slug, "name": name, "url": request.build_absolute_uri(f"/v1/categories/{slug}/top")}
            for slug, name in page["items"]
        ]
        return Response({"total": page["total"], "items": items})


class TopParams(_board_params()):
    limit = serializers.IntegerField(min_value=1, max_value=100, default=50)
    offset = serializers.IntegerField(min_value=0, max_value=MAX_DEPTH - 1, default=0)

    def validate(self, attrs):
        if attrs["offset"] + attrs["limit"] > MAX_DEPTH:
            raise serializers.ValidationError(f"offset + limit may be at most {MAX_DEPTH}")
        return attrs


@functools.cache  # one component: two of the same name would make the schema ambiguous
def _items_schema():
    return inline_serializer(
        "RankedItem",
        {
            "rank": serializers.IntegerField(),
            "productId": serializers.CharField(),
            "name": serializers.CharField(),
            "units": serializers.IntegerField(),
            "revenue": serializers.CharField(),
        },
        many=True,
    )


_BOARD = {
    "window": serializers.CharField(),
    "metric": serializers.CharField(),
    "asOf": serializers.DateTimeField(allow_null=True),
    "stale": serializers.BooleanField(
        help_text="true when Redis is unreachable and this is the last known answer"
    ),
}


class BoardTopApi(APIView):
    """The best sellers of a category: ranks offset+1 … offset+limit."""

    throttle_scope = "reads"

    @extend_schema(
        operation_id="board_top",
        parameters=[TopParams],
        responses={
            200: inline_serializer(
                "BoardTop",
                {
                    "category": serializers.CharField(),
                    **_BOARD,
                    "total": serializers.IntegerField(),
                    "items": _items_schema(),
                },
            ),
            400: _Error,
            404: _Error,
            **_READ_ERRORS,
        },
    )
    def get(self, request, slug):
        return _selected(selectors.board_top, category=slug, **_params(TopParams, request))


class RankParams(_board_params(category=serializers.SlugField(max_length=50))):
    pass


class ProductRankApi(APIView):
    """A product's rank on one board; rank is null when it has no sales there."""

    throttle_scope = "reads"

    @extend_schema(
        operation_id="product_rank",
        parameters=[RankParams],
        responses={
            200: inline_serializer(
                "ProductRank",
                {
                    "productId": serializers.CharField(),
                    "category": serializers.CharField(),
                    **_BOARD,
                    "rank": serializers.IntegerField(allow_null=True),
                    "units": serializers.IntegerField(),
                    "revenue": serializers.CharField(),
                    "total": serializers.IntegerField(),
                    "percentile": serializers.FloatField(allow_null=True),
                },
            ),
            400: _Error,
            404: _Error,
            **_READ_ERRORS,
        },
    )
    def get(self, request, product_id):
        return _selected(selectors.product_rank, product_id=product_id, **_params(RankParams, request))


class RanksParams(_board_params()):
    pass


class ProductRanksApi(APIView):
    """A product's rank in each of its categories."""

    throttle_scope = "reads"

    @extend_schema(
        operation_id="product_ranks",
        parameters=[RanksParams],
        responses={
            200: inline_serializer(
                "ProductRanks",
                {
                    "productId": serializers.CharField(),
                    **_BOARD,
                    "ranks": inline_serializer(
                        "CategoryRank",
                        {
                            "category": serializers.CharField(),
                            "rank": serializers.IntegerField(allow_null=True),
                            "units": serializers.IntegerField(),
                            "revenue": serializers.CharField(),
                            "total": serializers.IntegerField(),
                            "percentile": serializers.FloatField(allow_null=True),
                        },
                        many=True,
                    ),
                },
            ),
            400: _Error,
            404: _Error,
            **_READ_ERRORS,
        },
    )
    def get(self, request, product_id):
        return _selected(selectors.product_ranks, product_id=product_id, **_params(RanksParams, request))


class NeighborParams(_board_params(category=serializers.SlugField(max_length=50))):
    n = serializers.IntegerField(min_value=1, max_value=50, default=5)


class ProductNeighborsApi(APIView):
    """The n products ranked just above and just below a product (and the product itself)."""

    throttle_scope = "reads"

    @extend_schema(
        operation_id="product_neighbors",
        parameters=[NeighborParams],
        responses={
            200: inline_serializer(
                "ProductNeighbors",
                {
                    "productId": serializers.CharField(),
                    "category": serializers.CharField(),
                    **_BOARD,
                    "rank": serializers.IntegerField(allow_null=True),
                    "items": _items_schema(),
                },
            ),
            400: _Error,
            404: _Error,
            **_READ_ERRORS,
        },
    )
    def get(self, request, product_id):
        return _selected(
            selectors.product_neighbors, product_id=product_id, **_params(NeighborParams, request)
        )


class StatusApi(APIView):
    """Whether the boards are live; the operator's figures for a holder of rankings.view_status."""

    throttle_scope = "reads"

    @extend_schema(
        operation_id="status",
        responses={
            200: OpenApiResponse(
                inline_serializer(
                    "Status",
                    {
                        "status": serializers.ChoiceField(choices=["ok", "stale", "down"]),
                        "asOf": serializers.DateTimeField(allow_null=True),
                    },
                ),
                description=(
                    "ok: the boards were brought up to date moments ago; stale: not for a minute or more "
                    "(the ticks stopped); down: Redis does not answer. A token or staff session with the "
                    "permission rankings.view_status also gets the backlog, lag, last tick, ingest rate "
                    "and totals, and the boards per window."
                ),
            ),
            304: _READ_ERRORS[304],
            429: _THROTTLED,
        },
    )
    def get(self, request):
        body = liveness_read()
        user = request.user
        if user is not None and user.has_perm("rankings.view_status"):
            body = {**body, **status_cached()}
        return Response(body)


def not_found(request, exception):
    """A URL no route matches: JSON under /v1/, the site's page elsewhere."""
    if request.path.startswith("/v1/"):
        return JsonResponse({"error": "no such endpoint or resource"}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    if request.path.startswith("/v1/"):
        return JsonResponse({"error": "internal error"}, status=500)
    return defaults.server_error(request)

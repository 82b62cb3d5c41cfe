"""The HTTP API under /v1/: DRF views that call services (ingest) and selectors only."""

import datetime as dt
import functools
import io
import logging
import re
import threading
from decimal import Decimal
from typing import ClassVar

import msgspec
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404, HttpResponse, JsonResponse
from django.views import defaults
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import exceptions, serializers, status
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import JSONParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from catalogue.money import cents_text, to_cents
from rankings.conf import MAX_DEPTH, METRICS, rankings_settings
from rankings.engine.shards import ShardCountMismatch
from rankings.ingest.batch import collector_paused
from rankings.ingest.events import SaleEventSerializer, json_decoded
from rankings.ingest.sales import sales_ingest
from rankings.operations.status import liveness_read
from rankings.serving import memory, selectors
from rankings.serving.authentication import holds
from rankings.serving.dashboard import status_cached
from rankings.serving.memory import WeighedLRU
from rankings.serving.thresholds import Thresholds, board_thresholds
from rankings.serving.throttling import has_credentials

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


class CanIngest(BasePermission):
    """The permission a batch's view names (`BatchApi.permission`)."""

    def has_permission(self, request, view):
        return holds(request, view.permission)


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


class EventBatchField(serializers.ListField):
    """The items of a batch, for the schema: a list of at most `limit` items, each of which the
    service validates on its own, so that a bad item rejects only itself."""

    def __init__(self, *, child: serializers.Serializer, limit: int, **kwargs):
        super().__init__(child=child, max_length=limit, **kwargs)


class IngestRequest(serializers.Serializer):
    events = EventBatchField(child=SaleEventSerializer(), limit=rankings_settings.MAX_BATCH_EVENTS)

    class Meta:
        ref_name = "SalesIngestInput"


class _BatchParser(JSONParser):
    """JSON of a batch, read by the compiled decoder; what it refuses, DRF's parser reads as before,
    so the events and every parse error stay what they were."""

    def parse(self, stream, media_type=None, parser_context=None):
        data = stream.read()
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        slow = functools.partial(super().parse, io.BytesIO(data), media_type, parser_context)
        if encoding.lower().replace("-", "") != "utf8":
            return slow()
        return json_decoded(data, slow)


def ingest_schema(
    *, operation_id: str, request: type, limit: int, items: str = "events", reply: object = _IngestReply
):
    """The schema of a batch's POST: `request` documents the body {items: [...]}, `limit` its
    items, `reply` what it answers."""
    return extend_schema(
        operation_id=operation_id,
        request=request,
        responses={
            200: reply,
            400: OpenApiResponse(_Error, description=f'body is not {{"{items}": [...]}}'),
            401: _Error,
            403: _Error,
            413: OpenApiResponse(
                _Error,
                description=f"more than {limit:,} {items}, or a body over "
                f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 2**20} MB",
            ),
            429: _THROTTLED,
            503: OpenApiResponse(_Error, description="nothing was stored; send the batch again shortly"),
        },
    )


class BatchApi(APIView):
    """A batch POSTed as {items: [...]} by a token holder with a permission: the body's shape and
    size are checked here, each item by the service a subclass calls (`take`).

    A subclass names the permission, the body's key (`items`) and the most items a batch may hold."""

    permission_classes = [CanIngest]
    parser_classes = [_BatchParser]
    throttle_scope = "ingest"
    permission: str
    items = "events"

    def most(self) -> int:
        raise NotImplementedError

    def take(self, items: list) -> dict:
        """The reply to a batch of at most most() items."""
        raise NotImplementedError

    def post(self, request):
        # From the parse on: a batch's items are objects that all live until the reply.
        with collector_paused():
            return Response(self.take(self._items(request)))

    def _items(self, request) -> list:
        try:
            body = request.data
        except RecursionError:  # JSON nested deeper than the parser's stack
            raise exceptions.ParseError("JSON parse error - nested too deeply") from None
        # Taken out of the parsed body, which the request keeps until it ends: the items then go when
        # the reply is made, before the collector runs again (collector_paused), not after it. A plain
        # dict only: an empty body of any type is read as an empty form, whose QueryDict cannot change.
        items = body.pop(self.items, None) if type(body) is dict else None
        if not isinstance(items, list):
            raise exceptions.ValidationError({"error": f'body must be {{"{self.items}": [ ... ]}}'})
        most = self.most()
        if len(items) > most:
            raise PayloadTooLarge(f"at most {most} {self.items} per batch; this one has {len(items)}")
        return items


class BatchIngestApi(BatchApi):
    """Accept a batch of events; valid events are stored even when others are rejected.

    A subclass names the permission, the ingest service, the log's source and
    the setting that bounds a batch."""

    source: str
    limit_setting: str
    ingest: staticmethod

    def most(self) -> int:
        return getattr(rankings_settings, self.limit_setting)  # read now: a test or an operator may change it

    def take(self, items: list) -> dict:
        try:
            result = self.ingest(events=items, source=self.source)
        except ShardCountMismatch as error:  # an operator's mistake: nothing stored, the client retries
            raise ServiceUnavailable(str(error)) from error
        return result.as_dict()


@extend_schema_view(
    post=ingest_schema(
        operation_id="sales_ingest", request=IngestRequest, limit=rankings_settings.MAX_BATCH_EVENTS
    )
)
class SalesIngestApi(BatchIngestApi):
    """Accept a batch of sale events; valid events are stored even when others are rejected."""

    permission = "rankings.add_sale"
    source = "api"
    limit_setting = "MAX_BATCH_EVENTS"
    ingest = staticmethod(sales_ingest)


# --- the read path ------------------------------------------------------------------


class BoardParams(serializers.Serializer):
    """Parameters of a read of a board: its window and metric."""

    window = serializers.ChoiceField(choices=list(rankings_settings.WINDOWS), default="7d")
    metric = serializers.ChoiceField(choices=list(METRICS), default="units")


# Validated query strings, per parameter class: a hot board is asked the same
# question thousands of times a second, and building a serializer costs more
# than answering from memory. Bounded in bytes: the key holds the query string as sent.
_valid_params = WeighedLRU(
    name=f"{__name__}._valid_params", kind="process", maxsize=8 * 2**20
)  # bytes: about 10,000 query strings
_valid_params_lock = threading.Lock()


_INTEGER = re.compile(r"-?[0-9]+")


def _params(serializer_class, request) -> dict:
    key = (serializer_class, request.META.get("QUERY_STRING", ""))
    with _valid_params_lock:
        cached = _valid_params.get(key)
    if cached is not None:
        return cached
    serializer = serializer_class(data=request.GET)
    # DRF takes `?limit=` for "left out" and would apply the default; a parameter given
    # with no value is a client's mistake, said as such.
    empty = sorted(name for name in serializer.fields if request.GET.get(name) == "")
    if empty:
        raise exceptions.ValidationError({empty[0]: f"{empty[0]} may not be empty"})
    # DRF's IntegerField also takes `1.0` and ` 1`, which the schema's integer does not: only digits.
    for name, field in serializer.fields.items():
        given = request.GET.get(name)
        if (
            given is not None
            and isinstance(field, serializers.IntegerField)
            and not _INTEGER.fullmatch(given)
        ):
            raise exceptions.ValidationError({name: field.error_messages["invalid"]})
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
# Written as is on every read, which sets no other directive (patch_cache_control would parse it again each time).
_READ_CACHE_CONTROL = f"max-age={READ_MAX_AGE}, public"


# --- replies: one serializer per reply, for the schema and the response alike ---------------


@functools.lru_cache(maxsize=1024)  # the same few instants, between two ticks, for every read
def iso_text(value: dt.datetime | None) -> str | None:
    """An instant as the API writes it: ISO 8601 in UTC with a Z, to the second."""
    return value.isoformat().replace("+00:00", "Z") if value else None


# 1,024 instants and their 20-character texts: under 512 bytes each with what the cache keeps beside.
memory.keep(f"{__name__}.iso_text", iso_text.cache_clear, kind="process", bytes=1024 * 512, cache=iso_text)


def money_text(value: Decimal) -> str:
    return cents_text(to_cents(value))


class _Reply(serializers.Serializer):
    """A reply whose fields declare its shape for the schema, and whose `wire` writes it.

    A read is answered thousands of times a second: DRF's per-field machinery
    (a field object's to_representation per value) costs more than the whole
    read, so the reply is written by one plain function of the typed answer,
    and the schema tests check that its keys and types are the fields'.
    """

    @staticmethod
    def wire(answer, /) -> dict:
        raise NotImplementedError

    def to_representation(self, instance):
        return self.wire(instance)


def _item_wire(item: selectors.RankedProduct) -> dict:
    wire = {
        "rank": item.rank,
        "productId": item.product_id,
        "name": item.name,
        "units": item.units,
        "revenue": money_text(item.revenue),
        "rankThen": item.rank_then,
    }
    if item.views is not None:  # an engagement board: its views and wishes beside its sales
        wire["views"] = item.views
        wire["wishes"] = item.wishes
    return wire


class RankedItemReply(_Reply):
    rank = serializers.IntegerField()
    productId = serializers.CharField()  # noqa: N815 - the wire's own name
    name = serializers.CharField()
    units = serializers.IntegerField()
    revenue = serializers.CharField(help_text="money, two decimal places")
    views = serializers.IntegerField(required=False, help_text="metric views or wishes only")
    wishes = serializers.IntegerField(required=False, help_text="metric views or wishes only")
    rankThen = serializers.IntegerField(  # noqa: N815 - the wire's own name
        allow_null=True,
        help_text="its rank in the snapshot 24 hours before the latest at or before asOf (windows 1d and 7d); "
        "null when it was not in that snapshot's first ranks, or none is known",
    )

    wire = staticmethod(_item_wire)

    class Meta:
        ref_name = "RankedItem"


class _BoardAnswer(_Reply):
    """What every board reply says besides its figures: which window and metric, as of when, and
    whether this is the last known answer rather than Redis's of now."""

    window = serializers.CharField()
    metric = serializers.CharField()
    asOf = serializers.DateTimeField(allow_null=True)  # noqa: N815 - the wire's own name
    stale = serializers.BooleanField(
        help_text="true when Redis is unreachable and this is the last known answer"
    )


def _answer_wire(answer) -> dict:
    return {
        "window": answer.window,
        "metric": answer.metric,
        "asOf": iso_text(answer.as_of),
        "stale": answer.stale,
    }


class BoardTopReply(_BoardAnswer):
    category = serializers.CharField()
    total = serializers.IntegerField()
    items = RankedItemReply(many=True)

    @staticmethod
    def wire(board: selectors.Board) -> dict:
        return {
            "category": board.category,
            **_answer_wire(board),
            "total": board.total,
            "items": [_item_wire(item) for item in board.items],
        }

    class Meta:
        ref_name = "BoardTop"


class _CategoryRankFields(_Reply):
    category = serializers.CharField()
    rank = serializers.IntegerField(allow_null=True)
    units = serializers.IntegerField()
    revenue = serializers.CharField()
    total = serializers.IntegerField()
    percentile = serializers.FloatField(allow_null=True)
    views = serializers.IntegerField(required=False, help_text="metric views or wishes only")
    wishes = serializers.IntegerField(required=False, help_text="metric views or wishes only")


def _category_rank_wire(found: selectors.CategoryRank | selectors.Rank) -> dict:
    wire = {
        "category": found.category,
        "rank": found.rank,
        "units": found.units,
        "revenue": money_text(found.revenue),
        "total": found.total,
        "percentile": found.percentile,
    }
    if found.views is not None:
        wire["views"] = found.views
        wire["wishes"] = found.wishes
    return wire


class CategoryRankReply(_CategoryRankFields):
    wire = staticmethod(_category_rank_wire)

    class Meta:
        ref_name = "CategoryRank"


class ProductRankReply(_BoardAnswer, _CategoryRankFields):
    productId = serializers.CharField()  # noqa: N815

    @staticmethod
    def wire(found: selectors.Rank) -> dict:
        return {"productId": found.product_id, **_answer_wire(found), **_category_rank_wire(found)}

    class Meta:
        ref_name = "ProductRank"


class ProductRanksReply(_BoardAnswer):
    productId = serializers.CharField()  # noqa: N815
    ranks = CategoryRankReply(many=True)
    more = serializers.BooleanField(
        help_text=f"true when the product is in more categories than the first "
        f"{selectors.PRODUCT_CATEGORIES_READ} by slug that `ranks` lists"
    )

    @staticmethod
    def wire(found: selectors.Ranks) -> dict:
        return {
            "productId": found.product_id,
            **_answer_wire(found),
            "ranks": [_category_rank_wire(r) for r in found.ranks],
            "more": found.more,
        }

    class Meta:
        ref_name = "ProductRanks"


class ProductNeighborsReply(_BoardAnswer):
    productId = serializers.CharField()  # noqa: N815
    category = serializers.CharField()
    rank = serializers.IntegerField(allow_null=True)
    items = RankedItemReply(many=True)

    @staticmethod
    def wire(found: selectors.Neighbors) -> dict:
        return {
            "productId": found.product_id,
            "category": found.category,
            **_answer_wire(found),
            "rank": found.rank,
            "items": [_item_wire(item) for item in found.items],
        }

    class Meta:
        ref_name = "ProductNeighbors"


@extend_schema_field({"oneOf": [{"type": "integer"}, {"type": "string"}]})
class ScoreField(serializers.Field):
    """A board's score: units (views, wishes) as an integer, revenue as money in a string."""


def score_wire(score: int | Decimal) -> int | str:
    return money_text(score) if isinstance(score, Decimal) else score


class ThresholdReply(_Reply):
    rank = serializers.IntegerField()
    score = ScoreField()

    class Meta:
        ref_name = "Threshold"


class ScoreBucketReply(_Reply):
    min = ScoreField()
    max = ScoreField()
    count = serializers.IntegerField()

    class Meta:
        ref_name = "ScoreBucket"


class ThresholdsReply(_BoardAnswer):
    category = serializers.CharField()
    total = serializers.IntegerField()
    thresholds = ThresholdReply(many=True, help_text="the score at ranks 1, 10, 100, 1,000 and 10,000")
    buckets = ScoreBucketReply(many=True, help_text="how many products score from min to max, low to high")

    @staticmethod
    def wire(found: Thresholds) -> dict:
        return {
            "category": found.category,
            **_answer_wire(found),
            "total": found.total,
            "thresholds": [{"rank": rank, "score": score_wire(score)} for rank, score in found.thresholds],
            "buckets": [
                {"min": score_wire(low), "max": score_wire(high), "count": count}
                for low, high, count in found.buckets
            ],
        }

    class Meta:
        ref_name = "Thresholds"


# The JSON of the answers served last: a selector hands out the same answer
# object for as long as it stays fresh, so each is encoded once, not once per
# request. Keyed by identity, and holding the answer, so that an id is never reused meanwhile.
# A plain dict, emptied when it holds ENCODED_KEPT: a reader of random products makes a new
# answer on nearly every read, and an LRU's bookkeeping would cost more than encoding it.
ENCODED_KEPT = 1_000  # answers
_encoded: dict[int, tuple[object, bytes]] = {}
_encoded_lock = threading.Lock()
# A reply's wire form holds only strings, numbers, booleans and None: msgspec writes the same
# compact UTF-8 JSON as DRF's renderer, several times faster.
_json_encode = msgspec.json.Encoder().encode


def _encode(reply_class: type[_Reply], answer) -> bytes:
    known = _encoded.get(id(answer))
    if known is not None and known[0] is answer:
        return known[1]
    body = _json_encode(reply_class.wire(answer))
    with _encoded_lock:
        if len(_encoded) >= ENCODED_KEPT:
            _encoded.clear()
        _encoded[id(answer)] = (answer, body)
    return body


def _selected(reply_class: type[_Reply], call, **kwargs) -> HttpResponse:
    """Run a selector and write its reply; errors become 404/503 JSON, a stale answer carries a Warning header."""
    try:
        answer = call(**kwargs)
    except selectors.NotFound as missing:
        raise exceptions.NotFound(str(missing)) from missing
    except selectors.Unavailable as down:
        raise ServiceUnavailable(str(down)) from down
    except selectors.NotKept as refused:
        raise exceptions.ValidationError({"category": str(refused)}) from refused
    response = HttpResponse(_encode(reply_class, answer), content_type=JSONRenderer.media_type)
    response["Cache-Control"] = _READ_CACHE_CONTROL
    if answer.stale:
        response["Warning"] = '110 - "Response is Stale"'
    return response


class JsonOnly(BaseContentNegotiation):
    """The read API answers JSON whatever the Accept header says: parsing it costs a tenth of a read."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type

    def select_parser(self, request, parsers):
        return parsers[0]


class ReadApi(APIView):
    """A public read: JSON only, counted under the "reads" throttle scope.

    The caller is identified only when something asks who it is (the throttle, the status
    figures): a read that needs no identity does not pay for a session and token lookup.
    """

    throttle_scope = "reads"
    content_negotiation_class = JsonOnly

    _default_headers: ClassVar[dict]  # set on each view class by default_response_headers

    def perform_authentication(self, request):
        pass

    @property
    def default_response_headers(self) -> dict:
        """DRF's (the methods allowed), worked out once per view rather than once per read."""
        view = type(self)
        if "_default_headers" not in view.__dict__:  # each view class its own
            view._default_headers = super().default_response_headers
        return dict(view._default_headers)


class BoardReadApi(ReadApi):
    """A public read answered by a selector (_selected): its get reads only the URL and the query
    string, and anyone may ask it (AllowAny).

    An anonymous GET (neither token nor session) has nobody to authenticate and nothing to
    negotiate: it is throttled and answered from Django's own request, without the DRF request
    that costs a fifth of a read. Only an error builds that request, to be written as DRF writes
    any; every other request goes through DRF's dispatch.
    """

    def dispatch(self, request, *args, **kwargs):
        if request.method != "GET" or has_credentials(request):
            return super().dispatch(request, *args, **kwargs)
        self.args, self.kwargs, self.request = args, kwargs, request
        self.headers = self.default_response_headers
        try:
            self.check_throttles(request)
            response = self.get(request, *args, **kwargs)
        except Exception as exc:
            request = self._drf_request(request, *args, **kwargs)
            response = self.handle_exception(exc)
        self.response = self.finalize_response(request, response, *args, **kwargs)
        return self.response

    def _drf_request(self, request, *args, **kwargs):
        """The request as DRF's dispatch would have made it (negotiated, versioned): what an error is written from."""
        self.request = drf = self.initialize_request(request, *args, **kwargs)
        self.format_kwarg = self.get_format_suffix(**kwargs)
        drf.accepted_renderer, drf.accepted_media_type = self.perform_content_negotiation(drf)
        drf.version, drf.versioning_scheme = self.determine_version(drf, *args, **kwargs)
        return drf


class TopParams(BoardParams):
    limit = serializers.IntegerField(min_value=1, max_value=100, default=50)
    offset = serializers.IntegerField(min_value=0, max_value=MAX_DEPTH - 1, default=0)

    def validate(self, attrs):
        if attrs["offset"] + attrs["limit"] > MAX_DEPTH:
            raise serializers.ValidationError(f"offset + limit may be at most {MAX_DEPTH}")
        return attrs


class BoardTopApi(BoardReadApi):
    """The best sellers of a category: ranks offset+1 … offset+limit."""

    @extend_schema(
        operation_id="board_top",
        parameters=[TopParams],
        responses={200: BoardTopReply, 400: _Error, 404: _Error, **_READ_ERRORS},
    )
    def get(self, request, slug):
        return _selected(BoardTopReply, selectors.board_top, category=slug, **_params(TopParams, request))


class RankParams(BoardParams):
    category = serializers.SlugField(max_length=50)


class ProductRankApi(BoardReadApi):
    """A product's rank on one board; rank is null when it has no sales there."""

    @extend_schema(
        operation_id="product_rank",
        parameters=[RankParams],
        responses={200: ProductRankReply, 400: _Error, 404: _Error, **_READ_ERRORS},
    )
    def get(self, request, product_id):
        return _selected(
            ProductRankReply, selectors.product_rank, product_id=product_id, **_params(RankParams, request)
        )


class RanksParams(BoardParams):
    pass


class ProductRanksApi(BoardReadApi):
    """A product's rank in each of its categories."""

    @extend_schema(
        operation_id="product_ranks",
        parameters=[RanksParams],
        responses={200: ProductRanksReply, 400: _Error, 404: _Error, **_READ_ERRORS},
    )
    def get(self, request, product_id):
        return _selected(
            ProductRanksReply, selectors.product_ranks, product_id=product_id, **_params(RanksParams, request)
        )


class NeighborParams(BoardParams):
    category = serializers.SlugField(max_length=50)
    n = serializers.IntegerField(min_value=1, max_value=50, default=5)


class ProductNeighborsApi(BoardReadApi):
    """The n products ranked just above and just below a product (and the product itself)."""

    @extend_schema(
        operation_id="product_neighbors",
        parameters=[NeighborParams],
        responses={200: ProductNeighborsReply, 400: _Error, 404: _Error, **_READ_ERRORS},
    )
    def get(self, request, product_id):
        return _selected(
            ProductNeighborsReply,
            selectors.product_neighbors,
            product_id=product_id,
            **_params(NeighborParams, request),
        )


class ThresholdsApi(BoardReadApi):
    """What it takes to climb a board: the scores at ranks 1, 10, 100, 1,000 and 10,000, and a histogram."""

    @extend_schema(
        operation_id="board_thresholds",
        parameters=[RanksParams],
        responses={200: ThresholdsReply, 400: _Error, 404: _Error, **_READ_ERRORS},
    )
    def get(self, request, slug):
        return _selected(ThresholdsReply, board_thresholds, category=slug, **_params(RanksParams, request))


class StatusApi(ReadApi):
    """Whether the boards are live; the operator's figures for a holder of rankings.view_status."""

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
                    "and totals, the boards per window, and under `engagement` the same for views and "
                    "wishes with the retention (oldest day of raw events kept)."
                ),
            ),
            304: _READ_ERRORS[304],
            429: _THROTTLED,
        },
    )
    def get(self, request):
        live = liveness_read()
        body = {"status": live["status"], "asOf": iso_text(live["as_of"])}
        if holds(request, "rankings.view_status"):
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

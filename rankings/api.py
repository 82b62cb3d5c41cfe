"""The HTTP API under /v1/: DRF views that call services (ingest) and selectors only."""

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from .conf import rankings_settings
from .ingest import sales_ingest
from .serializers import SaleEventSerializer


def exception_handler(exc, context):
    """Every error is JSON {"error": "…"} with the status DRF chose."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "not found")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    if isinstance(detail, dict) and "detail" in detail:
        message = str(detail["detail"])
    elif isinstance(detail, dict) and "error" in detail:
        return response
    else:
        from .serializers import first_error

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


class SalesIngestApi(APIView):
    """Accept a batch of sale events; valid events are stored even when others are rejected."""

    permission_classes = [CanAddSales]

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
            413: OpenApiResponse(_Error, description="more than 5,000 events"),
        },
    )
    def post(self, request):
        body = request.data
        if not isinstance(body, dict) or not isinstance(body.get("events"), list):
            raise exceptions.ValidationError({"error": 'body must be {"events": [ ... ]}'})
        events = body["events"]
        limit = rankings_settings.MAX_BATCH_EVENTS
        if len(events) > limit:
            raise PayloadTooLarge(f"at most {limit} events per batch; this one has {len(events)}")
        result = sales_ingest(events=events, source="api")
        return Response(result.as_dict())

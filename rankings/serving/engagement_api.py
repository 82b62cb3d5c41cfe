"""POST /v1/engagements: a batch of view and wish events, taken as POST /v1/sales takes sales."""

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from rankings.conf import rankings_settings
from rankings.engine.shards import ShardCountMismatch
from rankings.ingest.engagement import engagements_ingest
from rankings.ingest.events import EngagementEventSerializer
from rankings.serving.api import (
    _THROTTLED,
    BODY_SHAPE,
    PayloadTooLarge,
    ServiceUnavailable,
    _BatchParser,
    _Error,
    _IngestReply,
)


class CanAddEngagements(BasePermission):
    def has_permission(self, request, view):
        return bool(request.user and request.user.has_perm("rankings.add_engagement"))


class EngagementBatchField(serializers.ListField):
    """The events of a batch: a list of at most MAX_ENGAGEMENT_BATCH_EVENTS, each validated on its own
    by the ingest service (see api.EventBatchField)."""

    def __init__(self, **kwargs):
        super().__init__(
            child=EngagementEventSerializer(),
            max_length=rankings_settings.MAX_ENGAGEMENT_BATCH_EVENTS,
            **kwargs,
        )

    def run_validation(self, data=serializers.empty):
        if not isinstance(data, list):
            raise serializers.ValidationError(BODY_SHAPE)
        limit = rankings_settings.MAX_ENGAGEMENT_BATCH_EVENTS  # read now: a test may change it
        if len(data) > limit:
            raise PayloadTooLarge(f"at most {limit} events per batch; this one has {len(data)}")
        return data


class EngagementIngestRequest(serializers.Serializer):
    events = EngagementBatchField()


class EngagementsIngestApi(APIView):
    """Accept a batch of engagement events; valid events are stored even when others are rejected."""

    permission_classes = [CanAddEngagements]
    parser_classes = [_BatchParser]
    throttle_scope = "ingest"

    @extend_schema(
        operation_id="engagements_ingest",
        request=EngagementIngestRequest,
        responses={
            200: _IngestReply,
            400: OpenApiResponse(_Error, description='body is not {"events": [...]}'),
            401: _Error,
            403: _Error,
            413: OpenApiResponse(
                _Error,
                description=f"more than {rankings_settings.MAX_ENGAGEMENT_BATCH_EVENTS:,} events, or a body "
                f"over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 2**20} MB",
            ),
            429: _THROTTLED,
            503: OpenApiResponse(_Error, description="the service is misconfigured; nothing was stored"),
        },
    )
    def post(self, request):
        try:
            body = request.data
        except RecursionError:  # JSON nested deeper than the parser's stack
            raise exceptions.ParseError("JSON parse error - nested too deeply") from None
        batch = EngagementIngestRequest(data=body)
        if not isinstance(body, dict) or not batch.is_valid():
            raise exceptions.ValidationError({"error": BODY_SHAPE})
        try:
            result = engagements_ingest(events=batch.validated_data["events"], source="engage-api")
        except ShardCountMismatch as error:  # an operator's mistake: nothing stored, the client retries
            raise ServiceUnavailable(str(error)) from error
        return Response(result.as_dict())

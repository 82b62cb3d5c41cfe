"""POST /v1/engagements: a batch of view and wish events, taken as POST /v1/sales takes sales."""

from drf_spectacular.utils import extend_schema_view
from rest_framework import serializers

from rankings.conf import rankings_settings
from rankings.ingest.engagement import engagements_ingest
from rankings.ingest.events import EngagementEventSerializer
from rankings.serving.api import BatchIngestApi, EventBatchField, ingest_schema


class EngagementIngestRequest(serializers.Serializer):
    events = EventBatchField(
        child=EngagementEventSerializer(), limit=rankings_settings.MAX_ENGAGEMENT_BATCH_EVENTS
    )


@extend_schema_view(
    post=ingest_schema(
        operation_id="engagements_ingest",
        request=EngagementIngestRequest,
        limit=rankings_settings.MAX_ENGAGEMENT_BATCH_EVENTS,
    )
)
class EngagementsIngestApi(BatchIngestApi):
    """Accept a batch of engagement events; valid events are stored even when others are rejected."""

    permission = "rankings.add_engagement"
    source = "engage-api"
    limit_setting = "MAX_ENGAGEMENT_BATCH_EVENTS"
    ingest = staticmethod(engagements_ingest)

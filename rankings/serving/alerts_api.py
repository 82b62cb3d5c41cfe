"""POST, GET /v1/alerts and DELETE /v1/alerts/{alertId}: a token holder's rank alerts (webhooks)."""

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from rankings.conf import METRICS, rankings_settings
from rankings.ingest.events import ProductIdField
from rankings.models import Alert
from rankings.operations.alerts import AlertRefused, alert_create, alert_delete, alerts_of
from rankings.serving.api import _THROTTLED, _Error, iso_text
from rankings.serving.authentication import holds

PERMISSION = "rankings.add_alert"
BODY_SHAPE = 'body must be {"productId", "category", "window", "metric", "rule", "url"}'
RULES = tuple(Alert.Rule.values)


class CanAlert(BasePermission):
    """Every alert call needs rankings.add_alert: a caller sees and deletes only its own alerts."""

    def has_permission(self, request, view):
        return holds(request, PERMISSION)


@extend_schema_field(
    {
        "type": "object",
        "description": "exactly one of enters, leaves (a top N), climbs, falls (k places)",
        "minProperties": 1,
        "maxProperties": 1,
        "properties": {
            rule: {"type": "integer", "minimum": 1, "maximum": rankings_settings.SNAPSHOT_DEPTH}
            for rule in RULES
        },
        "additionalProperties": False,
        "example": {"enters": 10},
    }
)
class RuleField(serializers.Field):
    """{"enters": 10}: one rule and its number."""

    default_error_messages = {
        "invalid": f"must be an object with exactly one of {', '.join(RULES)}, whose value is a whole number"
    }

    def to_internal_value(self, data) -> tuple[str, int]:
        if not isinstance(data, dict) or len(data) != 1:
            self.fail("invalid")
        ((rule, number),) = data.items()
        if rule not in RULES or type(number) is not int:  # bool is a subclass of int: excluded here
            self.fail("invalid")
        return rule, number

    def to_representation(self, value):
        rule, number = value
        return {rule: number}


class AlertRequest(serializers.Serializer):
    productId = ProductIdField()  # noqa: N815 - the wire's own name
    category = serializers.SlugField(max_length=50)
    window = serializers.ChoiceField(choices=list(rankings_settings.SNAPSHOT_WINDOWS))
    metric = serializers.ChoiceField(choices=list(METRICS))
    rule = RuleField()
    url = serializers.CharField(
        max_length=2000, help_text="https; a private address only with ALERTS_ALLOW_PRIVATE"
    )

    class Meta:
        ref_name = "AlertInput"


class AlertCreatedReply(serializers.Serializer):
    id = serializers.IntegerField()
    secret = serializers.CharField(help_text="the signing secret (whsec_…): shown this once, never again")

    class Meta:
        ref_name = "AlertCreated"


class AlertReply(serializers.Serializer):
    id = serializers.IntegerField()
    productId = serializers.CharField()  # noqa: N815
    category = serializers.CharField()
    window = serializers.CharField()
    metric = serializers.CharField()
    rule = RuleField()
    url = serializers.CharField()
    createdAt = serializers.DateTimeField()  # noqa: N815
    failing = serializers.BooleanField(
        help_text="a firing was given up after a day of refused deliveries; false again after one succeeds"
    )
    failingSince = serializers.DateTimeField(allow_null=True)  # noqa: N815

    @staticmethod
    def wire(alert: Alert) -> dict:
        return {
            "id": alert.id,
            "productId": alert.product_id,
            "category": alert.category,
            "window": alert.window,
            "metric": alert.metric,
            "rule": {alert.rule: alert.number},
            "url": alert.url,
            "createdAt": iso_text(alert.created_at),
            "failing": alert.failing_since is not None,
            "failingSince": iso_text(alert.failing_since),
        }

    class Meta:
        ref_name = "Alert"


class AlertListReply(serializers.Serializer):
    items = AlertReply(many=True)

    class Meta:
        ref_name = "AlertList"


_AUTH_ERRORS = {401: _Error, 403: _Error, 429: _THROTTLED}


class AlertsApi(APIView):
    """The caller's rank alerts: make one, or list them."""

    permission_classes = [CanAlert]
    throttle_scope = "ingest"

    @extend_schema(
        operation_id="alert_create",
        request=AlertRequest,
        responses={
            201: AlertCreatedReply,
            400: OpenApiResponse(_Error, description="a field is missing or wrong; the message names it"),
            **_AUTH_ERRORS,
        },
    )
    def post(self, request):
        if not isinstance(request.data, dict):
            raise exceptions.ValidationError({"error": BODY_SHAPE})
        body = AlertRequest(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        rule, number = data["rule"]
        try:
            alert, secret = alert_create(
                user=request.user,
                product_id=data["productId"],
                category=data["category"],
                window=data["window"],
                metric=data["metric"],
                rule=rule,
                number=number,
                url=data["url"],
            )
        except AlertRefused as refused:
            raise exceptions.ValidationError({"error": str(refused)}) from refused
        return Response({"id": alert.id, "secret": secret}, status=status.HTTP_201_CREATED)

    @extend_schema(operation_id="alert_list", responses={200: AlertListReply, **_AUTH_ERRORS})
    def get(self, request):
        return Response({"items": [AlertReply.wire(alert) for alert in alerts_of(request.user)]})


class AlertApi(APIView):
    """One of the caller's rank alerts."""

    permission_classes = [CanAlert]
    throttle_scope = "ingest"

    @extend_schema(
        operation_id="alert_delete",
        responses={
            204: OpenApiResponse(description="deleted, with its firings and their delivery attempts"),
            404: OpenApiResponse(_Error, description="the caller has no such alert"),
            **_AUTH_ERRORS,
        },
    )
    def delete(self, request, alert_id: int):
        if not alert_delete(user=request.user, alert_id=alert_id):
            raise exceptions.NotFound(f"no alert {alert_id} of yours")
        return Response(status=status.HTTP_204_NO_CONTENT)

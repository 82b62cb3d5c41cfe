"""The shape of a sale event: field-level validation, before any database lookup."""

import datetime as dt
from decimal import Decimal

from rest_framework import serializers

from catalogue.models import ALL, PRODUCT_ID_PATTERN

MAX_QTY = 1_000_000


class TimestampField(serializers.Field):
    """Epoch seconds (a JSON number) or an ISO-8601 string with a UTC offset."""

    default_error_messages = {
        "invalid": "ts must be epoch seconds or an ISO-8601 time with a UTC offset",
        "naive": "ts has no UTC offset; add Z or +00:00",
    }

    def to_internal_value(self, data) -> dt.datetime:
        if isinstance(data, bool):
            self.fail("invalid")
        if isinstance(data, (int, float)):
            try:
                return dt.datetime.fromtimestamp(data, tz=dt.UTC)
            except (OverflowError, OSError, ValueError):
                self.fail("invalid")
        if isinstance(data, str):
            text = data.strip()
            if text.lstrip("-").replace(".", "", 1).isdigit():
                return self.to_internal_value(float(text))
            try:
                value = dt.datetime.fromisoformat(text)
            except ValueError:
                self.fail("invalid")
            if value.tzinfo is None:
                self.fail("naive")
            return value.astimezone(dt.UTC)
        self.fail("invalid")

    def to_representation(self, value):
        return value.isoformat()


class SaleEventSerializer(serializers.Serializer):
    id = serializers.CharField(max_length=128, trim_whitespace=False)
    ts = TimestampField()
    productId = serializers.RegexField(PRODUCT_ID_PATTERN, max_length=64)
    categories = serializers.ListField(
        child=serializers.SlugField(max_length=50), required=False, allow_empty=True, max_length=50
    )
    qty = serializers.IntegerField(
        min_value=-MAX_QTY,
        max_value=MAX_QTY,
        error_messages={"invalid": "qty must be a non-zero integer"},
    )
    amount = serializers.DecimalField(
        max_digits=14, decimal_places=2, min_value=Decimal(0), required=False, allow_null=True
    )
    returnOf = serializers.CharField(max_length=128, required=False, allow_null=True, trim_whitespace=False)

    def validate_qty(self, value):
        if value == 0 or isinstance(self.initial_data.get("qty"), bool):
            raise serializers.ValidationError("qty must be a non-zero integer")
        return value

    def validate_categories(self, value):
        if ALL in value:
            raise serializers.ValidationError(f"'{ALL}' is reserved for the board of every sale")
        return list(dict.fromkeys(value))  # a category listed twice counts once

    def validate(self, attrs):
        if attrs["qty"] < 0 and not attrs.get("returnOf"):
            raise serializers.ValidationError("a negative qty is a return and needs returnOf")
        if attrs["qty"] > 0 and attrs.get("returnOf"):
            raise serializers.ValidationError("a return (returnOf) needs a negative qty")
        return attrs


def first_error(detail) -> str:
    """One readable reason from a DRF error structure: 'field: message'."""
    if isinstance(detail, dict):
        field, errors = next(iter(detail.items()))
        message = first_error(errors)
        return message if field == "non_field_errors" or message.startswith(field) else f"{field}: {message}"
    if isinstance(detail, list):
        if not detail:
            return "invalid"
        for item in detail:
            if item:  # ListField errors keep the position of a bad element as a key
                return first_error(item)
    return str(detail)

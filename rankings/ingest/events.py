"""The shape of a sale event: field-level validation, before any database lookup.

Each field checks its whole rule in one `to_internal_value` and says what is
wrong in one sentence that names the field, because a rejection reaches the
sender as `{"index", "id", "error"}` and must be enough to fix the event. The
fields carry no extra validator lists: a batch of 5,000 events goes through
one serializer instance (see `EventValidator`), and the per-event cost of
DRF's generic machinery is what limits the ingest rate.
"""

import datetime as dt
import re
from collections.abc import Callable
from decimal import Decimal
from functools import cached_property
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, NoReturn

import msgspec
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty

from rankings.conf import rankings_settings
from rankings.engine.shards import ALL

MAX_ID_LENGTH = 128
MAX_QTY = 1_000_000
# The largest amount allowed has this many digits before the point (and two after).
MAX_AMOUNT_DIGITS = 12
MAX_AMOUNT_CENTS = 10 ** (MAX_AMOUNT_DIGITS + 2) - 1

# fullmatch, not re.match with "$": "$" also matches before a trailing newline.
_PRODUCT_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_SLUG = re.compile(r"[-a-zA-Z0-9_]{1,50}")
_EPOCH = re.compile(r"-?[0-9]+(\.[0-9]+)?", re.ASCII)
_CENT = Decimal("0.01")
_AMOUNT = re.compile(rf"[0-9]{{1,{MAX_AMOUNT_DIGITS}}}(\.[0-9]{{0,2}})?|\.[0-9]{{1,2}}", re.ASCII)
# Any plain decimal, to tell "too many digits" from a form Decimal() would also
# read: an exponent ("1E-1000000000" is 0 to Decimal), "_" separators, or
# digits of other scripts, none of which a shop's system means to send.
_PLAIN_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)", re.ASCII)
# Control (Cc) and format (Cf) characters, as Unicode 14 lists them: invisible
# in a log or an admin page, and bidi overrides (U+202E) make an id read as
# another one. Listed rather than computed from unicodedata, which would cost
# every process a third of a second at start.
_INVISIBLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
# Path segments that a URL cannot carry as a product id: they are resolved away.
_DOT_SEGMENTS = frozenset({".", ".."})


# msgspec's compiled decoder reads a batch several times faster than json.loads,
# and what it reads it reads as json.loads does, integers of any size included
# (orjson makes a float of an integer past 64 bits, and "qty must be between"
# would become "qty must be a non-zero integer"). What it refuses (NaN, a lone
# surrogate, a number past a double, deep nesting, malformed JSON) is read again
# the slow way, so every result and every error message stays json.loads's.
_json_decoder = msgspec.json.Decoder()


def json_decoded(data: bytes, slow: Callable[[], object]) -> object:
    """The JSON value of UTF-8 `data`, or else whatever `slow()` (json.loads's way) makes of it."""
    try:
        return _json_decoder.decode(data)
    except (msgspec.DecodeError, ValueError):  # ValueError: not UTF-8
        return slow()


def duration_text(seconds: int) -> str:
    """A length of time as a sender reads it in a rejection: 300 -> "5 minutes", 90 -> "90 seconds"."""
    if seconds % 60:
        return f"{seconds} second{'' if seconds == 1 else 's'}"
    minutes = seconds // 60
    return f"{minutes} minute{'' if minutes == 1 else 's'}"


def _check_text(field: serializers.Field, data, max_length: int) -> str:
    """A non-empty string that PostgreSQL can store: no NUL, no lone surrogate."""
    if not isinstance(data, str) or not data or len(data) > max_length or "\x00" in data:
        field.fail("invalid")
    try:
        data.encode()
    except UnicodeEncodeError:
        field.fail("invalid")
    return data


class ItemField(serializers.Field):
    """A field of a batch item: each message names the field it is about ({name})."""

    default_error_messages = {
        "required": "{name} is required",
        "null": "{name} may not be null",
    }

    def fail(self, key: str, **kwargs: Any) -> NoReturn:
        super().fail(key, name=self.field_name, **kwargs)


@extend_schema_field(
    {"type": "string", "maxLength": MAX_ID_LENGTH, "minLength": 1, "example": "ord-91-line-2"}
)
class EventIdField(ItemField):
    """An event id (the order line id): a string of 1 to 128 characters, none of them invisible."""

    default_error_messages = {
        "invalid": f"{{name}} must be a string of 1 to {MAX_ID_LENGTH} characters",
        "invisible": "{name} may not contain the control or format character U+{code:04X}",
    }

    def to_internal_value(self, data) -> str:
        text = _check_text(self, data, MAX_ID_LENGTH)
        if not text.isascii() or not text.isprintable():  # the common case needs no search
            invisible = _INVISIBLE.search(text)
            if invisible:
                self.fail("invisible", code=ord(invisible.group()))
        return text

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "oneOf": [{"type": "number"}, {"type": "string", "format": "date-time"}],
        "description": "epoch seconds, or ISO-8601 with a UTC offset; "
        f"at most {duration_text(rankings_settings.MAX_FUTURE_SECONDS)} ahead of the server",
        "example": "2025-10-09T08:53:20Z",
    }
)
class TimestampField(ItemField):
    """Epoch seconds (a JSON number) or an ISO-8601 string with a UTC offset."""

    default_error_messages = {
        "invalid": "{name} must be epoch seconds or an ISO-8601 time with a UTC offset",
        "naive": "{name} has no UTC offset; add Z or +00:00",
    }

    def to_internal_value(self, data) -> dt.datetime:
        if isinstance(data, str):
            text = data.strip()
            if not text.isascii():  # digits of other scripts, which int() and float() would read
                self.fail("invalid")
            if _EPOCH.fullmatch(text):
                return self._from_epoch(float(text))
            try:
                value = dt.datetime.fromisoformat(text)
            except ValueError:
                self.fail("invalid")
            if value.tzinfo is None:
                self.fail("naive")
            try:
                return value.astimezone(dt.UTC)
            except OverflowError:  # e.g. year 1 with a positive offset
                self.fail("invalid")
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return self._from_epoch(data)
        self.fail("invalid")

    def _from_epoch(self, seconds) -> dt.datetime:
        try:
            return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            self.fail("invalid")

    def to_representation(self, value):
        return value.isoformat()


@extend_schema_field({"type": "string", "pattern": f"^{_PRODUCT_ID.pattern}$", "example": "p15"})
class ProductIdField(ItemField):
    default_error_messages = {
        "invalid": "{name} must be 1 to 64 characters of A-Z a-z 0-9 . _ : -",
        "dots": "{name} may not be '.' or '..': no URL can name it",
    }

    def to_internal_value(self, data) -> str:
        if not isinstance(data, str) or not _PRODUCT_ID.fullmatch(data):
            self.fail("invalid")
        if data in _DOT_SEGMENTS:
            self.fail("dots")
        return data

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "type": "array",
        "nullable": True,
        "maxItems": rankings_settings.MAX_EVENT_CATEGORIES,
        "items": {"type": "string", "pattern": f"^{_SLUG.pattern}$", "not": {"enum": [ALL]}},
        "description": "category slugs; left out, empty or null: the product's catalogue categories",
        "example": ["toys", "gifts"],
    }
)
class CategoriesField(ItemField):
    """Category slugs; a slug listed twice counts once; `null` or `[]` means the catalogue's."""

    default_error_messages = {
        "invalid": "categories must be a list of at most {limit} slugs",
        "slug": "categories: {value!r} is not a slug (at most 50 of a-z A-Z 0-9 _ -)",
        "reserved": f"categories: '{ALL}' is reserved for the board of every sale",
    }

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Read when a serializer is built (once a batch), so a changed setting applies.
        self.max_categories = rankings_settings.MAX_EVENT_CATEGORIES

    def fail(self, key, **kwargs):
        super().fail(key, limit=self.max_categories, **kwargs)

    def validate_empty_values(self, data):
        if data is None:
            return True, []
        return super().validate_empty_values(data)

    def to_internal_value(self, data) -> list[str]:
        if not isinstance(data, list) or len(data) > self.max_categories:
            self.fail("invalid")
        for slug in data:
            if not isinstance(slug, str) or not _SLUG.fullmatch(slug):
                self.fail("slug", value=slug[:60] if isinstance(slug, str) else type(slug).__name__)
            if slug == ALL:
                self.fail("reserved")
        return list(dict.fromkeys(data))  # a category listed twice counts once

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "type": "integer",
        "minimum": -MAX_QTY,
        "maximum": MAX_QTY,
        "description": "non-zero; negative for a return",
    }
)
class QtyField(ItemField):
    """Units: a non-zero JSON integer; negative for a return."""

    default_error_messages = {
        "invalid": "qty must be a non-zero integer",
        "range": f"qty must be between -{MAX_QTY:,} and {MAX_QTY:,}",
    }

    def to_internal_value(self, data) -> int:
        if type(data) is not int or data == 0:  # bool is a subclass of int: excluded here
            self.fail("invalid")
        if not -MAX_QTY <= data <= MAX_QTY:
            self.fail("range")
        return data

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "oneOf": [{"type": "string"}, {"type": "number", "minimum": 0}],
        "nullable": True,
        "description": f"decimal ≥ 0, at most 2 places and {MAX_AMOUNT_DIGITS} digits before the point; "
        "left out or null: catalogue price × qty (a return: the pro-rata refund)",
        "example": "25.00",
    }
)
class AmountField(ItemField):
    """What the line cost the buyer: a decimal ≥ 0, at most 2 places and MAX_AMOUNT_DIGITS before the point."""

    default_error_messages = {
        "invalid": "{name} must be a decimal number (a JSON string or number)",
        "form": "{name} must be written with the digits 0-9 and at most one point, such as 25.00 "
        "(no exponent, no separators)",
        "negative": "{name} may not be negative",
        "places": "{name} may have at most 2 decimal places",
        "digits": f"{{name}} may have at most {MAX_AMOUNT_DIGITS} digits before the decimal point",
    }

    def validate_empty_values(self, data):
        if data is None:
            return True, None
        return super().validate_empty_values(data)

    def to_internal_value(self, data) -> Decimal:
        if isinstance(data, str):
            text = data.strip()
            if _AMOUNT.fullmatch(text):  # the common case, checked without Decimal arithmetic
                return Decimal(text)
            if not _PLAIN_DECIMAL.fullmatch(text):
                self.fail("form" if any(c.isdigit() for c in text) else "invalid")
            value = Decimal(text)
        elif isinstance(data, int) and not isinstance(data, bool):
            value = Decimal(data)
        elif isinstance(data, float):
            value = Decimal(repr(data))  # the shortest text that reads back as this float
        else:
            self.fail("invalid")
        if not value.is_finite():
            self.fail("invalid")
        if value < 0:
            self.fail("negative")
        if value >= 10**MAX_AMOUNT_DIGITS:
            self.fail("digits")
        if value % _CENT:
            self.fail("places")
        return value

    def to_representation(self, value):
        return str(value)


@extend_schema_field(
    {"type": "string", "maxLength": MAX_ID_LENGTH, "nullable": True, "description": "id of the sale returned"}
)
class ReturnOfField(EventIdField):
    """The id of the sale a return refers to; `null` or "" means the event is not a return."""

    def validate_empty_values(self, data):
        if data is None or data == "":
            return True, None
        return super().validate_empty_values(data)


class ItemSerializer(serializers.Serializer):
    """What the serializer of every kind of batch item (an event, a product) shares: its fields read
    fast, one reason per item. `invalid` says what an item must be."""

    default_error_messages = {"invalid": "event must be a JSON object"}

    def to_internal_value(self, data) -> dict:
        """The fields in order, stopping at the first error: one reason per rejected event.

        Serializer.to_internal_value looks up `validate_<name>` methods, HTML
        input and nested sources for every field of every event; none of that
        applies here, and skipping it is most of the speed of a batch.
        """
        if not isinstance(data, dict):
            self.fail("invalid")
        ret = {}
        for name, field, plain in self._event_fields:
            value = data.get(name, empty)
            if value is empty and not field.required:
                continue  # what run_validation would come to, without raising SkipField
            try:
                if plain and value is not empty and value is not None and value != "":
                    ret[name] = field.to_internal_value(value)  # what run_validation would come to
                else:
                    ret[name] = field.run_validation(value)
            except serializers.ValidationError as exc:
                raise serializers.ValidationError({name: exc.detail}) from None
            except serializers.SkipField:
                pass
        return ret

    @cached_property
    def _categories_most(self) -> int:
        """The most categories an item may name, as its `categories` field reads the setting."""
        field = self.fields["categories"]
        assert isinstance(field, CategoriesField)
        return field.max_categories

    @cached_property
    def _event_fields(self) -> list[tuple[str, serializers.Field, bool]]:
        """(name, field, whether a present value needs nothing but the field's to_internal_value)."""
        return [(name, field, not field.validators) for name, field in self.fields.items()]

    def run_validators(self, value):
        pass  # no serializer-level validators; the cross-field rules are in validate()


class SaleEventSerializer(ItemSerializer):
    """One sale event of POST /v1/sales (docs/api.md); unknown keys are ignored."""

    id = EventIdField()
    ts = TimestampField()
    productId = ProductIdField()
    categories = CategoriesField(required=False)
    qty = QtyField()
    amount = AmountField(required=False)
    returnOf = ReturnOfField(required=False)

    def validate(self, attrs):
        return_of = attrs.get("returnOf")
        if attrs["qty"] < 0 and return_of is None:
            raise serializers.ValidationError("a negative qty is a return and needs returnOf")
        if attrs["qty"] > 0 and return_of is not None:
            raise serializers.ValidationError("a return (returnOf) needs a negative qty")
        return attrs

    def plain(self, event: dict, seen: "Seen") -> dict | None:
        """The validated data of a sale in its usual form (a number for `ts`, a plain decimal string or
        nothing for `amount`), as the fields would make it; None for anything else, which the fields
        then check and explain. Checks only what it is sure of: tests/test_events_plain.py holds it
        to the serializer's answers."""
        data = _plain_common(event, seen)
        if data is None:
            return None
        qty = event.get("qty")
        if type(qty) is not int or not (0 < qty <= MAX_QTY or (-MAX_QTY <= qty < 0 and "returnOf" in event)):
            return None
        data["qty"] = qty
        if "amount" in event:
            amount = event["amount"]
            if amount is None:
                data["amount"] = None
            elif type(amount) is str and _AMOUNT.fullmatch(amount):
                data["amount"] = Decimal(amount)
            else:
                return None
        if "returnOf" in event:
            return_of = event["returnOf"]
            if return_of is None or return_of == "":
                data["returnOf"] = None
            elif _plain_id(return_of):
                data["returnOf"] = return_of
            else:
                return None
            if (qty < 0) != (data["returnOf"] is not None):
                return None
        return data


@extend_schema_field({"type": "string", "enum": ["view", "wish"]})
class KindField(ItemField):
    """What the shopper did: viewed the product or added it to a wish list."""

    default_error_messages = {"invalid": "kind must be 'view' or 'wish'"}

    def to_internal_value(self, data) -> str:
        if not isinstance(data, str) or data not in ("view", "wish"):
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class OptionalEventIdField(EventIdField):
    """An engagement event's id: left out or null, the event counts without de-duplication."""

    def validate_empty_values(self, data):
        if data is None:
            return True, None
        return super().validate_empty_values(data)


class EngagementEventSerializer(ItemSerializer):
    """One engagement event of POST /v1/engagements (docs/api.md); unknown keys are ignored."""

    id = OptionalEventIdField(required=False)
    ts = TimestampField()
    productId = ProductIdField()
    categories = CategoriesField(required=False)
    kind = KindField()

    def validate(self, attrs):
        return attrs

    def plain(self, event: dict, seen: "Seen") -> dict | None:
        """As SaleEventSerializer.plain, for a view or wish: its id may be left out or null."""
        kind = event.get("kind")
        if kind != "view" and kind != "wish":
            return None
        data = _plain_common(event, seen, id_required=False)
        if data is None:
            return None
        data["kind"] = kind
        return data

    def plain_all(self, events: list, seen: "Seen") -> list[dict] | None:
        """What `plain` makes of each of `events` when it makes something of every one; None otherwise
        (each is then read on its own). Checked a field at a time across the batch: the types of a
        field's values in C, then each distinct value once, as a batch of live views names a few
        seconds, kinds and lists of categories, and its products many times over. Held to `plain` by
        tests/test_events_plain.py."""
        try:
            instants = _views_checked(events, seen)
        except (KeyError, TypeError):  # a field left out, or a value no set can hold
            return None
        if instants is None:
            return None
        every = []
        for event in events:  # as plain makes it, in the serializer's key order
            data = {"id": event["id"]} if "id" in event else {}
            data["ts"] = instants[event["ts"]]
            data["productId"] = event["productId"]
            if "categories" in event:
                data["categories"] = _listed(event["categories"])
            data["kind"] = event["kind"]
            every.append(data)
        return every


_ID_TYPES = {str, type(None)}
_INSTANT_TYPES = {int, float}  # a bool is neither
_CATEGORIES_TYPES = {list, type(None)}
_KINDS = {"view", "wish"}


def _views_checked(events: list, seen: "Seen") -> dict | None:
    """Each instant of `events` -> its UTC time, when every event is a view or wish in the usual form
    (see EngagementEventSerializer.plain); None when one is not. Raises KeyError for a field left
    out and TypeError for a value that cannot be hashed, which say the same."""
    if set(map(type, events)) != {dict} or not set(map(itemgetter("kind"), events)) <= _KINDS:
        return None
    ids = list(map(dict.get, events, repeat("id")))
    if not set(map(type, ids)) <= _ID_TYPES or not all(map(_plain_id, set(ids).difference([None]))):
        return None
    stamps = list(map(itemgetter("ts"), events))
    if not set(map(type, stamps)) <= _INSTANT_TYPES:
        return None
    instants = {}
    for value in set(stamps):
        if (instant := seen.instant(value)) is None:
            return None
        instants[value] = instant
    products = set(map(itemgetter("productId"), events))
    if not all(map(seen.product, products.difference(seen.products))):
        return None
    lists = list(map(dict.get, events, repeat("categories")))
    if not set(map(type, lists)) <= _CATEGORIES_TYPES:
        return None
    named = list(filter(None, lists))
    if named and max(map(len, named)) > seen.categories_most:
        return None
    if not all(map(seen.slug, set(chain.from_iterable(named)).difference(seen.slugs))):
        return None
    return instants


def _plain_id(value) -> bool:
    """Whether `value` is an event id EventIdField takes as it is: printable ASCII needs no search."""
    return type(value) is str and 0 < len(value) <= MAX_ID_LENGTH and value.isascii() and value.isprintable()


class Seen:
    """What one batch's events in their usual form have shown valid so far: a batch names the same
    products, categories and seconds many times over, and each is checked once."""

    def __init__(self, categories_most: int):
        self.categories_most = categories_most
        self.products: set[str] = set()
        self.slugs: set[str] = set()
        self.instants: dict[int | float, dt.datetime] = {}

    def product(self, value) -> bool:
        if type(value) is not str:
            return False
        if value in self.products:
            return True
        if not _PRODUCT_ID.fullmatch(value) or value in _DOT_SEGMENTS:
            return False
        self.products.add(value)
        return True

    def slug(self, value) -> bool:
        if type(value) is not str:
            return False
        if value in self.slugs:
            return True
        if value == ALL or not _SLUG.fullmatch(value):
            return False
        self.slugs.add(value)
        return True

    def instant(self, value) -> dt.datetime | None:
        """The UTC time of epoch seconds `value` (an int or a float, not a bool), or None."""
        if type(value) is not int and type(value) is not float:  # a bool is neither
            return None
        instant = self.instants.get(value)
        if instant is None:
            try:
                instant = dt.datetime.fromtimestamp(value, tz=dt.UTC)
            except (OverflowError, OSError, ValueError):
                return None
            if len(self.instants) < 100_000:
                self.instants[value] = instant
        return instant


def _plain_common(event: dict, seen: Seen, *, id_required: bool = True) -> dict | None:
    """What a sale and a view share, in the usual form (see SaleEventSerializer.plain), in the
    serializer's key order: id, ts, productId, categories; None for anything else."""
    data: dict = {}
    if "id" in event:
        event_id = event["id"]
        if event_id is None and not id_required:
            data["id"] = None
        elif _plain_id(event_id):
            data["id"] = event_id
        else:
            return None
    elif id_required:
        return None
    # Each value a batch has shown valid before is found in its set without a call; the first time,
    # Seen checks it.
    ts = event.get("ts")
    instant = seen.instants.get(ts) if type(ts) is int or type(ts) is float else None
    if instant is None and (instant := seen.instant(ts)) is None:
        return None
    data["ts"] = instant
    product_id = event.get("productId")
    if not (type(product_id) is str and product_id in seen.products) and not seen.product(product_id):
        return None
    data["productId"] = product_id
    if "categories" in event:
        categories = event["categories"]
        if categories is not None and not (
            type(categories) is list and len(categories) <= seen.categories_most
        ):
            return None
        if categories and not _known(seen.slugs, categories):
            for slug in categories:
                if not seen.slug(slug):
                    return None
        data["categories"] = _listed(categories)
    return data


def _listed(categories: list | None) -> list:
    """A valid event's categories as the field makes them: each listed once (a list of one is the
    event's own), none for null."""
    if categories is None:
        return []
    return categories if len(categories) < 2 else list(dict.fromkeys(categories))


def _known(strings: set[str], values: list) -> bool:
    """Whether every one of `values` is in `strings`: no value but a string equals one, and a value
    that cannot be hashed is in no set."""
    try:
        return strings.issuperset(values)
    except TypeError:
        return False


class EventValidator:
    """Validates many events (or other batch items) with one serializer, so its fields are built
    once per batch."""

    def __init__(self, serializer_class: type[ItemSerializer] = SaleEventSerializer):
        self._serializer = serializer_class()
        # An event in its usual form is read in one pass (the serializer's `plain`, where it has one);
        # the fields check, and explain, the others.
        self._plain = getattr(self._serializer, "plain", None)
        self._seen = Seen(self._serializer._categories_most) if self._plain else None

    def all_plain(self, events: list) -> list[dict] | None:
        """The validated data of each of `events` when the serializer reads the whole batch in its usual
        form at once (its `plain_all`, where it has one); None otherwise."""
        plain_all = getattr(self._serializer, "plain_all", None)
        return plain_all(events, self._seen) if plain_all is not None and events else None

    def __call__(self, event) -> tuple[dict | None, str | None]:
        """(validated data, None) or (None, the reason)."""
        if not isinstance(event, dict):
            return None, str(self._serializer.error_messages["invalid"])
        if self._plain is not None:
            data = self._plain(event, self._seen)
            if data is not None:
                return data, None
        # Serializer.run_validation's steps that apply to an event (a dict, no validators), directly.
        serializer = self._serializer
        try:
            return serializer.validate(serializer.to_internal_value(event)), None
        except serializers.ValidationError as exc:
            return None, first_error(exc.detail)


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

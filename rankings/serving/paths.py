"""The path segments the URLs take, refused by the URL resolver itself when they cannot be one: a
NUL, a control character or a segment too long is a 404 before any view looks anything up."""

from django.urls.converters import StringConverter

from catalogue.models import PRODUCT_ID_PATTERN, Category


class CategorySlug(StringConverter):
    """A category's slug: a Django slug as long as the catalogue stores."""

    regex = rf"[-a-zA-Z0-9_]{{1,{Category._meta.get_field('slug').max_length}}}"


class ProductId(StringConverter):
    """A product's id: at most 64 of A–Z a–z 0–9 . _ : -"""

    regex = PRODUCT_ID_PATTERN.removeprefix("^").removesuffix("$")


class AlertId:
    """An alert's id: digits, no more than a bigint holds (a longer number is no alert, not an error)."""

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value) -> str:
        return str(value)

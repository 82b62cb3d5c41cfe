"""Categories and products: the names and prices the rankings are shown with."""

import zlib

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

PRODUCT_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,64}$"

# The reserved board that counts every sale once; no real category may take the slug.
ALL = "all"


def shard_of(slug: str, shards: int) -> int:
    """Stable across processes and versions (unlike hash()): crc32 of the slug."""
    return zlib.crc32(slug.encode()) % shards


class Category(models.Model):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)
    # Created from a sale event rather than by an editor: its name needs completing.
    is_placeholder = models.BooleanField(default=False, db_index=True)
    # The ranking shard this category's boards belong to (see shard_of).
    shard = models.PositiveSmallIntegerField(editable=False)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "categories"

    def __str__(self):
        return self.name

    def save(self, *args, **kwargs):
        from rankings.conf import rankings_settings

        self.shard = shard_of(self.slug, rankings_settings.SHARDS)
        super().save(*args, **kwargs)


class Product(models.Model):
    product_id = models.CharField(
        "product id",
        max_length=64,
        unique=True,
        validators=[
            RegexValidator(PRODUCT_ID_PATTERN),
            # Path segments a URL cannot carry: a product so named could never be looked up.
            RegexValidator(r"^\.{1,2}$", inverse_match=True, message="'.' and '..' cannot be product ids."),
        ],
        help_text="The shop's id, as used in sale events.",
    )
    name = models.CharField(max_length=200)
    price_cents = models.BigIntegerField(
        default=0, validators=[MinValueValidator(0)], help_text="Unit price in cents."
    )
    categories = models.ManyToManyField(Category, related_name="products", blank=True)
    # Created from a sale event rather than by an editor: name and price need completing.
    is_placeholder = models.BooleanField(default=False, db_index=True)

    class Meta:
        ordering = ["product_id"]
        constraints = [
            # A sale without an amount costs price × qty: a negative price would be negative revenue.
            models.CheckConstraint(
                condition=models.Q(price_cents__gte=0),
                name="product_price_not_negative",
                violation_error_message="The price may not be negative.",
            ),
        ]

    def __str__(self):
        return self.name or self.product_id

    @property
    def price(self):
        from decimal import Decimal

        return Decimal(self.price_cents) / 100

"""Categories and products: the names and prices the rankings are shown with."""

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models.signals import pre_delete
from django.dispatch import receiver

PRODUCT_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,64}$"

# The rankings count every sale on a board of this name; no real category may take the slug.
RESERVED_SLUG = "all"

CATEGORY_IN_USE = "a category that has sales cannot be deleted (its sales name it forever); rename it instead"


class Category(models.Model):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)
    # Created from a sale event rather than by an editor: its name needs completing.
    is_placeholder = models.BooleanField(default=False, db_index=True)
    # Set when a stored sale first names the category; never cleared, since raw sales are kept forever.
    has_sales = models.BooleanField(default=False, editable=False)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "categories"

    def __str__(self):
        return self.name


@receiver(pre_delete, sender=Category)
def _keep_categories_with_sales(sender, instance: Category, **kwargs):
    """Refuse to delete a category that sales name, for the ORM and the admin alike.

    The flag is read again under a row lock (the delete runs in a transaction),
    so an ingest that marks the category meanwhile either waits for the delete
    and then re-creates the category, or is seen here.
    """
    in_use = Category.objects.select_for_update().filter(pk=instance.pk, has_sales=True).exists()
    if in_use:
        raise models.ProtectedError(
            f"category '{instance.slug}' has sales and cannot be deleted; rename it instead", {instance}
        )


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
    # When an editor sets it, the product's release; else its earliest sale's time (the new releases).
    released_at = models.DateTimeField(
        "released at", null=True, blank=True, db_index=True, help_text="Leave empty: the first sale's time."
    )
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

"""`{% load salesrank %}`: `{% salesrank_badges product %}` ("#12 in Toys") and
`{% salesrank_bestsellers category limit=10 %}`. Each renders nothing, never an error, when salesrank
is slow or down."""

import logging

from django import template

from .. import reads

register = template.Library()
logger = logging.getLogger(__name__)


@register.inclusion_tag("salesrank_oscar/badges.html")
def salesrank_badges(product):
    try:
        badges = reads.product_badges(product)
    except Exception:  # a page never fails for its badges
        logger.exception("salesrank: the badges of product %s", getattr(product, "pk", product))
        badges = []
    return {"badges": badges}


@register.inclusion_tag("salesrank_oscar/bestsellers.html")
def salesrank_bestsellers(category, limit=10):
    try:
        bestsellers = reads.category_bestsellers(category, limit)
    except Exception:  # a page never fails for its best sellers
        logger.exception("salesrank: the best sellers of category %s", getattr(category, "pk", category))
        bestsellers = []
    return {"bestsellers": bestsellers, "category": category}

"""The shop's side of a test: orders placed the way Oscar places them; the example shop's worker."""

import os
import sys

import redis
from django.conf import settings
from oscar.core.loading import get_class, get_model
from oscar.test.factories import create_order

from tests import processes

SHOP = processes.ROOT / "examples" / "oscar_shop"


def order_placed(*lines, number=None):
    """An order of (product, quantity) lines, placed by Oscar's own OrderCreator.place_order (through
    Oscar's test factory, which totals the basket as a checkout does)."""
    Basket = get_model("basket", "Basket")
    basket = Basket.objects.create()
    basket.strategy = get_class("partner.strategy", "Selector")().strategy()
    for product, quantity in lines:
        basket.add_product(product, quantity)
    return create_order(basket=basket, number=number)


def worker(log_dir, salesrank) -> processes.Process:
    """The example shop's Celery worker, with the example's own settings on this run's test database
    and queue, sending to `salesrank`; started, not waited for."""
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "shop.settings",
        "SHOP_DATABASE_NAME": settings.DATABASES["default"]["TEST"]["NAME"],
        "SHOP_CELERY_QUEUE": queue,
        "SALESRANK_URL": salesrank.url,
        "SALESRANK_TOKEN": salesrank.token,
        "PYTHONPATH": f"{processes.ROOT}:{SHOP}",
    }
    command = [sys.executable, "-m", "celery", "-A", "shop", "worker", "--pool", "solo", "--loglevel", "INFO"]
    command += ["--without-mingle", "--without-gossip", "-n", f"{queue}@%h"]
    return processes.start(
        "shop-worker", command, log_dir=log_dir, env=env, kind="worker", ready=processes.says(" ready.")
    )


def queue_delete() -> None:
    """The run's Celery queue, gone from the broker."""
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")

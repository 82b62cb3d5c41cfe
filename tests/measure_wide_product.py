"""Time and bytes of /v1/products/wide1/ranks and /p/wide1/ for a product filed under 5,000 categories
(250 sales naming 20 categories each, linked through the catalogue): `pytest -s tests/measure_wide_product.py`."""

import time

import pytest
from django.test import Client

from catalogue.models import Category, Product

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)


def test_measure(settings):
    settings.RANKINGS = {**settings.RANKINGS, "TICK_PARALLEL_FROM": 10**9}
    shop = Shop()
    for start in range(0, 250, 50):
        shop.send(
            *[
                shop.sale("wide1", categories=[f"w{n}-{k}" for k in range(20)])
                for n in range(start, start + 50)
            ]
        )
    product = Product.objects.get(product_id="wide1")
    product.categories.set(Category.objects.filter(slug__startswith="w"))
    assert product.categories.count() == 5000
    shop.send(shop.sale("narrow1", categories=["w0-0"]))
    shop.tick()
    client = Client()
    client.get("/v1/products/narrow1/ranks?window=1h", REMOTE_ADDR="10.0.1.1")  # the process warmed up
    for url in (
        "/v1/products/wide1/ranks?window=1h",
        "/p/wide1/?window=1h",
        "/v1/products/narrow1/ranks?window=1h",
        "/p/narrow1/?window=1h",
    ):
        for run in range(3):
            started = time.perf_counter()
            reply = client.get(url, REMOTE_ADDR=f"10.0.0.{run}")
            took = time.perf_counter() - started
            print(f"{url}: {reply.status_code} {took:.3f} s {len(reply.content) / 1000:.0f} KB")

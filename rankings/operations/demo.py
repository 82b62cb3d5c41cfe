"""Demo data: a catalogue and synthetic sales shaped like a real shop's, large enough to measure.

The shape: a share of the sales (40%) in one hot category, cat0; products
whose popularity falls off like Zipf's law, so a few sell a lot and most sell
little; a share of the sales (20%) in two categories; and a few returns. Sales
are spread evenly over the last days, never ahead of the clock. The same seed
and `now` give the same events, so a second run finds only duplicates.
Events go through `sales_ingest`, validated like any other.

Engagement follows the sales' shape (the same hot category and skew): about
20 views and a tenth of a wish per sale, over the last day only (at the sales'
rate there), so that `make run`'s first tick folds a few hundred thousand
events rather than millions. They go through `engagements_ingest`, with ids.
"""

import bisect
import datetime as dt
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from tqdm import tqdm

from catalogue.models import Category, Product
from catalogue.money import cents_text
from rankings.conf import rankings_settings
from rankings.ingest.engagement import engagements_ingest
from rankings.ingest.imports import CHUNK_EVENTS, chunked
from rankings.ingest.sales import IngestResult, sales_ingest

CATEGORY_NAMES = [
    "Toys & Games", "Books", "Garden", "Kitchen", "Electronics", "Music", "Films", "Sports", "Outdoors",
    "Beauty", "Health", "Baby", "Pets", "Office", "Tools", "Automotive", "Jewellery", "Watches", "Shoes",
    "Luggage", "Clothing", "Crafts", "Party Supplies", "Lighting", "Furniture", "Bedding", "Bath",
    "Cleaning", "Grocery", "Coffee & Tea", "Wine", "Stationery", "Art Supplies", "Board Games",
    "Puzzles", "Video Games", "Computers", "Cameras", "Phones", "Audio", "Smart Home", "Fitness",
    "Cycling", "Camping", "Fishing", "Travel", "Gifts", "Seasonal", "Collectibles", "Vintage",
]  # fmt: skip
_ADJECTIVES = [
    "Red", "Blue", "Green", "Golden", "Silver", "Tiny", "Giant", "Classic", "Modern", "Rustic", "Smart",
    "Wooden", "Folding", "Deluxe", "Compact", "Vintage", "Bright", "Quiet", "Rapid", "Cosy",
]  # fmt: skip
_NOUNS = [
    "Kite", "Lamp", "Kettle", "Notebook", "Backpack", "Puzzle", "Speaker", "Mug", "Chair", "Blanket",
    "Torch", "Clock", "Candle", "Scarf", "Helmet", "Planter", "Teapot", "Camera", "Drone", "Yo-yo",
    "Tent", "Compass", "Whistle", "Umbrella", "Wallet",
]  # fmt: skip

# Zipf exponent of product popularity within a category: with 1.0 and 400
# products a category's favourite takes about a seventh of its sales (p0 takes
# about a tenth of cat0's, its 7-day units in the full demo) and the top 20 about half.
ZIPF_EXPONENT = 1.0


@dataclass(frozen=True)
class DemoShape:
    sales: int = 200_000
    days: float = 14
    categories: int = 50
    products: int = 20_000
    hot_share: float = 0.40  # of sales in cat0
    two_category_share: float = 0.20  # of sales that also count in a second category
    return_share: float = 0.01  # of sales followed by a return of some of their units
    views_per_sale: float = 20
    wishes_per_sale: float = 0.1
    engagement_days: float = 1  # views and wishes over the last this many days only (see above)


@dataclass
class DemoReport:
    categories: int
    products: int
    events: int
    result: IngestResult
    engagement_events: int = 0
    engagement: IngestResult | None = None

    def summary(self) -> str:
        r = self.result
        text = (
            f"catalogue: {self.categories} categories, {self.products} products; "
            f"{self.events} events: {r.accepted} accepted, {r.duplicates} duplicates, {len(r.rejected)} rejected"
        )
        if self.engagement is not None:
            e = self.engagement
            text += (
                f"; {self.engagement_events} views and wishes: {e.accepted} accepted, {e.duplicates} duplicates, "
                f"{len(e.rejected)} rejected"
            )
        return text


def category_name(index: int) -> str:
    if index < len(CATEGORY_NAMES):
        return CATEGORY_NAMES[index]
    return f"{CATEGORY_NAMES[index % len(CATEGORY_NAMES)]} {index // len(CATEGORY_NAMES) + 1}"


def demo_catalogue(*, shape: DemoShape, seed: int) -> dict[str, tuple[int, list[str]]]:
    """The catalogue as data: product id -> (price in cents, category slugs).

    Product i belongs to category i mod n (so every category has products,
    and p0 is the hot category's favourite) and to one other, never cat0,
    which is where its two-category sales also count.
    """
    rng = random.Random(f"catalogue-{seed}")
    n = shape.categories
    catalogue = {}
    for i in range(shape.products):
        primary = i % n
        secondary = primary
        if n > 2:
            while secondary in (primary, 0):
                secondary = rng.randrange(1, n)
        # Prices spread like a shop's: most around 20, a few in the hundreds, ending in .99.
        price_cents = min(int(math.exp(rng.gauss(math.log(20), 0.9))), 2000) * 100 + 99
        catalogue[f"p{i}"] = (price_cents, [f"cat{primary}"] + ([f"cat{secondary}"] if n > 2 else []))
    return catalogue


def demo_events(
    *, shape: DemoShape, seed: int, now: dt.datetime, catalogue: dict[str, tuple[int, list[str]]]
) -> Iterator[dict]:
    """The sale events, in the order they are sent: each sale, and now and then a later return of it."""
    rng = random.Random(f"sales-{seed}")
    n = shape.categories
    end = now.timestamp()
    span = shape.days * 86400
    by_category = _popularity_by_category(catalogue, n)
    other_categories = list(range(1, n)) if n > 1 else [0]
    anchor = int(end)
    for i in range(shape.sales):
        home = 0 if rng.random() < shape.hot_share else rng.choice(other_categories)
        products, cumulative = by_category[home]
        product_id = products[bisect.bisect_left(cumulative, rng.random() * cumulative[-1])]
        price_cents, (primary, *others) = catalogue[product_id]
        categories = [primary]  # the category drawn: every product drawn from it has it first
        if others and rng.random() < shape.two_category_share:
            categories.append(others[0])
        qty = rng.choice((1, 1, 1, 1, 1, 1, 2, 2, 3))
        # A tenth of the lines carry a 10% discount: the amount is what the buyer paid.
        cents = price_cents * qty * (9 if rng.random() < 0.1 else 10) // 10
        ts = int(end - rng.random() * span)  # whole seconds, rounded down: never ahead of `now`
        event_id = f"demo{seed}-{anchor}-{i}"
        yield {
            "id": event_id,
            "ts": ts,
            "productId": product_id,
            "categories": categories,
            "qty": qty,
            "amount": cents_text(cents),
        }
        if rng.random() < shape.return_share:
            yield {
                "id": f"{event_id}-return",
                "ts": min(ts + rng.randrange(3 * 86400), int(end)),
                "productId": product_id,
                "qty": -rng.randint(1, qty),
                "returnOf": event_id,
            }


def demo_engagement_events(
    *, shape: DemoShape, seed: int, now: dt.datetime, catalogue: dict[str, tuple[int, list[str]]]
) -> Iterator[dict]:
    """Views and wishes of the last `engagement_days`, drawn like the sales: the hot category's share,
    each category's skewed popularity; as many per day as the sales' rate times views_per_sale."""
    rng = random.Random(f"engagement-{seed}")
    n = shape.categories
    end = now.timestamp()
    days = min(shape.engagement_days, shape.days)
    per_sale = shape.views_per_sale + shape.wishes_per_sale
    count = round(shape.sales * days / shape.days * per_sale) if shape.days else 0
    wish_share = shape.wishes_per_sale / per_sale if per_sale else 0
    by_category = _popularity_by_category(catalogue, n)
    other_categories = list(range(1, n)) if n > 1 else [0]
    anchor = int(end)
    for i in range(count):
        home = 0 if rng.random() < shape.hot_share else rng.choice(other_categories)
        products, cumulative = by_category[home]
        product_id = products[bisect.bisect_left(cumulative, rng.random() * cumulative[-1])]
        yield {
            "id": f"demo{seed}-{anchor}-e{i}",
            "ts": int(end - rng.random() * days * 86400),
            "productId": product_id,
            "categories": [catalogue[product_id][1][0]],
            "kind": "wish" if rng.random() < wish_share else "view",
        }


def _popularity_by_category(catalogue, n: int) -> dict[int, tuple[list[str], list[float]]]:
    """For each category, its products and their cumulative Zipf weights (by rank: product number)."""
    members: dict[int, list[str]] = {c: [] for c in range(n)}
    for product_id, (_, slugs) in catalogue.items():
        members[int(slugs[0][3:])].append(product_id)
    table = {}
    for category, product_ids in members.items():
        product_ids.sort(key=lambda pid: int(pid[1:]))
        weights = [1 / rank**ZIPF_EXPONENT for rank in range(1, len(product_ids) + 1)]
        table[category] = (product_ids, list(itertools.accumulate(weights)))
    return table


def demo_seed(
    *,
    shape: DemoShape | None = None,
    seed: int = 0,
    now: dt.datetime | None = None,
    progress: bool = False,
) -> DemoReport:
    """Create the demo catalogue and ingest its sales, in chunks of the API's batch size."""
    shape = shape or DemoShape()
    if shape.categories < 1 or shape.products < shape.categories:
        raise ValueError("need at least one category and at least one product per category")
    now = now or timezone.now()
    catalogue = demo_catalogue(shape=shape, seed=seed)
    _store_catalogue(shape, catalogue)
    result = IngestResult()
    events = demo_events(shape=shape, seed=seed, now=now, catalogue=catalogue)
    count = 0
    expected = round(shape.sales * (1 + shape.return_share))
    with tqdm(total=expected, unit="ev", unit_scale=True, desc="demo sales", disable=not progress) as bar:
        for chunk in chunked(events, CHUNK_EVENTS):
            result.merge(sales_ingest(events=chunk, source="demo"), offset=count)
            count += len(chunk)
            bar.update(len(chunk))
    engagement = IngestResult()
    engaged = 0
    events = demo_engagement_events(shape=shape, seed=seed, now=now, catalogue=catalogue)
    with tqdm(unit="ev", unit_scale=True, desc="demo views and wishes", disable=not progress) as bar:
        for chunk in chunked(events, rankings_settings.MAX_ENGAGEMENT_BATCH_EVENTS):
            engagement.merge(engagements_ingest(events=chunk, source="engage-demo"), offset=engaged)
            engaged += len(chunk)
            bar.update(len(chunk))
    return DemoReport(
        categories=shape.categories,
        products=shape.products,
        events=count,
        result=result,
        engagement_events=engaged,
        engagement=engagement,
    )


@transaction.atomic
def _store_catalogue(shape: DemoShape, catalogue: dict[str, tuple[int, list[str]]]) -> None:
    """Categories and products; the demo's names and prices replace those of existing ones."""
    slugs = [f"cat{i}" for i in range(shape.categories)]
    Category.objects.bulk_create(
        [Category(slug=slug, name=category_name(i), is_placeholder=False) for i, slug in enumerate(slugs)],
        update_conflicts=True,
        unique_fields=["slug"],
        update_fields=["name", "is_placeholder"],
    )
    rng = random.Random(f"names-{shape.products}")
    names = [f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}" for _ in range(shape.products)]
    Product.objects.bulk_create(
        [
            Product(product_id=pid, name=f"{names[i]} {i}", price_cents=price, is_placeholder=False)
            for i, (pid, (price, _)) in enumerate(catalogue.items())
        ],
        batch_size=5000,
        update_conflicts=True,
        unique_fields=["product_id"],
        update_fields=["name", "price_cents", "is_placeholder"],
    )
    category_ids = dict(Category.objects.filter(slug__in=slugs).values_list("slug", "id"))
    product_ids = dict(Product.objects.filter(product_id__in=list(catalogue)).values_list("product_id", "id"))
    Link = Product.categories.through
    Link.objects.bulk_create(
        [
            Link(product_id=product_ids[pid], category_id=category_ids[slug])
            for pid, (_, product_slugs) in catalogue.items()
            for slug in product_slugs
        ],
        batch_size=10000,
        ignore_conflicts=True,
    )

from decimal import Decimal as D

from django.core.management.base import BaseCommand
from django.db import transaction
from oscar.core.loading import get_model

# category path -> products (title, price)
CATALOGUE = {
    ("Toys", "Board games"): [("Chess set", "25.00"), ("Go board", "40.00"), ("Backgammon", "18.50")],
    ("Toys", "Puzzles"): [("Jigsaw of the Alps", "14.00"), ("Wooden tangram", "9.50")],
    ("Books",): [
        ("World atlas", "32.00"),
        ("Field guide to birds", "21.00"),
        ("A history of games", "16.00"),
    ],
}


class Command(BaseCommand):
    help = (
        "Load the example shop's demo catalogue (categories, products with prices and stock, the UK "
        "as a shipping country) unless it has products already."
    )

    @transaction.atomic
    def handle(self, *args, **options):
        Product = get_model("catalogue", "Product")
        if Product.objects.exists():
            self.stdout.write("the shop has products already")
            return
        Category = get_model("catalogue", "Category")
        ProductClass = get_model("catalogue", "ProductClass")
        Partner = get_model("partner", "Partner")
        Country = get_model("address", "Country")
        Country.objects.update_or_create(
            iso_3166_1_a2="GB",
            defaults={
                "name": "United Kingdom",
                "printable_name": "United Kingdom",
                "is_shipping_country": True,
            },
        )
        kind, _ = ProductClass.objects.get_or_create(name="Goods", defaults={"track_stock": True})
        warehouse, _ = Partner.objects.get_or_create(name="Example warehouse")
        made = 0
        for path, products in CATALOGUE.items():
            category = _category(Category, path)
            for title, price in products:
                product = Product.objects.create(
                    title=title, product_class=kind, description=f"A fine {title.lower()}."
                )
                product.stockrecords.create(
                    partner=warehouse, partner_sku=f"sku-{product.pk}", price=D(price), num_in_stock=1000
                )
                product.categories.add(category)
                made += 1
        self.stdout.write(f"{made} products in {len(CATALOGUE)} categories")


def _category(Category, path):
    """The category at `path` (names from the root), made where missing."""
    parent = None
    for name in path:
        siblings = Category.get_root_nodes() if parent is None else parent.get_children()
        found = siblings.filter(name=name).first()
        if found is None:
            found = Category.add_root(name=name) if parent is None else parent.add_child(name=name)
        parent = found
    return parent

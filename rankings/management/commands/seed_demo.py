from django.core.management.base import BaseCommand

from rankings.management.arguments import instant
from rankings.operations.demo import DemoShape, demo_seed


class Command(BaseCommand):
    help = (
        "Create a demo catalogue (cat0…, p0…) and ingest synthetic sales shaped like a real shop's: "
        "200,000 sales over 14 days, 40%% in the hot category cat0, skewed product popularity, "
        "20%% of sales in two categories, 1%% followed by a return; and about 20 views and 0.1 wishes "
        "per sale over the last day, with the same skew. The same --seed and --now give the same events."
    )

    def add_arguments(self, parser):
        default = DemoShape()
        parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
        parser.add_argument("--sales", type=int, default=default.sales, help="number of sales")
        parser.add_argument("--days", type=float, default=default.days, help="days of history before now")
        parser.add_argument("--categories", type=int, default=default.categories, help="number of categories")
        parser.add_argument("--products", type=int, default=default.products, help="number of products")
        parser.add_argument(
            "--views-per-sale", type=float, default=default.views_per_sale, help="views per sale (default 20)"
        )
        parser.add_argument(
            "--engagement-days",
            type=float,
            default=default.engagement_days,
            help="days of views and wishes before now (default 1)",
        )
        parser.add_argument(
            "--no-engagement",
            action="store_true",
            help="sales only: no views or wishes (for benchmarks of sales)",
        )
        parser.add_argument("--now", type=instant, help="end of the history, ISO-8601 (default: the clock)")
        parser.add_argument("--no-progress", action="store_true", help="do not show the progress bar")

    def handle(self, *args, **options):
        shape = DemoShape(
            sales=options["sales"],
            days=options["days"],
            categories=options["categories"],
            products=options["products"],
            views_per_sale=0 if options["no_engagement"] else options["views_per_sale"],
            wishes_per_sale=0 if options["no_engagement"] else DemoShape().wishes_per_sale,
            engagement_days=options["engagement_days"],
        )
        report = demo_seed(
            shape=shape, seed=options["seed"], now=options["now"], progress=not options["no_progress"]
        )
        self.stdout.write(report.summary())

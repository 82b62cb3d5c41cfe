from django.core.management.base import BaseCommand
from tqdm import tqdm

from rankings.engine.names_copy import names_copy


class Command(BaseCommand):
    help = (
        "Copy every product name of the catalogue into Redis now, and delete those of products it no "
        "longer has: a whole pass of the walk the worker takes a step of every NAMES_COPY_SECONDS "
        "(after a bulk load of products, or after Redis lost its data)."
    )

    def handle(self, *args, **options):
        with tqdm(desc="names", unit=" products", leave=False) as bar:
            total = names_copy(progress=lambda step: bar.update(step.products))
        self.stdout.write(
            f"{total.products} products read, {total.mended} names written, "
            f"{total.pruned} of deleted products deleted"
        )

from django.core.management.base import BaseCommand, CommandError

from salesrank_oscar.client import Refused, Unreachable
from salesrank_oscar.sync import catalogue_sync


class Command(BaseCommand):
    help = (
        "Push the shop's category tree and every product (id or UPC, title, price, categories, date "
        "created as releasedAt) to salesrank's catalogue. A change of the tree there takes effect "
        "at salesrank's next rebuild."
    )

    def handle(self, *args, **options):
        try:
            synced = catalogue_sync()
        except (Unreachable, Refused) as error:
            raise CommandError(f"salesrank did not take the catalogue: {error}") from error
        for reason in synced.reasons:
            self.stderr.write(reason)
        self.stdout.write(f"created {synced.created}, updated {synced.updated}, rejected {synced.rejected}")
        if synced.rejected:
            raise CommandError(f"{synced.rejected} rejected", returncode=2)

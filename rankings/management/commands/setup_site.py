from django.core.management.base import BaseCommand

from rankings.operations.first_run import site_setup


class Command(BaseCommand):
    help = (
        "Prepare a fresh site: load the demo data when there are no sales, create the admin user "
        "and an ingest token (printed once)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--no-demo", action="store_true", help="do not load the demo data")

    def handle(self, *args, **options):
        site_setup(demo=not options["no_demo"], out=self.stdout)

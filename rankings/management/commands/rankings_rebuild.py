from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from rankings.operations.backfill import VersionError, version_build


class Command(BaseCommand):
    help = (
        "Rebuild every board from raw sales into a new version while the active one keeps serving; "
        "--activate switches to it when it is ready."
    )

    def add_arguments(self, parser):
        parser.add_argument("--activate", action="store_true", help="switch readers to the new version")

    def handle(self, *args, **options):
        with tqdm(total=100, unit="%", bar_format="{l_bar}{bar}| {n:.0f}% {elapsed} {postfix}") as bar:

            def progress(fraction: float, message: str) -> None:
                bar.n = round(fraction * 100)
                bar.set_postfix_str(message)

            try:
                version = version_build(activate=options["activate"], progress=progress)
            except VersionError as error:
                raise CommandError(str(error)) from error
        self.stdout.write(
            f"version {version.number}: {version.state}, {version.sales:,} raw sales at {version.rate:,.0f} sales/s"
        )

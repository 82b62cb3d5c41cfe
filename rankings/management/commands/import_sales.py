from django.core.management.base import BaseCommand, CommandError

from rankings.engine.shards import ShardCountMismatch
from rankings.ingest.imports import ImportFileError, sales_import


class Command(BaseCommand):
    help = (
        "Import sale events from FILE: JSON lines (one event object per line) or CSV with a header "
        "(id, ts, productId, qty, and optionally categories separated by | or ;, amount, returnOf; "
        "an empty cell means absent). Events are validated as by POST /v1/sales and stored in "
        "chunks of 5,000; rejected lines go to FILE.rejected.jsonl with their line number and reason."
    )
    importer = staticmethod(sales_import)

    def add_arguments(self, parser):
        parser.add_argument("file", help="path of the .jsonl or .csv file")
        parser.add_argument(
            "--format", choices=["jsonl", "csv"], help="file format (default: from the name, or sniffed)"
        )
        parser.add_argument("--no-progress", action="store_true", help="do not show the progress bar")

    def handle(self, *args, **options):
        try:
            report = self.importer(
                path=options["file"], file_format=options["format"], progress=not options["no_progress"]
            )
        except (ImportFileError, ShardCountMismatch) as error:
            raise CommandError(str(error)) from error
        self.stdout.write(report.summary())

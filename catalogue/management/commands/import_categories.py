from django.core.management.base import BaseCommand, CommandError

from catalogue.tree_import import TreeImportError, categories_import


class Command(BaseCommand):
    help = (
        "Create or update categories from FILE, a CSV of slug,name,parent (parent empty for a top-level "
        "category; a header row is optional). The whole file is checked first (no cycle, at most six "
        "levels) and written in one transaction. Moves in the tree are pending until a rebuild with the "
        "new tree is switched to (rankings_rebuild --activate, or the admin's ranking versions page)."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="path of the .csv file")

    def handle(self, *args, **options):
        try:
            with open(options["file"], newline="", encoding="utf-8-sig", errors="surrogateescape") as lines:
                report = categories_import(lines=lines)
        except OSError as error:
            raise CommandError(f"cannot read {options['file']}: {error}") from error
        except TreeImportError as error:
            raise CommandError(f"nothing imported: {error}") from error
        self.stdout.write(report.summary())

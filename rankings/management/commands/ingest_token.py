from django.core.management.base import BaseCommand, CommandError

from rankings.operations.tokens import UnknownPermission, ingest_token_create


class Command(BaseCommand):
    help = (
        "Make an API token for USERNAME (the user is made if missing) and print `token <key>`, once: "
        "only a hash of the key is stored. --permission grants the user a permission, e.g. add_sale, "
        "add_engagement, view_status (a rankings permission) or app_label.codename."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--permission", action="append", default=[], metavar="CODENAME", help="grant it (repeatable)"
        )

    def handle(self, *args, **options):
        try:
            key = ingest_token_create(username=options["username"], permissions=options["permission"])
        except UnknownPermission as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"token {key}")

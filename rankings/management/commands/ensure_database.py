from django.core.management.base import BaseCommand

from rankings.operations.first_run import database_ensure


class Command(BaseCommand):
    help = "Create the PostgreSQL database named by DATABASE_URL if it does not exist."

    def handle(self, *args, **options):
        created = database_ensure()
        self.stdout.write("database created" if created else "database exists")

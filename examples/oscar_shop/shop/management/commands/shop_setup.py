import secrets

import psycopg
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connection
from psycopg import sql


class Command(BaseCommand):
    help = (
        "Prepare the example shop: its database (made where missing), Oscar's tables, the demo "
        "catalogue and a dashboard user (its password printed once)."
    )

    def handle(self, *args, **options):
        if _database_ensure():
            self.stdout.write("shop database created")
        call_command("migrate", verbosity=0)
        call_command("shop_demo", stdout=self.stdout)
        User = get_user_model()
        if not User.objects.filter(username="admin").exists():
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser("admin", "admin@example.com", password)
            self.stdout.write(f"shop dashboard user: admin@example.com / {password}")


def _database_ensure() -> bool:
    """Create the shop's database if it does not exist; whether it did."""
    db = connection.settings_dict
    params = {"dbname": "postgres", "host": db["HOST"] or None, "user": db["USER"] or None}
    with psycopg.connect(**params, autocommit=True) as maintenance:
        if maintenance.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone():
            return False
        maintenance.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
    return True

"""First-run chores for `make run`: the database, demo data, an admin and an ingest token."""

import json
import secrets
from typing import Any

import psycopg
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone
from psycopg import sql

from rankings.engine.history import engine_clock, history_record
from rankings.engine.shards import active, version_layout
from rankings.engine.tree import version_tree
from rankings.models import Sale
from rankings.operations.tokens import ingest_token_create


def database_ensure() -> bool:
    """Create the configured database if it is missing; return whether it was created."""
    db = settings.DATABASES["default"]
    params: dict[str, Any] = {
        "dbname": "postgres",
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
    }
    with psycopg.connect(**{k: v for k, v in params.items() if v}, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone()
        if exists:
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
        return True


def demo_history(out) -> None:
    """The active version's hourly history from the demo's sales, as a rebuild records it: movers,
    rank arrows and rank history from the first page on."""
    version = active().number
    recorded = history_record(
        version=version, tree=version_tree(version), layout=version_layout(version), clock=engine_clock()
    )
    out.write(
        f"hourly history: {recorded.hours} hours, {recorded.boards:,} boards in {recorded.seconds:.1f} s"
    )


def site_setup(*, demo: bool, out) -> None:
    if demo and not Sale.objects.exists():
        out.write("no sales yet: loading the demo data (seed_demo)…")
        call_command("seed_demo", stdout=out)
        call_command("rankings_tick", stdout=out)
        demo_history(out)
    User = get_user_model()
    admin = User.objects.filter(username="admin").first()
    if admin is None:
        password = secrets.token_urlsafe(12)
        admin = User.objects.create_superuser("admin", "admin@example.com", password)
        out.write(f"admin user created: admin / {password}  (http://127.0.0.1:8000/admin/)")
    if not User.objects.filter(username="ingest").exists():
        key = ingest_token_create(username="ingest", permissions=["add_sale"])
        out.write(f"ingest token (keep it; shown once): {key}")
        event = {
            "id": "ord-1-line-1",
            "ts": timezone.now().replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            "productId": "p1",
            "categories": ["toys"],
            "qty": 1,
            "amount": "9.99",
        }
        out.write(
            f"  curl -H 'Authorization: Token {key}' -H 'Content-Type: application/json' "
            f"http://127.0.0.1:8000/v1/sales -d '{json.dumps({'events': [event]})}'"
        )

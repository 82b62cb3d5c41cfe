"""The SQL of this app's migrations, in files beside them: sql/<migration>.sql runs forwards and
sql/<migration>_reverse.sql undoes it; each opens with a comment saying what it does and why."""

from pathlib import Path

from django.db import migrations

FOLDER = Path(__file__).parent


def run_sql(migration: str) -> migrations.RunSQL:
    """The RunSQL of migration `migration` (its module's name): its two files' text, as PostgreSQL runs it."""
    forward, reverse = (FOLDER / f"{migration}{suffix}.sql" for suffix in ("", "_reverse"))
    return migrations.RunSQL(forward.read_text(encoding="utf-8"), reverse.read_text(encoding="utf-8"))

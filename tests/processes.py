"""Start real processes (commands, Celery) against this test run's database and Redis prefix."""

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def django_env(**extra) -> dict:
    """Environment for a child process that sees exactly what this test sees."""
    db = connection.settings_dict
    url = f"postgres://{db.get('USER') or ''}@{db.get('HOST') or ''}:{db.get('PORT') or 5432}/{db['NAME']}"
    if not db.get("HOST"):
        url = f"postgres:///{db['NAME']}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "salesrank_site.settings",
        "DATABASE_URL": url,
        "RANKINGS_KEY_PREFIX": settings.RANKINGS["KEY_PREFIX"],
        "RANKINGS_SHARDS": str(settings.RANKINGS["SHARDS"]),
        "SECRET_KEY": "test-only-key",
        "PYTHONPATH": str(ROOT),
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


def manage(*args, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, **popen)


def python(code: str, env: dict, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, **popen)

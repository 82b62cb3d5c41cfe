"""The migrations describe the models exactly: `make run` and the tests build their tables by migrating."""

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_is_missing_a_migration():
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out)
    except SystemExit as exit_:
        pytest.fail(f"a migration is missing:\n{out.getvalue()} (exit {exit_.code})")

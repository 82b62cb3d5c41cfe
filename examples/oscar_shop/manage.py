#!/usr/bin/env python
"""The example shop's command line (Django's manage.py)."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # The shop's package and, from the repository, the salesrank_oscar app.
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent.parent)]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)

"""WSGI entry point for gunicorn."""

import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "salesrank_site.settings")

application = get_wsgi_application()

# Everything loaded so far lives as long as the process: keep the garbage
# collector from walking it again on every collection during requests.
gc.freeze()

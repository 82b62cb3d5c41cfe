"""The floor for read benchmarks: a bare Django view returning a constant JSON body.

Same settings and middleware as the real site; only the work of the view is
gone. Served by gunicorn as `bench.floor:application`; the body is read from
the file named by BENCH_FLOOR_BODY.
"""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.http import HttpResponse
from django.urls import path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "salesrank_site.settings")

with open(os.environ["BENCH_FLOOR_BODY"], "rb") as body_file:
    BODY = body_file.read()


def floor(request):
    response = HttpResponse(BODY, content_type="application/json")
    response["Cache-Control"] = "max-age=2, public"
    return response


urlpatterns = [path("floor", floor)]
settings.ROOT_URLCONF = __name__
application = get_wsgi_application()

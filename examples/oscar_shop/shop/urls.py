"""The example shop's URLs: Oscar's, and the Django admin (where the outbox's rejected lines show)."""

from django.apps import apps
from django.conf import settings
from django.conf.urls.static import static
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("i18n/", include("django.conf.urls.i18n")),  # Oscar's language switch
    path("admin/", admin.site.urls),
    path("", include(apps.get_app_config("oscar").urls[0])),
    *static(settings.MEDIA_URL, document_root=settings.MEDIA_ROOT),
]

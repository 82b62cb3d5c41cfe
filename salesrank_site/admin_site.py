"""The admin site: Django's, with an autocomplete that refuses a NUL character.

PostgreSQL refuses NUL in text. The change lists' search boxes already refuse it (Django's
search form), but the autocomplete boxes hand their term to the search as typed, so a NUL would
fail the query with a 500.
"""

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import JsonResponse


class AdminSite(admin.AdminSite):
    def autocomplete_view(self, request):
        if "\x00" in request.GET.get("term", ""):
            return JsonResponse({"results": [], "pagination": {"more": False}})
        return super().autocomplete_view(request)


class SiteAdminConfig(AdminConfig):
    default_site = "salesrank_site.admin_site.AdminSite"

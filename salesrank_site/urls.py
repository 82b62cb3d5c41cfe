from django.contrib import admin
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from rankings import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/sales", api.SalesIngestApi.as_view(), name="sales-ingest"),
    path("v1/schema", SpectacularAPIView.as_view(), name="schema"),
    path("v1/docs", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
]

"""Root URL configuration: admin, the versioned API, its schema and docs, readiness, and the
dashboard."""

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from controlplane.views import HealthView, readiness

api_v1: list[URLPattern | URLResolver] = [
    path("health", HealthView.as_view(), name="health"),
    path("", include("runtime.api.urls")),
    path("", include("tenancy.urls")),
    path("", include("inventory.urls")),
    path("", include("billing.urls")),
]

urlpatterns = [
    path("readyz", readiness, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include((api_v1, "api"), namespace="v1")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("", include("dashboard.urls")),
]

handler404 = "controlplane.views.page_not_found"
handler500 = "controlplane.views.server_error"

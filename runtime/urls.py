from django.urls import path
from rest_framework.routers import SimpleRouter

from runtime import views

router = SimpleRouter(trailing_slash=False)
router.register("packages", views.PackageViewSet, basename="package")

urlpatterns = [
    *router.urls,
    path("gpu-units", views.UnitListView.as_view(), name="unit-list"),
    path("gpu-units/<str:name>", views.UnitDetailView.as_view(), name="unit-detail"),
    path("gpu-units/<str:name>/events", views.UnitEventsView.as_view(), name="unit-events"),
    path(
        "operations/<str:operation_id>",
        views.OperationDetailView.as_view(),
        name="operation-detail",
    ),
]

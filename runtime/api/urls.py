from django.urls import path

from runtime.api import quota, views

packages = views.PackageViewSet.as_view({"get": "list"})
package = views.PackageViewSet.as_view({"get": "retrieve"})

urlpatterns = [
    path("packages", packages, name="package-list"),
    path("packages/<str:pk>", package, name="package-detail"),
    path("gpu-units", views.UnitListView.as_view(), name="unit-list"),
    path("gpu-units/<str:name>", views.UnitDetailView.as_view(), name="unit-detail"),
    path("gpu-units/<str:name>/stop", views.UnitStopView.as_view(), name="unit-stop"),
    path("gpu-units/<str:name>/start", views.UnitStartView.as_view(), name="unit-start"),
    path("gpu-units/<str:name>/restart", views.UnitRestartView.as_view(), name="unit-restart"),
    path("gpu-units/<str:name>/events", views.UnitEventsView.as_view(), name="unit-events"),
    path("gpu-units/<str:name>/logs", views.UnitLogsView.as_view(), name="unit-logs"),
    path("regions", views.RegionListView.as_view(), name="region-list"),
    path("quota", quota.QuotaView.as_view(), name="quota"),
    path("reservations", views.ReservationListView.as_view(), name="reservation-list"),
    path(
        "reservations/<str:name>",
        views.ReservationDetailView.as_view(),
        name="reservation-detail",
    ),
    path("gpu-storages", views.StorageListView.as_view(), name="storage-list"),
    path("gpu-storages/<str:name>", views.StorageDetailView.as_view(), name="storage-detail"),
    path("secrets", views.SecretListView.as_view(), name="secret-list"),
    path("secrets/<str:name>", views.SecretDetailView.as_view(), name="secret-detail"),
    path(
        "operations/<str:operation_id>",
        views.OperationDetailView.as_view(),
        name="operation-detail",
    ),
]

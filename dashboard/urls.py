"""Dashboard routes, mounted at the site root beside /admin/ and /api/."""

from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard import resources, views, webhook_views
from runtime.models import OperationKind

app_name = "dashboard"

urlpatterns = [
    path("", views.OverviewView.as_view(), name="overview"),
    path("live/", views.OverviewView.as_view(live=True), name="overview-live"),
    path("units/", views.UnitListView.as_view(), name="unit-list"),
    path("units/live/", views.UnitListView.as_view(live=True), name="unit-rows"),
    path("units/new", views.UnitCreateView.as_view(), name="unit-create"),
    path("units/<uuid:uid>/", views.UnitDetailView.as_view(), name="unit-detail"),
    path("units/<uuid:uid>/live/", views.UnitDetailView.as_view(live=True), name="unit-live"),
    path("units/<uuid:uid>/delete/", views.UnitDeleteView.as_view(), name="unit-delete"),
    path(
        "units/<uuid:uid>/stop/",
        views.UnitActionView.as_view(kind=OperationKind.STOP),
        name="unit-stop",
    ),
    path(
        "units/<uuid:uid>/start/",
        views.UnitActionView.as_view(kind=OperationKind.START),
        name="unit-start",
    ),
    path(
        "units/<uuid:uid>/restart/",
        views.UnitActionView.as_view(kind=OperationKind.RESTART),
        name="unit-restart",
    ),
    path("units/<uuid:uid>/edit/", views.UnitEditView.as_view(), name="unit-edit"),
    path("units/<uuid:uid>/log/", views.UnitLogView.as_view(), name="unit-log"),
    path("units/<uuid:uid>/log/live/", views.UnitLogView.as_view(live=True), name="unit-log-live"),
    path("packages/", views.PackageListView.as_view(), name="package-list"),
    path("packages/live/", views.PackageListView.as_view(live=True), name="package-live"),
    path("usage/", views.UsageView.as_view(), name="usage"),
    path("statements/", views.StatementView.as_view(), name="statement"),
    path("statements/<str:month>/", views.StatementView.as_view(), name="statement-month"),
    path(
        "statements/<str:month>.csv",
        views.StatementView.as_view(),
        {"as_csv": True},
        name="statement-csv",
    ),
    path("tenant/", views.ChooseTenantView.as_view(), name="choose-tenant"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # A tenant's storages, reservations, SSH keys, secrets, API keys and webhooks.
    *(route for page in resources.PAGES for route in resources.routes(page)),
    path("webhooks/<str:key>/test/", webhook_views.WebhookTestView.as_view(), name="webhook-test"),
    path(
        "webhooks/<str:key>/rotate/",
        webhook_views.WebhookRotateView.as_view(),
        name="webhook-rotate",
    ),
    path(
        "webhooks/<str:key>/deliveries/",
        webhook_views.WebhookDeliveriesView.as_view(),
        name="webhook-deliveries",
    ),
]

from django.urls import path

from billing import views

urlpatterns = [
    path("usage", views.UsageView.as_view(), name="usage"),
    path("budget", views.BudgetView.as_view(), name="budget"),
    path("usage/statements/<str:month>", views.StatementView.as_view(), name="statement"),
    path("operator/usage", views.OperatorUsageView.as_view(), name="operator-usage"),
    path(
        "operator/usage/exports",
        views.OperatorUsageExportsView.as_view(),
        name="operator-usage-exports",
    ),
    path(
        "operator/usage/exports/<str:id>",
        views.OperatorUsageExportView.as_view(),
        name="operator-usage-export",
    ),
    path(
        "operator/usage/exports/<str:id>/download",
        views.OperatorUsageExportDownloadView.as_view(),
        name="operator-usage-export-download",
    ),
]

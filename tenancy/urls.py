from django.urls import path

from tenancy import views

urlpatterns = [
    path("ssh-keys", views.SSHKeyListView.as_view(), name="ssh-key-list"),
    path("ssh-keys/<str:name>", views.SSHKeyDetailView.as_view(), name="ssh-key-detail"),
    path("audit-events", views.AuditEventListView.as_view(), name="audit-event-list"),
    path(
        "operator/audit-events",
        views.OperatorAuditEventListView.as_view(),
        name="operator-audit-event-list",
    ),
]

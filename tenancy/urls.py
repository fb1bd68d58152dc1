from django.urls import path

from tenancy import views

urlpatterns = [
    path("ssh-keys", views.SSHKeyListView.as_view(), name="ssh-key-list"),
    path("ssh-keys/<str:name>", views.SSHKeyDetailView.as_view(), name="ssh-key-detail"),
    path("webhooks", views.WebhookListView.as_view(), name="webhook-list"),
    path("webhooks/<str:id>", views.WebhookDetailView.as_view(), name="webhook-detail"),
    path(
        "webhooks/<str:id>/rotate-secret",
        views.WebhookRotateSecretView.as_view(),
        name="webhook-rotate-secret",
    ),
    path("webhooks/<str:id>/test", views.WebhookTestView.as_view(), name="webhook-test"),
    path(
        "webhooks/<str:id>/deliveries",
        views.WebhookDeliveryListView.as_view(),
        name="webhook-delivery-list",
    ),
    path("audit-events", views.AuditEventListView.as_view(), name="audit-event-list"),
    path(
        "operator/audit-events",
        views.OperatorAuditEventListView.as_view(),
        name="operator-audit-event-list",
    ),
]

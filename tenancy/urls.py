from django.urls import path

from tenancy import views

urlpatterns = [
    path("ssh-keys", views.SSHKeyListView.as_view(), name="ssh-key-list"),
    path("ssh-keys/<str:name>", views.SSHKeyDetailView.as_view(), name="ssh-key-detail"),
]

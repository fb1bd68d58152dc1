from django.urls import path

from inventory.views import OperatorInventoryView

urlpatterns = [
    path("operator/inventory", OperatorInventoryView.as_view(), name="operator-inventory"),
]

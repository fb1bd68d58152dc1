"""The product's URLs plus the baseline views under /bench/."""

from django.urls import path

from bench import views
from controlplane.urls import handler404, handler500
from controlplane.urls import urlpatterns as product_urlpatterns

urlpatterns = [
    path("bench/insert", views.insert, name="bench-insert"),
    path("bench/units", views.select_units, name="bench-units"),
    *product_urlpatterns,
]

__all__ = ["handler404", "handler500", "urlpatterns"]

from django.apps import AppConfig

from catalog import offers as catalog_offers
from controlplane import health, metrics


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Cluster inventory"

    def ready(self) -> None:
        # Modules that read the models load once the app registry is ready (Django's rule).
        from inventory import offers
        from inventory.health import check_inventory, collect_gauges

        health.register("inventory", check_inventory)
        metrics.register_collector(collect_gauges)
        catalog_offers.register(offers.capacity_problem)

from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Cluster inventory"

    def ready(self) -> None:
        from catalog import offers as catalog_offers
        from controlplane import health, metrics
        from inventory import offers
        from inventory.health import check_inventory, collect_gauges

        health.register("inventory", check_inventory)
        metrics.register_collector(collect_gauges)
        catalog_offers.register(offers.capacity_problem)

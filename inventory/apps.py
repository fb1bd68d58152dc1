from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Cluster inventory"

    def ready(self) -> None:
        from controlplane import health, metrics
        from inventory.health import check_inventory, collect_gauges

        health.register("inventory", check_inventory)
        metrics.register_collector(collect_gauges)

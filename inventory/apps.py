from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Cluster inventory"

    def ready(self) -> None:
        from controlplane import health
        from inventory.health import check_inventory

        health.register("inventory", check_inventory)

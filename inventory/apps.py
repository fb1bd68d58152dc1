from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate

from catalog import offers as catalog_offers
from controlplane import health, metrics, networks, queues
from controlplane.kube import clusters as kube_clusters


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Cluster inventory"

    def ready(self) -> None:
        # Modules that read the models load once the app registry is ready (Django's rule).
        from inventory import clusters, offers
        from inventory.health import check_inventory, collect_gauges

        health.register("inventory", check_inventory)
        metrics.register_collector(collect_gauges)
        catalog_offers.register(offers.capacity_problem)
        catalog_offers.register_placement(offers.placement_problems)
        kube_clusters.register(clusters.reach)
        queues.register(clusters.enabled_names)
        networks.register(clusters.all_ranges)

        def register_stand_in(**kwargs: Any) -> None:
            # After `migrate` (and a test database's flush), a registry with no cluster gets
            # the process's own as its first row, so ops see it in the admin.
            clusters.ensure_registered()

        post_migrate.connect(register_stand_in, sender=self, weak=False)

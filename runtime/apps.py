from django.apps import AppConfig
from django.core import checks


class RuntimeConfig(AppConfig):
    name = "runtime"
    verbose_name = "GPU units"

    def ready(self) -> None:
        from controlplane import health, metrics
        from inventory import clusters
        from runtime import access, gauges, lifecycle, orders
        from runtime.control import observer
        from runtime.models import GPUUnit
        from tenancy import services as tenancy_services

        # Lower layers cannot import runtime; it hands them what they need from here.
        if lifecycle.ssh_key_removed not in tenancy_services.SSH_KEY_REMOVED:
            tenancy_services.SSH_KEY_REMOVED.append(lifecycle.ssh_key_removed)
        clusters.register_live_units(
            lambda name: GPUUnit.objects.live().filter(cluster=name).count()
        )
        health.register("observer", observer.check_observer, beside=True)
        metrics.register_collector(gauges.collect)
        checks.register(orders.check_order_models)
        checks.register(access.check_settings)

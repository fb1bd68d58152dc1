from django.apps import AppConfig
from django.db.models.signals import post_migrate


class TenancyConfig(AppConfig):
    name = "tenancy"
    verbose_name = "Tenants and API keys"

    def ready(self) -> None:
        from tenancy import schema  # noqa: F401  (registers the OpenAPI auth extension)
        from tenancy.staff import make_staff_groups

        post_migrate.connect(make_staff_groups, sender=self, dispatch_uid="tenancy.staff_groups")

from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "tenancy"
    verbose_name = "Tenants and API keys"

    def ready(self) -> None:
        from tenancy import schema  # noqa: F401  (registers the OpenAPI auth extension)

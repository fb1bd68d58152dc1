from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"
    verbose_name = "GPU units"

    def ready(self) -> None:
        from runtime import schema  # noqa: F401  (registers the OpenAPI auth extension)

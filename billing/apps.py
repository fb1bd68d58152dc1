from django.apps import AppConfig
from django.db.models.signals import post_save


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        # Modules that read the models load once the app registry is ready (Django's rule).
        from billing import prices

        # The catalog knows nothing of billing: a saved price becomes a version here.
        post_save.connect(prices.package_saved, sender="catalog.Package", dispatch_uid="prices")

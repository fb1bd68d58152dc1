"""App configuration of the browser dashboard."""

from django.apps import AppConfig

# What each write of the dashboard (by route name, dashboard/urls.py) is called in the audit
# log (tenancy.audit): the API's operationId where it does what that operation does, so one
# filter finds both. The generic resource pages add theirs (dashboard/resources.py).
AUDIT_ACTIONS = {
    "unit-create": "units_create",
    "unit-delete": "units_delete",
    "unit-stop": "units_stop",
    "unit-start": "units_start",
    "unit-restart": "units_restart",
    "unit-edit": "units_update",
    "webhook-test": "webhooks_test",
    "webhook-rotate": "webhooks_rotate_secret",
    "choose-tenant": "tenants_choose",
    "login": "login",
    "logout": "logout",
}


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Dashboard"

    def ready(self) -> None:
        from dashboard import resources
        from tenancy import audit

        AUDIT_ACTIONS.update(resources.audit_actions())
        audit.register_actions(self.name, AUDIT_ACTIONS)

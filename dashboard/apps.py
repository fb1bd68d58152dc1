"""App configuration of the browser dashboard."""

from django.apps import AppConfig

# What each write of the dashboard (by route name, dashboard/urls.py) is called in the audit
# log (tenancy.audit): the API's operationId where it does what that operation does, so one
# filter finds both.
AUDIT_ACTIONS = {
    "unit-create": "units_create",
    "unit-delete": "units_delete",
    "unit-stop": "units_stop",
    "unit-start": "units_start",
    "unit-restart": "units_restart",
    "unit-edit": "units_update",
    "ssh-key-list": "ssh_keys_create",
    "ssh-key-delete": "ssh_keys_delete",
    "secret-list": "secrets_create",
    "secret-delete": "secrets_delete",
    "storage-list": "storages_create",
    "storage-live": "storages_create",  # the list's view, polled here, takes its form too
    "storage-delete": "storages_delete",
    "reservation-list": "reservations_create",
    "reservation-live": "reservations_create",
    "reservation-cancel": "reservations_delete",
    "choose-tenant": "tenants_choose",
    "login": "login",
    "logout": "logout",
}


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Dashboard"

    def ready(self) -> None:
        from tenancy import audit

        audit.register_actions(self.name, AUDIT_ACTIONS)

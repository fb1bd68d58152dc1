"""Staff in the dashboard: the permissions that let a staff account see every tenant, or act
for every tenant too, and the groups that carry them (docs/api.md, "Staff permissions")."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.apps import apps as global_apps
from django.apps.registry import Apps
from django.contrib.auth.management import create_permissions
from django.db import DEFAULT_DB_ALIAS

# Declared on Tenant's Meta.
VIEW_EVERY_TENANT = "tenancy.view_every_tenant"
ACT_FOR_EVERY_TENANT = "tenancy.act_for_every_tenant"

STAFF_VIEWER = "staff-viewer"
STAFF_EDITOR = "staff-editor"
# Group name → the codenames of the permissions it carries.
STAFF_GROUPS: dict[str, tuple[str, ...]] = {
    STAFF_VIEWER: ("view_every_tenant",),
    STAFF_EDITOR: ("view_every_tenant", "act_for_every_tenant"),
}


def make_staff_groups(
    sender: AppConfig, *, apps: Apps = global_apps, using: str = DEFAULT_DB_ALIAS, **kwargs: Any
) -> None:
    """After `migrate` (post_migrate, as Django makes the permissions themselves): each group of
    STAFF_GROUPS that is missing is made with its permissions. A group that exists is left as
    the admins keep it. A signal rather than a data migration, so that a database flushed by a
    test (or a deleted group) gets the groups back as it gets the permissions back."""
    try:
        group_model = apps.get_model("auth", "Group")
        permission_model = apps.get_model("auth", "Permission")
    except LookupError:  # migrated to a state before auth's tables
        return
    # Made for this app just before by auth's own post_migrate receiver; repeated (a no-op
    # then) so that the order receivers run in does not matter.
    create_permissions(sender, verbosity=0, using=using, apps=apps)
    permissions = {
        permission.codename: permission
        for permission in permission_model._default_manager.using(using).filter(
            content_type__app_label="tenancy", content_type__model="tenant"
        )
    }
    for name, codenames in STAFF_GROUPS.items():
        if not permissions.keys() >= set(codenames):
            continue  # migrated back to before the permissions: no group that would lack them
        group, created = group_model._default_manager.using(using).get_or_create(name=name)
        if created:
            group.permissions.set([permissions[codename] for codename in codenames])

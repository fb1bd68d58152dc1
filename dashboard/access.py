"""Who sees what: staff with the permission to see every tenant, and act for every tenant with
the permission to act (tenancy.staff); any other user acts for exactly one of its tenants."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet
from django.http import HttpRequest

from runtime.models import GPUUnit
from tenancy.models import Tenant
from tenancy.staff import ACT_FOR_EVERY_TENANT, VIEW_EVERY_TENANT

# The session remembers which tenant a user linked to several tenants acts for.
SESSION_TENANT = "dashboard_tenant_id"


@dataclass(frozen=True)
class Scope:
    """The slice of the product one request may see and change. `is_staff`: sees every tenant
    (acting for none); `may_act`: may change what it sees, not only read it."""

    is_staff: bool
    tenant: Tenant | None
    tenants: tuple[Tenant, ...]
    may_act: bool = True

    @property
    def sees_cluster(self) -> bool:
        """Node-level inventory is for ops, as the API keeps it for operator keys."""
        return self.is_staff or (self.tenant is not None and self.tenant.is_operator)

    def units(self) -> QuerySet[GPUUnit]:
        if self.is_staff:
            return GPUUnit.objects.all()
        return GPUUnit.objects.filter(tenant=self.tenant)

    def visible_tenants(self) -> QuerySet[Tenant]:
        if self.is_staff:
            return Tenant.objects.order_by("slug")
        if self.tenant is None:
            return Tenant.objects.none()
        return Tenant.objects.filter(pk=self.tenant.pk)


class NoTenant(Exception):
    """The user may not see every tenant and is linked to none."""


class TenantNotChosen(Exception):
    """The user is linked to several tenants and has not picked one yet."""


def linked_tenants(user: User | AnonymousUser) -> tuple[Tenant, ...]:
    if not user.is_authenticated:
        return ()
    return tuple(Tenant.objects.filter(users=user).order_by("slug"))


def sees_every_tenant(user: User | AnonymousUser) -> bool:
    """Staff with the permission (superusers have every permission). Without it a staff account
    is like any other: it sees the tenants it is linked to, if any."""
    return user.is_staff and user.has_perm(VIEW_EVERY_TENANT)


def resolve_scope(request: HttpRequest) -> Scope:
    """The scope of an authenticated request; raises NoTenant or TenantNotChosen."""
    user = request.user
    tenants = linked_tenants(user)
    if sees_every_tenant(user):
        return Scope(
            is_staff=True,
            tenant=None,
            tenants=tenants,
            may_act=user.has_perm(ACT_FOR_EVERY_TENANT),
        )
    if not tenants:
        raise NoTenant
    if len(tenants) == 1:
        return Scope(is_staff=False, tenant=tenants[0], tenants=tenants)
    chosen = request.session.get(SESSION_TENANT)
    for tenant in tenants:
        if tenant.pk == chosen:
            return Scope(is_staff=False, tenant=tenant, tenants=tenants)
    raise TenantNotChosen

"""Runtime reads, always scoped to a tenant: another tenant's unit simply does not exist."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, QuerySet, Sum

from runtime.models import GPUUnit, Operation, Tenant, UnitEvent, UnitPhase


def list_units(
    *, tenant: Tenant, phase: str | None = None, package_id: str | None = None
) -> QuerySet[GPUUnit]:
    units = GPUUnit.objects.filter(tenant=tenant)
    if phase:
        units = units.filter(phase=phase)
    if package_id:
        units = units.filter(package_id=package_id.strip().lower())
    return units


def get_unit(*, tenant: Tenant, name: str) -> GPUUnit | None:
    """The live unit of that name, or else the most recent one that had it."""
    units = GPUUnit.objects.filter(tenant=tenant, name=name.strip().lower())
    return units.filter(phase__in=UnitPhase.LIVE).first() or units.order_by("-id").first()


def list_unit_events(*, unit: GPUUnit) -> QuerySet[UnitEvent]:
    return UnitEvent.objects.filter(unit=unit).order_by("id")


def get_operation(*, tenant: Tenant, operation_id: str) -> Operation | None:
    return (
        Operation.objects.select_related("unit")
        .filter(tenant=tenant, operation_id=operation_id)
        .first()
    )


def name_in_use(*, tenant: Tenant, name: str) -> bool:
    """Whether one of the tenant's live units holds the name."""
    return GPUUnit.objects.filter(tenant=tenant, name=name, phase__in=UnitPhase.LIVE).exists()


@dataclass(frozen=True)
class TenantUsage:
    """What a tenant's live units hold against its quota."""

    cpu_millicores: int
    memory_bytes: int
    claims: int


def usage_of(tenant: Tenant) -> TenantUsage:
    """The tenant's usage counters (the ones orders charge) as read with the tenant: a request
    has just read it to authenticate, so this asks the database nothing."""
    return TenantUsage(tenant.used_cpu_millicores, tenant.used_memory_bytes, tenant.used_claims)


def count_tenant_usage(*, tenant: Tenant | None = None) -> dict[int, TenantUsage]:
    """What every tenant's (or one tenant's) live units hold, summed from the units themselves
    (`{tenant id: usage}`, tenants without live units left out): the truth the counters are
    checked against."""
    units = GPUUnit.objects.filter(phase__in=UnitPhase.LIVE)
    if tenant is not None:
        units = units.filter(tenant=tenant)
    rows = (
        units.values("tenant_id")
        .annotate(cpu=Sum("cpu_millicores"), memory=Sum("memory_bytes"), claims=Count("id"))
        .values_list("tenant_id", "cpu", "memory", "claims")
    )
    return {tenant_id: TenantUsage(*usage) for tenant_id, *usage in rows}

"""Runtime reads, always scoped to a tenant: another tenant's unit simply does not exist."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet, Sum

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


@dataclass(frozen=True)
class TenantUsage:
    """What a tenant's live units hold against its quota."""

    cpu_millicores: int
    memory_bytes: int
    claims: int
    name_taken: bool = False


def get_tenant_usage(*, tenant: Tenant, name: str | None = None) -> TenantUsage:
    """One aggregate over the tenant's live units; with `name`, also whether one holds it
    (the create path asks both under the tenant lock, where every statement counts)."""
    aggregates = {
        "cpu": Sum("cpu_millicores"),
        "memory": Sum("memory_bytes"),
        "claims": Count("id"),
    }
    if name is not None:
        aggregates["named"] = Count("id", filter=Q(name=name))
    usage = GPUUnit.objects.filter(tenant=tenant, phase__in=UnitPhase.LIVE).aggregate(**aggregates)
    return TenantUsage(
        usage["cpu"] or 0, usage["memory"] or 0, usage["claims"], bool(usage.get("named"))
    )

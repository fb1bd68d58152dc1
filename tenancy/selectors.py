"""Tenant reads, and the audit log's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from controlplane.validation import fold_case
from tenancy.models import AuditActorKind, AuditEvent, SSHKey, Tenant

# How a tenant's own audit log names the platform's staff (who, and from where, is the
# operator log's).
OPERATOR = "operator"


@dataclass(frozen=True)
class TenantUsage:
    """What a tenant's live units hold against its quota."""

    cpu_millicores: int
    memory_bytes: int
    claims: int


NO_USAGE = TenantUsage(0, 0, 0)


def usage_of(tenant: Tenant) -> TenantUsage:
    """The tenant's usage counters (the ones orders charge) as read with the tenant: a request
    has just read it to authenticate, so this asks the database nothing."""
    return TenantUsage(tenant.used_cpu_millicores, tenant.used_memory_bytes, tenant.used_claims)


def get_tenant(*, slug: str) -> Tenant | None:
    return Tenant.objects.filter(slug=fold_case(slug.strip())).first()


def count_ssh_keys(tenant: Tenant) -> int:
    return SSHKey.objects.filter(tenant=tenant).count()


@dataclass(frozen=True)
class AuditFilter:
    """What a reader of the audit log narrows it to; None (or "") is any."""

    tenant: Tenant | None = None
    tenant_slug: str = ""
    action: str = ""
    target_kind: str = ""
    target_name: str = ""
    actor: str = ""
    source: str = ""
    outcome: str = ""
    request_id: str = ""
    start: datetime | None = None
    end: datetime | None = None
    # A tenant's own log: staff are OPERATOR, and `actor` matches them by that name alone (a
    # staff username matches nothing, so it cannot be probed for).
    staff_as_operator: bool = False


def staff_usernames(usernames: set[str]) -> set[str]:
    """Which of these accounts are the platform's staff (no query for none)."""
    if not usernames:
        return set()
    user_model = get_user_model()
    field = user_model.USERNAME_FIELD
    return set(
        user_model._default_manager.filter(
            **{f"{field}__in": usernames}, is_staff=True
        ).values_list(field, flat=True)
    )


def list_audit_events(found: AuditFilter) -> QuerySet[AuditEvent]:
    """The audit events `found` selects (a tenant's own when it names one), newest first."""
    events = AuditEvent.objects.all()
    if found.tenant is not None:
        events = events.filter(tenant=found.tenant)
    exact = {
        "tenant_slug": found.tenant_slug,
        "action": found.action,
        "target_kind": found.target_kind,
        "target_name": found.target_name,
        "source": found.source,
        "outcome": found.outcome,
        "request_id": found.request_id,
    }
    events = events.filter(**{field: value for field, value in exact.items() if value})
    if found.actor and found.staff_as_operator:
        user_model = get_user_model()
        staff = user_model._default_manager.filter(is_staff=True).values(user_model.USERNAME_FIELD)
        by_staff = Q(actor_kind=AuditActorKind.USER, actor__in=staff)
        if found.actor == OPERATOR:
            events = events.filter(by_staff)
        else:
            events = events.filter(actor=found.actor).exclude(by_staff)
    elif found.actor:
        events = events.filter(actor=found.actor)
    if found.start is not None:
        events = events.filter(occurred_at__gte=found.start)
    if found.end is not None:
        events = events.filter(occurred_at__lt=found.end)
    return events.order_by("-id")

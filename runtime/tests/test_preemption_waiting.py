"""Which waiting units preemption serves (runtime/control/preemption.py `waiting_units`): only
those waiting for devices, each tenant's oldest first so one tenant's backlog does not keep
everyone else's waiting. Database only: the choice of victims and the stops are shown on the
development cluster (test_preemption.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runtime.control import preemption
from runtime.models import GPUUnit, UnitPhase
from runtime.tests.factories import UnitFactory
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def waiting(tenant, name: str, *, minutes_ago: int, reason: str = "NoMatchingDevices") -> GPUUnit:
    unit = UnitFactory(
        tenant=tenant, name=name, phase=UnitPhase.PENDING, reason=reason, dra={"allocated": False}
    )
    then = timezone.now() - timedelta(minutes=minutes_ago)
    GPUUnit.objects.filter(pk=unit.pk).update(created_at=then, updated_at=then)
    return unit


def names(now=None) -> list[str]:
    return [u.name for u in preemption.waiting_units(now or timezone.now(), served=set())]


def test_only_units_waiting_for_devices_are_served():
    tenant = TenantFactory()
    waiting(tenant, "devices", minutes_ago=5)
    waiting(tenant, "for-preemption", minutes_ago=4, reason="WaitingForPreemption")
    waiting(tenant, "storage", minutes_ago=9, reason="StorageNotBound")
    waiting(tenant, "cpu", minutes_ago=8, reason="InsufficientResources")
    waiting(tenant, "quota", minutes_ago=7, reason="QuotaExceeded")
    waiting(tenant, "not-yet-tried", minutes_ago=6, reason="WaitingForAllocation")
    assert names() == ["devices", "for-preemption"]


def test_each_tenants_oldest_is_served_before_anyones_second(settings):
    busy, other, third = TenantFactory(), TenantFactory(), TenantFactory()
    for index in range(preemption.WAITING_PER_PASS + 10):
        waiting(busy, f"busy-{index:02}", minutes_ago=500 - index)
    waiting(other, "other-0", minutes_ago=20)
    waiting(other, "other-1", minutes_ago=10)
    waiting(third, "third-0", minutes_ago=15)

    served = names()

    assert len(served) == preemption.WAITING_PER_PASS
    # The first turn: every tenant's oldest, oldest first; then every tenant's second.
    assert served[:3] == ["busy-00", "other-0", "third-0"]
    assert served[3:5] == ["busy-01", "other-1"]
    assert served[5:] == [f"busy-{index:02}" for index in range(2, preemption.WAITING_PER_PASS - 3)]

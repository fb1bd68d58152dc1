"""The timeline reads in the order things happened: a pod billed (UsageStarted) before the
reconcile recorded its claim allocated, because it ran before the worker had recorded the
unit, is listed after Allocated (issue 43, item 9)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runtime import lifecycle
from runtime.models import UnitPhase
from runtime.tests.factories import UnitFactory

pytestmark = pytest.mark.django_db


def reasons(unit) -> list[str]:
    return list(unit.events.order_by("id").values_list("reason", flat=True))


def test_usage_recorded_before_the_allocation_is_listed_after_it(tenant):
    unit = UnitFactory(tenant=tenant, phase=UnitPhase.PROVISIONING)
    started = timezone.now() - timedelta(seconds=5)
    lifecycle.append_event(unit, reason="Accepted")
    early = lifecycle.append_event(
        unit, reason="UsageStarted", message="billed from then", observed_at=started
    )
    lifecycle.append_event(unit, reason="Provisioned")

    lifecycle.record_event(unit, reason="Allocated", message="Claim allocated: n/gpu-0.")

    assert reasons(unit) == ["Accepted", "Provisioned", "Allocated", "UsageStarted"]
    moved = unit.events.get(reason="UsageStarted")
    assert (moved.message, moved.observed_at, moved.first_seen) == (
        "billed from then",
        started,
        early.first_seen,
    )


def test_an_earlier_pods_usage_and_an_allocation_in_order_stay_where_they_are(tenant):
    unit = UnitFactory(tenant=tenant, phase=UnitPhase.RUNNING)
    for reason in ("Provisioned", "Allocated", "UsageStarted", "UsageEnded", "Restarted"):
        lifecycle.append_event(unit, reason=reason)

    lifecycle.record_event(unit, reason="Allocated", message="again")

    assert reasons(unit) == [
        "Provisioned",
        "Allocated",
        "UsageStarted",
        "UsageEnded",
        "Restarted",
        "Allocated",
    ]

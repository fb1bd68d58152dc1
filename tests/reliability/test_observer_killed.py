"""The observer SIGKILLed in the middle of a burst: beat's backstop (reconcile_units, run here
as beat would) brings every unit to Running, a second observer takes the lead, and no unit's
timeline has an entry twice."""

from __future__ import annotations

import os
import signal
import time

import pytest

from conftest import start_observer
from runtime.models import GPUUnit, UnitEvent, UnitPhase
from tests.reliability.conftest import order_units, wait_until_settled

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]
UNITS = 8


def test_observer_killed_mid_burst(customer, h100, cluster, record):
    tenant = customer.tenant
    # Slow creates: units come to run one by one, so the kill lands while most are not yet.
    cluster.faults.set(verb="create", latency=0.3)
    doomed = start_observer("doomed")
    order_units(tenant, h100.id, UNITS)
    deadline = time.monotonic() + 30
    while not GPUUnit.objects.filter(tenant=tenant, phase=UnitPhase.RUNNING).exists():
        assert time.monotonic() < deadline, "the observer moved no unit"
        time.sleep(0.02)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait()
    running_at_kill = GPUUnit.objects.filter(tenant=tenant, phase=UnitPhase.RUNNING).count()
    assert running_at_kill < UNITS, "every unit ran before the kill: the scenario did not happen"
    cluster.faults.clear()

    phases = wait_until_settled(tenant, {"Running"})
    assert phases == {"Running": UNITS}
    timelines: dict[str, list[str]] = {}
    for unit_name, reason in UnitEvent.objects.filter(unit__tenant=tenant).values_list(
        "unit__name", "reason"
    ):
        timelines.setdefault(unit_name, []).append(reason)
    duplicated = {name: t for name, t in timelines.items() if len(t) != len(set(t))}
    assert duplicated == {}

    # It leads (start_observer waits for that): the dead one's lock went with its session.
    successor = start_observer("successor")
    os.killpg(successor.pid, signal.SIGTERM)
    assert successor.wait(timeout=20) == 0  # SIGTERM: the observer stops cleanly
    record(
        units=UNITS,
        running_at_kill=running_at_kill,
        running_after_backstop=phases["Running"],
        duplicated_timeline_entries=0,
        successor_led=True,
    )

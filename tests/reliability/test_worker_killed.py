"""A worker SIGKILLed in the middle of provisioning: a new worker and the sweeper finish the
job, and create-or-adopt leaves no duplicate objects."""

from __future__ import annotations

import os
import signal
import time

import pytest

from conftest import start_worker, stop_worker
from controlplane import kube
from runtime.models import Operation
from tests.reliability.conftest import order_units, wait_until_settled

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]
UNITS = 6


def test_worker_killed_mid_provisioning(
    customer, h100, cluster, settings, record, session_worker_paused
):
    tenant = customer.tenant
    settings.OPERATION_STALE_SECONDS = 2  # what the sweeper (run here, as beat) considers stuck
    cluster.faults.set(verb="create", latency=0.4)  # slow creates: the kill lands mid-way
    doomed = start_worker("doomed")
    order_units(tenant, h100.id, UNITS)
    deadline = time.monotonic() + 30
    while not kube.list_objects(kube.GPUUNIT, namespace=tenant.namespace):
        assert time.monotonic() < deadline, "provisioning never started"
        time.sleep(0.05)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait()
    at_kill = {
        kind.kind: len(kube.list_objects(kind, namespace=tenant.namespace))
        for kind in (kube.GPUUNIT, kube.RESOURCECLAIM, kube.POD)
    }
    open_operations = Operation.objects.filter(tenant=tenant, status__in=["pending", "running"])
    assert open_operations.exists(), "the worker finished before it was killed"
    open_at_kill = open_operations.count()
    cluster.faults.clear()

    replacement = start_worker("replacement")
    try:
        phases = wait_until_settled(tenant, {"Running"}, sweep=True)
    finally:
        stop_worker(replacement)
    objects = {
        kind.kind: len(kube.list_objects(kind, namespace=tenant.namespace))
        for kind in (kube.GPUUNIT, kube.RESOURCECLAIM, kube.POD)
    }
    assert phases == {"Running": UNITS}
    assert objects == {"GPUUnit": UNITS, "ResourceClaim": UNITS, "Pod": UNITS}
    assert set(Operation.objects.filter(tenant=tenant).values_list("status", flat=True)) == {
        "succeeded"
    }
    record(
        units=UNITS,
        objects_at_kill=at_kill,
        open_operations_at_kill=open_at_kill,
        running_after_restart=phases["Running"],
        objects_after=objects,
        duplicates=0,
    )

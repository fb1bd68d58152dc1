"""Helpers for integration tests against a development cluster (devstack/cluster.py) and a real
Celery worker."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings

from catalog.tests.factories import PackageFactory
from conftest import start_worker, stop_worker
from controlplane import kube
from controlplane.celery import app
from devstack.cluster import DevCluster
from runtime import manifests
from runtime.control import reconcile
from runtime.control.provisioning import install_crd
from runtime.models import GPUUnit, UnitPhase


@contextmanager
def broker_at(url: str) -> Iterator[None]:
    """Point this process's task producer (and health probe) at another broker URL: one
    nothing listens on is the broker down."""
    previous = app.conf.broker_url, settings.CELERY_BROKER_URL

    def point(broker_url: str, settings_url: str) -> None:
        app.conf.broker_url = broker_url
        settings.CELERY_BROKER_URL = settings_url
        app._pool = None
        app.amqp._producer_pool = None

    point(url, url)
    try:
        yield
    finally:
        point(*previous)


def wait_for_phase(
    unit: GPUUnit, *phases: str, reason: str | None = None, timeout: float = 60.0
) -> GPUUnit:
    """Reconcile (as beat would) until the unit reaches one of `phases`, and `reason` if given.
    A phase can hold several reasons one after another: a unit is Pending (Waiting for
    allocation) from its pod's creation until the scheduler's pass says why it cannot place
    it, so a test that means the latter names it."""
    deadline = time.monotonic() + timeout
    while True:
        reconcile.reconcile_units()
        unit.refresh_from_db()
        if unit.phase in phases and reason in (None, unit.reason):
            return unit
        if time.monotonic() > deadline:
            events = [(e.reason, e.message) for e in unit.events.all()]
            wanted = f"{phases}/{reason}" if reason else f"{phases}"
            raise AssertionError(
                f"{unit} is {unit.phase}/{unit.reason} ({unit.message}), wanted {wanted}; "
                f"timeline: {events}"
            )
        time.sleep(0.2)


def order_unit(client, name: str, package_id: str, *, operation_id: str = "", **extra) -> GPUUnit:
    """POST a unit of `package_id` named `name` (operationID `operation_id`, else the name),
    assert it was accepted, and return it."""
    body = {"operationID": operation_id or name, "name": name, "packageID": package_id}
    response = client.post(
        "/api/v1/gpu-units", {"image": "busybox", **body, **extra}, format="json"
    )
    assert response.status_code == 201, response.json()
    return GPUUnit.objects.get(name=name, phase__in=UnitPhase.LIVE)


def unit_objects(unit: GPUUnit) -> dict[str, dict | None]:
    return {
        "gpuunit": kube.get(kube.GPUUNIT, unit.namespace, unit.name),
        "claim": kube.get(kube.RESOURCECLAIM, unit.namespace, unit.claim_name),
        "pod": kube.get(kube.POD, unit.namespace, manifests.pod_name_for(unit.name)),
    }


def remove_namespace_objects(namespace: str) -> None:
    """Free the devices a test's units hold, so the next test sees a full cluster."""
    for kind in (kube.POD, kube.RESOURCECLAIM, kube.GPUUNIT):
        for obj in kube.list_objects(kind, namespace=namespace):
            kube.delete(kind, namespace, obj["metadata"]["name"])


@contextmanager
def cluster_of_its_own(
    topology: str | Path | Mapping[str, Any] | None, tmp_path: Path, worker: str
) -> Iterator[DevCluster]:
    """A development cluster of `topology` (in `tmp_path / "cluster"`, behind its fault proxy)
    with the GPUUnit CRD, and this process and a Celery worker of its own (`<worker>@<host>`)
    pointed at it: for a test that needs devices the sample topology lacks, or every device of
    a cluster to itself. The test pauses the session's worker (fixture
    `session_worker_paused`), which stays on the session's cluster."""
    dev = DevCluster(tmp_path / "cluster", topology=topology, proxy=True)
    previous = settings.KUBECONFIG
    process = None
    try:
        dev.start()
        settings.KUBECONFIG = str(dev.kubeconfig)
        kube.reset()
        install_crd()
        process = start_worker(worker, KUBECONFIG=str(dev.kubeconfig))
        yield dev
    finally:
        if process is not None:
            stop_worker(process)
        settings.KUBECONFIG = previous
        kube.reset()
        dev.stop()


def wait_until(condition: Callable[[], Any], what: str, *, timeout: float = 30.0) -> Any:
    """Poll `condition` until it is truthy and return what it gave; fail naming `what` after
    `timeout` seconds (a deadline for a condition, never a wait for time)."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


def l40s_package(package_id: str, gpus: int, **fields: Any) -> Any:
    """A small package of `gpus` L40S (the sample topology's L40S node has 8): for tests that
    fill that node; `fields` set its price, interruptible offer and the like."""
    return PackageFactory(
        id=package_id,
        device_class_name="nvidia-l40s",
        gpu=gpus,
        count=gpus,
        cpu="1",
        memory="1Gi",
        **fields,
    )

"""What a kubelet reports of a unit's containers and node, played by KWOK's stages on the
development cluster (devstack/stages), read through the product's API: a container that exits
and is restarted in the same pod, one killed for memory, a crash loop, an image that never
pulls, the unit's node going NotReady, and a unit that never starts stopped at its deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import override_settings

from billing.models import Meter, UsageRecord
from catalog.tests.factories import PackageFactory
from inventory.sync import sync_inventory
from runtime import actions, manifests
from runtime.control import reconcile
from runtime.models import GPUUnit
from runtime.tests.helpers import (
    l40s_package,
    order_unit,
    remove_namespace_objects,
    wait_for_phase,
    wait_until,
)
from tenancy import webhooks
from tenancy.models import WebhookDelivery
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


@pytest.fixture(autouse=True)
def _cleanup(tenant, cluster) -> Iterator[None]:
    yield
    remove_namespace_objects(tenant.namespace)


def order(tenant, name: str, image: str = "python:3.12") -> GPUUnit:
    package = PackageFactory()
    response = client_for(tenant).post(
        "/api/v1/gpu-units",
        {"operationID": name, "name": name, "packageID": package.id, "image": image},
        format="json",
    )
    assert response.status_code == 201, response.json()
    return GPUUnit.objects.get(name=name)


def shown(tenant, unit: GPUUnit) -> dict:
    """The unit as its owner reads it through the API."""
    response = client_for(tenant).get(f"/api/v1/gpu-units/{unit.name}")
    assert response.status_code == 200
    return response.json()["data"]


def wait_for(tenant, unit: GPUUnit, phase: str, reason: str, timeout: float = 60.0) -> dict:
    """Beat's backstop (the inventory sync, then the reconcile) until the API shows the unit
    in `phase` for `reason`."""
    deadline = time.monotonic() + timeout
    while True:
        sync_inventory()
        reconcile.reconcile_units()
        data = shown(tenant, unit)
        if (data["phase"], data["reason"]) == (phase, reason):
            return data
        assert time.monotonic() < deadline, (data["phase"], data["reason"], data["message"])
        time.sleep(0.2)


def container_status(cluster, unit: GPUUnit) -> dict:
    pod = cluster.pod(unit.namespace, manifests.pod_name_for(unit.name))
    [status] = [
        s for s in pod["status"]["containerStatuses"] if s["name"] == manifests.CONTAINER_NAME
    ]
    return status


def test_a_container_that_exits_is_restarted_in_the_same_pod_and_the_unit_runs_on(tenant, cluster):
    unit = order(tenant, "exits")
    wait_for(tenant, unit, "Running", "Running")
    pod = cluster.pod(unit.namespace, manifests.pod_name_for(unit.name))

    restarted = cluster.fail_container(unit.namespace, pod["metadata"]["name"], exit_code=3)

    assert restarted["metadata"]["uid"] == pod["metadata"]["uid"]  # the same pod
    status = container_status(cluster, unit)
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert "running" in status["state"]
    data = wait_for(tenant, unit, "Running", "Running")
    assert data["draStatus"]["allocated"] is True  # its claim is still its own


def test_an_oom_killed_container_is_restarted_and_the_unit_runs_on(tenant, cluster):
    unit = order(tenant, "hungry")
    wait_for(tenant, unit, "Running", "Running")

    cluster.fail_container(unit.namespace, manifests.pod_name_for(unit.name), oom=True)

    terminated = container_status(cluster, unit)["lastState"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)
    wait_for(tenant, unit, "Running", "Running")


def test_a_crash_loop_fails_the_unit_until_the_container_stays_up(tenant, cluster):
    unit = order(tenant, "crashy")
    wait_for(tenant, unit, "Running", "Running")
    pod = manifests.pod_name_for(unit.name)

    cluster.chaos("Pod", pod, "crash-loop", unit.namespace)

    data = wait_for(tenant, unit, "Failed", "ContainerCrashLoop")
    assert "back-off" in data["message"]
    assert container_status(cluster, unit)["restartCount"] >= 1
    # The loop ends with the label: the container comes back after its back-off and stays.
    cluster.chaos("Pod", pod, None, unit.namespace)
    wait_for(tenant, unit, "Running", "Running")


def test_an_image_that_never_pulls_fails_the_unit_naming_it(tenant, cluster):
    unit = order(tenant, "nopull", image="registry.invalid/team/trainer:1")

    data = wait_for(tenant, unit, "Failed", "ImagePullFailed")

    assert "registry.invalid/team/trainer:1" in data["message"]
    waiting = container_status(cluster, unit)["state"]["waiting"]
    assert waiting["reason"] in ("ErrImagePull", "ImagePullBackOff")


def test_a_unit_that_never_starts_is_stopped_at_its_deadline_and_its_devices_go_to_another(
    tenant, cluster
):
    """Issue 40, hole 2: a pod that holds devices with no container started (an image that
    never pulls) is not billed, and not for long: at the start deadline the control plane
    stops the unit, says why, and the devices go to the next order."""
    package = l40s_package("l40s-8x-deadline", 8)  # the sample topology's L40S node, whole
    # Nothing listens on port 9: the deliveries are written and refused, which is all this
    # test reads (tests/test_webhooks.py receives them).
    with override_settings(WEBHOOK_ALLOWED_NETWORKS=["127.0.0.0/8"]):
        hook = webhooks.create_endpoint(
            tenant=tenant, url="http://127.0.0.1:9/hook", events=["unit.phase_changed"]
        )
    unit = order_unit(
        client_for(tenant), "stuck", package.id, image="registry.invalid/team/trainer:1"
    )
    data = wait_for(tenant, unit, "Failed", "ImagePullFailed")
    assert data["draStatus"]["allocated"] is True  # it holds all eight
    unit.refresh_from_db()
    assert unit.idle_hold_since is not None
    other = TenantFactory()
    waiting = order_unit(client_for(other), "next-in-line", package.id)
    wait_for_phase(waiting, "Pending", reason="NoMatchingDevices")
    deadline = timedelta(seconds=settings.START_DEADLINE_SECONDS)
    assert actions.stop_idle_units(now=unit.idle_hold_since + deadline / 2) == 0

    assert actions.stop_idle_units(now=unit.idle_hold_since + deadline) == 1

    stopped = wait_for(tenant, unit, "Stopped", "StartDeadlineExceeded")
    assert stopped["draStatus"]["allocated"] is False
    said = unit.events.filter(reason="StartDeadlineExceeded").order_by("id")[0].message
    assert "ImagePullFailed" in said, said
    assert "registry.invalid/team/trainer:1" in said, said
    assert not UsageRecord.objects.filter(unit_uid=unit.uid).exists()  # never billed
    assert not Meter.objects.filter(unit_uid=unit.uid).exists()
    # Its owner is told, as of any phase change, with the reason.
    told = [
        d.payload["data"]
        for d in WebhookDelivery.objects.filter(endpoint=hook).order_by("id")
        if d.payload["data"].get("phase") == "Stopped"
    ]
    assert [(e["reason"], e["name"]) for e in told] == [("StartDeadlineExceeded", "stuck")]
    wait_for_phase(waiting, "Running")  # the devices went to the next order
    # Once is enough: the pass does not stop it again.
    assert actions.stop_idle_units(now=unit.idle_hold_since + 2 * deadline) == 0
    remove_namespace_objects(other.namespace)


@pytest.fixture
def node_back(cluster) -> Iterator[list[str]]:
    """The nodes a test takes NotReady are Ready again, untainted, when it ends (the tests
    after it share them)."""
    taken: list[str] = []
    yield taken
    for name in taken:
        cluster.chaos("Node", name, None)

    def healthy() -> bool:
        nodes = [cluster.api.get("v1", "Node", name) for name in taken]
        return all(
            not any(t["key"].startswith("node.kubernetes.io/") for t in n["spec"].get("taints", []))
            and any(
                c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]
            )
            for n in nodes
        )

    wait_until(healthy, "the nodes to be Ready and untainted again", timeout=60)


def test_a_unit_whose_node_goes_not_ready_says_so(tenant, cluster, node_back):
    unit = order(tenant, "stranded")
    data = wait_for(tenant, unit, "Running", "Running")
    node = data["nodeName"]
    node_back.append(node)

    cluster.chaos("Node", node, "not-ready")

    # The controller-manager's node lifecycle marks the node's pods not ready.
    data = wait_for(tenant, unit, "Pending", "NodeNotReady")
    assert f"Node {node} is not ready" in data["message"]
    events = client_for(tenant).get(f"/api/v1/gpu-units/{unit.name}/events").json()["data"]
    assert any(e["reason"] == "NodeNotReady" for e in events)

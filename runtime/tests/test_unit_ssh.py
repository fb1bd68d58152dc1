"""SSH into a unit through the API, a real Celery worker and the simulated cluster: the tenant's
registered keys reach the unit's ConfigMap (never the GPUUnit, its events or the logs), an sshd
sidecar shares the unit's GPU claim, storage and /dev/shm under Pod Security "restricted", the
unit JSON gives the ssh command, and removing a key takes it off the unit."""

from __future__ import annotations

import json
import logging
import time

import kubernetes_validate
import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from controlplane import kube
from devstack.services import free_port
from runtime import manifests
from runtime.models import GPUUnit, Operation, UnitEvent
from runtime.tasks import sweep_operations
from runtime.tests.helpers import broker_at, remove_namespace_objects, wait_for_phase
from tenancy.tests.test_sshkeys import ECDSA384, ED25519

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]
BODY = {
    "operationID": "ssh-1",
    "name": "shell",
    "packageID": ARTICLE_PACKAGE_ID,
    "image": "python:3.12",
    "ssh": {"enabled": True},
}


@pytest.fixture(autouse=True)
def _package(tenant):
    PackageFactory(article=True)
    yield
    remove_namespace_objects(tenant.namespace)
    for kind in (kube.SERVICE, kube.CONFIGMAP, kube.NETWORKPOLICY):
        for obj in kube.list_objects(kind, namespace=tenant.namespace):
            if obj["metadata"].get("labels", {}).get(manifests.LABEL_MANAGED_BY):
                kube.delete(kind, tenant.namespace, obj["metadata"]["name"])


def add_key(client, name: str, key: str) -> None:
    response = client.post("/api/v1/ssh-keys", {"name": name, "publicKey": key}, format="json")
    assert response.status_code == 201, response.json()


def test_ssh_reaches_the_unit_with_the_tenant_s_keys_and_nothing_leaks(
    auth_client, tenant, settings, caplog
):
    settings.ACCESS_TCP_HOST = "gpu.example.test"
    caplog.set_level(logging.DEBUG)
    add_key(auth_client, "laptop", ED25519)
    add_key(auth_client, "desktop", ECDSA384)
    response = auth_client.post("/api/v1/gpu-units", BODY, format="json")
    assert response.status_code == 201, response.json()
    unit = wait_for_phase(GPUUnit.objects.get(name="shell"), "Running")

    config_map = kube.get(kube.CONFIGMAP, tenant.namespace, "unit-shell-ssh")
    keys = config_map["data"]["authorized_keys"].splitlines()
    assert keys == [" ".join(ECDSA384.split()[:2]), " ".join(ED25519.split()[:2])]
    pod = kube.get(kube.POD, tenant.namespace, "unit-shell")
    (sidecar,) = pod["spec"]["initContainers"]
    assert sidecar["name"] == "ssh-server"
    assert sidecar["restartPolicy"] == "Always"
    workload = pod["spec"]["containers"][0]
    # The session lands where the GPUs and volumes are: the same claim and mounts.
    assert sidecar["resources"]["claims"] == workload["resources"]["claims"]
    mounted = {m["mountPath"] for m in sidecar["volumeMounts"]}
    assert {m["mountPath"] for m in workload["volumeMounts"]} <= mounted
    assert "/etc/ssh-keys" in mounted
    # The pod asks for exactly the package: the sidecar's share comes out of the workload's.
    assert workload["resources"]["requests"] == {
        "cpu": "9950m",
        "memory": "40896Mi",
        "ephemeral-storage": "19Gi",
    }
    for container in (sidecar, workload):
        context = container["securityContext"]
        assert context["runAsNonRoot"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
    service = kube.get(kube.SERVICE, tenant.namespace, "unit-shell-ssh")
    node_port = service["spec"]["ports"][0]["nodePort"]
    shown = auth_client.get("/api/v1/gpu-units/shell").json()["data"]["ssh"]
    assert shown == {
        "enabled": True,
        "keys": ["desktop", "laptop"],
        "username": "runtime",
        "host": "gpu.example.test",
        "port": node_port,
        "command": f"ssh -p {node_port} runtime@gpu.example.test",
    }
    policy = kube.get(kube.NETWORKPOLICY, tenant.namespace, "unit-shell")
    assert [p["port"] for p in policy["spec"]["ingress"][1]["ports"]] == [2222]

    # No key material in the GPUUnit, the timeline or the logs.
    gpuunit = kube.get(kube.GPUUNIT, tenant.namespace, "shell")
    assert gpuunit["spec"]["ssh"] == {"enabled": True}
    material = [key.split()[1] for key in (ED25519, ECDSA384)]
    timeline = json.dumps(list(UnitEvent.objects.filter(unit=unit).values()), default=str)
    for blob in material:
        assert blob not in json.dumps(gpuunit)
        assert blob not in timeline
        assert blob not in caplog.text

    # Removing a key takes it off the unit.
    assert auth_client.delete("/api/v1/ssh-keys/desktop").status_code == 204
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        data = kube.get(kube.CONFIGMAP, tenant.namespace, "unit-shell-ssh")["data"]
        if data["authorized_keys"] == " ".join(ED25519.split()[:2]) + "\n":
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the removed key is still authorized: {data}")
    assert auth_client.get("/api/v1/gpu-units/shell").json()["data"]["ssh"]["keys"] == ["laptop"]


def test_a_key_removed_while_the_broker_is_down_leaves_the_unit_once_it_is_back(
    auth_client, tenant, settings
):
    """The removal is a new generation of the unit's spec and an update operation of the
    control plane's own, committed with the key's deletion: with the broker away nothing is
    sent, and the sweeper sends it once the broker is back. The pod is kept."""
    add_key(auth_client, "laptop", ED25519)
    add_key(auth_client, "desktop", ECDSA384)
    assert auth_client.post("/api/v1/gpu-units", BODY, format="json").status_code == 201
    unit = wait_for_phase(GPUUnit.objects.get(name="shell"), "Running")
    generation, pod_uid = unit.generation, unit.pod_k8s_uid

    with broker_at(f"redis://127.0.0.1:{free_port()}/0"):
        assert auth_client.delete("/api/v1/ssh-keys/desktop").status_code == 204
    unit.refresh_from_db()
    assert unit.ssh["keys"] == ["laptop"]
    assert unit.generation == generation + 1
    (operation,) = Operation.objects.filter(unit=unit, operation_id__startswith="@rollout-")
    assert (operation.kind, operation.status) == ("update", "pending")  # nobody sent it
    assert auth_client.get(f"/api/v1/operations/{operation.operation_id}").status_code == 200
    config_map = kube.get(kube.CONFIGMAP, tenant.namespace, "unit-shell-ssh")
    assert len(config_map["data"]["authorized_keys"].splitlines()) == 2  # not yet

    settings.OPERATION_STALE_SECONDS = 0  # the broker is back: beat's next sweep sends it
    assert sweep_operations() >= 1
    only_laptop = " ".join(ED25519.split()[:2]) + "\n"
    deadline = time.monotonic() + 30
    while True:
        operation.refresh_from_db()
        data = kube.get(kube.CONFIGMAP, tenant.namespace, "unit-shell-ssh")["data"]
        if operation.status == "succeeded" and data["authorized_keys"] == only_laptop:
            break
        assert time.monotonic() < deadline, (operation.status, data)
        time.sleep(0.2)
    unit.refresh_from_db()
    assert unit.observed_generation == unit.generation == generation + 1
    assert unit.pod_k8s_uid == pod_uid  # the keys changed, not the pod
    assert unit.events.filter(reason="SSHKeyRemoved").exists()


def test_the_pod_with_ssh_validates_for_kubernetes_1_34(auth_client, tenant):
    add_key(auth_client, "laptop", ED25519)
    assert auth_client.post("/api/v1/gpu-units", BODY, format="json").status_code == 201
    wait_for_phase(GPUUnit.objects.get(name="shell"), "Running")
    pod = kube.get(kube.POD, tenant.namespace, "unit-shell")
    sent = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod["metadata"]["name"]},
        "spec": pod["spec"],
    }
    kubernetes_validate.validate(sent, "1.34.0", strict=False)


@pytest.mark.parametrize(
    ("ssh", "keys", "field"),
    [
        ({"enabled": True}, [], "ssh"),  # no key to give
        ({"enabled": True, "keys": ["missing"]}, ["laptop"], "ssh.keys[0]"),
        ({"enabled": "yes"}, ["laptop"], "ssh.enabled"),
        ({"enabled": True, "keys": []}, ["laptop"], "ssh.keys"),
        ({"enabled": False, "keys": ["laptop"]}, ["laptop"], "ssh.keys"),
        ({"enabled": True, "password": "x"}, ["laptop"], "ssh.password"),
    ],
)
def test_bad_ssh_is_400_naming_the_field_and_creates_nothing(auth_client, ssh, keys, field):
    for name in keys:
        add_key(auth_client, name, ED25519)
    response = auth_client.post("/api/v1/gpu-units", {**BODY, "ssh": ssh}, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["details"]["fields"]
    assert not GPUUnit.objects.exists()

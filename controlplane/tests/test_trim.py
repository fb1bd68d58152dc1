"""The observer's transforms (controlplane/kube/trim.py) lose nothing its consumers read: on a
development cluster's own objects (the real API server, scheduler and controller-manager, KWOK
nodes), managedFields and all, the inventory's observation, document and availability, and each
unit's planned pod step, row change, GPUUnit status and observed state, are the same from
trimmed objects as from whole ones. An informer keeps and hands on what its transform returns,
and still resumes its watch from the versions the server sent."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane import kube
from controlplane.kube import trim
from controlplane.kube.watch import key_of
from controlplane.tests.test_watch import (
    EVENT,
    NAMESPACE,
    Recorder,
    dev,
    event,
    quiet_cluster,
    wait_until,
    watching,
)
from devstack.cluster import CHAOS_LABEL, DEVICE_TAINT_RULE_API, DevCluster
from inventory import observe
from runtime import manifests
from runtime.control import reconcile, status
from runtime.control.observer import INVENTORY_KINDS, Observer
from runtime.models import GPUUnit, UnitPhase

__all__ = ["dev", "quiet_cluster"]  # a cluster with no nodes, for the informer test

UNITS = "tenant-a"
CRD = Path(__file__).resolve().parents[2] / "k8s" / "gpuunit-crd.yaml"
# What each plural the observer watches is listed as.
RESOURCES = {
    "gpuunits": ("runtime.lokiwager.io/v1alpha1", "GPUUnit"),
    "pods": ("v1", "Pod"),
    "resourceclaims": ("resource.k8s.io/v1", "ResourceClaim"),
    "nodes": ("v1", "Node"),
    "resourceslices": ("resource.k8s.io/v1", "ResourceSlice"),
    "deviceclasses": ("resource.k8s.io/v1", "DeviceClass"),
    "devicetaintrules": (DEVICE_TAINT_RULE_API, "DeviceTaintRule"),
    "resourcequotas": ("v1", "ResourceQuota"),
}
PACKAGES = [
    observe.PackageSpec("h100-1x", "nvidia-h100", (), 1, 8_000, 64 << 30),
    observe.PackageSpec("h100-8x", "nvidia-h100", (), 8, 64_000, 512 << 30),
    observe.PackageSpec(
        "hami-quarter", "hami-core-gpu.project-hami.io", (), 1, 4_000, 16 << 30,
        capacity=(("cores", "25"), ("memory", "20Gi")),
    ),
    observe.PackageSpec(
        "mig-1g", "mig.nvidia.com",
        ('device.attributes["gpu.nvidia.com"].profile == "1g.10gb"',), 1, 2_000, 8 << 30,
    ),
    observe.PackageSpec(
        "mig-pair", "mig.nvidia.com",
        ('device.attributes["gpu.nvidia.com"].profile == "1g.10gb"',), 2, 2_000, 8 << 30,
        match_attribute="gpu.nvidia.com/parentUUID",
    ),
]  # fmt: skip
# KWOK's kubelet plays these (devstack/stages): how long a pod's start takes, and how long a
# crashed container's back-off lasts.
START_DELAY = "devstack.lokiwager.io/start-delay"
BACKOFF = "devstack.lokiwager.io/backoff"
# A controller's finalizer that keeps a deleted GPUUnit in the cluster, being deleted.
HOLD = "lokiwager.io/test-hold"


def contract(name: str, device_class: str = "nvidia-h100", **options) -> manifests.UnitContract:
    return manifests.UnitContract(
        **{
            "name": name,
            "namespace": UNITS,
            "tenant": UNITS,
            "operation_id": f"op-{name}",
            "request_hash": f"hash-{name}",
            "package_id": "h100-1x",
            "spec_name": "gpu.h100.1x",
            "image": "ghcr.io/example/worker:1.0",
            "cpu": "2",
            "memory": "8Gi",
            "ephemeral_storage": "10Gi",
            "gpu": 1,
            "device_class_name": device_class,
            "claim_name": manifests.claim_name_for(name),
            "claim_request_name": "gpu",
            "count": 1,
            "memory_bytes": 8 << 30,
            **options,
        }
    )


CONTRACTS = [
    # First, and placed before the others are made: the dynamic MIG GPU's whole device is
    # also an nvidia-h100, which an H100 unit could otherwise take before the 7g.80gb.
    contract(
        "mig-7g",
        "mig.nvidia.com",
        selectors=['device.attributes["gpu.nvidia.com"].profile == "7g.80gb"'],
    ),
    contract(
        "running",
        env=[{"name": "MODE", "value": "serve"}],
        ports=[{"name": "http", "port": 8080}],
        command=["python", "-m", "serve"],
    ),
    # Its SSH keys' ConfigMap is missing: a kubelet waits with ContainerCreating. KWOK's
    # mounts nothing, so its start is held back instead.
    contract("ssh-waiting", ssh=True, ssh_image="ghcr.io/example/sshd:1.0"),
    contract(
        "shared",
        "hami-core-gpu.project-hami.io",
        capacity={"cores": "25", "memory": "20Gi"},
    ),
    contract(
        "mig-pair",
        "mig.nvidia.com",
        count=2,
        selectors=['device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'],
        match_attribute="gpu.nvidia.com/parentUUID",
    ),
    contract(
        "fallback",
        "nvidia-rtx-3080",
        count=9,
        alternatives=[{"name": "l40s", "deviceClassName": "nvidia-l40s", "count": 1}],
    ),
    contract("too-big", count=9),
    # KWOK's kubelet never pulls an image of the reserved host registry.invalid.
    contract("pull-failing", image="registry.invalid/example/worker:1.0"),
    contract("crashing"),
    contract("failed"),
    contract("not-ready"),
    contract("evicted"),
]


def _running(pod: dict) -> bool:
    conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
    return pod["status"].get("phase") == "Running" and conditions.get("Ready") == "True"


def _waiting(*reasons: str) -> Callable[[dict], bool]:
    def waits(pod: dict) -> bool:
        return any(
            ((entry.get("state") or {}).get("waiting") or {}).get("reason") in reasons
            for entry in pod["status"].get("containerStatuses") or []
        )

    return waits


def _placed_and_starting(pod: dict) -> bool:
    return bool(pod["spec"].get("nodeName")) and _waiting("ContainerCreating")(pod)


def _unschedulable(pod: dict) -> bool:
    return any(
        c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in pod["status"].get("conditions") or []
    )


# What each unit's pod shows once the cluster has played it, by unit (a test then writes
# what a kubelet would of "failed" and "not-ready", and has "evicted" evicted).
SETTLED: dict[str, Callable[[dict], bool]] = {
    "ssh-waiting": _placed_and_starting,
    "too-big": _unschedulable,
    "pull-failing": _waiting("ImagePullBackOff"),
    "crashing": _waiting("CrashLoopBackOff"),
    **dict.fromkeys(
        ("mig-7g", "running", "shared", "mig-pair", "fallback", "failed", "not-ready", "evicted"),
        _running,
    ),
}


def as_served(resource: str, obj: dict) -> dict:
    """The object with what writers the development cluster does not run leave on it: a
    kubectl annotation, and on a node the images a real kubelet reports (KWOK's reports
    none)."""
    served = copy.deepcopy(obj)
    metadata = served.setdefault("metadata", {})
    metadata.setdefault("annotations", {})["kubectl.kubernetes.io/last-applied-configuration"] = (
        '{"apiVersion":"v1"}'
    )
    if resource == "nodes":
        served["status"]["images"] = [
            {"names": [f"registry.example/image-{i}@sha256:{i:064x}"], "sizeBytes": 10**9}
            for i in range(20)
        ]
    return served


@dataclass(frozen=True)
class World:
    """What the observer would hold (by plural), the last state of the pods a watch saw
    deleted, and the devices each unit's claim held before any was evicted (by unit)."""

    objects: dict[str, list[dict]]
    deleted_pods: list[dict]
    held: dict[str, list[dict]]


def _create(dev: DevCluster, obj: dict) -> dict:
    path = dev.api.path(obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"))
    return dev.api.request("POST", path, obj)


def _unit_pod(dev: DevCluster, unit: str) -> dict:
    found = dev.pod(UNITS, manifests.pod_name_for(unit))
    assert found is not None, unit
    return found


def _write_pod_status(dev: DevCluster, unit: str, **fields) -> None:
    """What a kubelet writes of the unit's pod that KWOK's does not play (an eviction for
    node pressure, a failing readiness probe)."""
    dev.api.patch(
        "v1", "Pod", manifests.pod_name_for(unit), {"status": fields}, UNITS, subresource="status"
    )


def _claim(dev: DevCluster, unit: str) -> dict:
    found = dev.api.get(
        "resource.k8s.io/v1", "ResourceClaim", manifests.claim_name_for(unit), UNITS
    )
    assert found is not None, unit
    return found


def _released(claim: dict) -> bool:
    """Deallocated by the controller-manager once no pod uses it, and its finalizer gone."""
    return not (claim.get("status") or {}).get("allocation") and (
        "resource.kubernetes.io/delete-protection" not in claim["metadata"].get("finalizers", [])
    )


def _make_unit(dev: DevCluster, unit: manifests.UnitContract) -> None:
    gpuunit = _create(dev, manifests.build_gpuunit(unit))
    owner = gpuunit["metadata"]["uid"]
    _create(dev, manifests.build_resource_claim(unit, owner_uid=owner))
    pod = manifests.build_pod(unit, owner_uid=owner)
    metadata = pod["metadata"]
    if unit.name == "ssh-waiting":
        metadata.setdefault("annotations", {})[START_DELAY] = "24h"
    if unit.name == "crashing":  # its container exits a second after it starts, and again
        metadata.setdefault("labels", {})[CHAOS_LABEL] = "crash-loop"
        metadata.setdefault("annotations", {})[BACKOFF] = "24h"
    _create(dev, pod)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    """Every object the observer watches, by plural, as served by a development cluster of the
    shipped sample topology (whole GPUs, HAMi shared GPUs, static and dynamic MIG): units in
    every state the status derivation tells apart, placed by the real scheduler, a foreign pod
    with an init container, a quota the controller-manager counts, a device the driver taints,
    a device taint rule, and the last state of the pod the controller-manager evicted for it
    (a watch's DELETED event)."""
    with DevCluster(tmp_path_factory.mktemp("trim")) as dev:
        yield _build_world(dev)


def _build_world(dev: DevCluster) -> World:
    dev.apply_manifests(CRD)
    for namespace in (UNITS, "batch"):
        dev.api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # Pods are admitted once their namespace has its ServiceAccount (the controller-manager's).
    wait_until(
        lambda: all(
            dev.api.get("v1", "ServiceAccount", "default", namespace)
            for namespace in (UNITS, "batch")
        ),
        "the namespaces' service accounts were made",
        timeout=60,
    )
    quota = manifests.build_resource_quota(
        UNITS, tenant=UNITS, cpu="512", memory="2Ti", claims=64, devices={"nvidia-h100": 16}
    )
    _create(dev, quota)
    # The driver marks one L40S it sees failing: no claim is given it.
    l40s = next(
        s
        for s in dev.api.list("resource.k8s.io/v1", "ResourceSlice")
        if s["spec"]["nodeName"] == "gpu-node-l40s-0"
    )
    l40s["spec"]["devices"][7]["taints"] = [
        {"key": "gpu.nvidia.com/ecc", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
    ]
    dev.api.request(
        "PUT",
        dev.api.path("resource.k8s.io/v1", "ResourceSlice", name=l40s["metadata"]["name"]),
        l40s,
    )
    first, *others = CONTRACTS
    _make_unit(dev, first)
    wait_until(
        lambda: SETTLED[first.name](_unit_pod(dev, first.name)), f"{first.name} ran", timeout=60
    )
    for unit in others:
        _make_unit(dev, unit)
    _create(
        dev,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "batch", "namespace": "batch", "labels": {"app": "batch"}},
            "spec": {
                "nodeName": "gpu-node-h100-0",
                "initContainers": [
                    {
                        "name": "fetch",
                        "image": "busybox",
                        "resources": {"requests": {"cpu": "4", "memory": "16Gi"}},
                    }
                ],
                "containers": [
                    {"name": "a", "image": "busybox", "resources": {"requests": {"cpu": "1"}}},
                    {"name": "b", "image": "busybox", "resources": {"limits": {"memory": "1Gi"}}},
                ],
            },
        },
    )
    for unit in others:
        wait_until(
            lambda unit=unit: SETTLED[unit.name](_unit_pod(dev, unit.name)),
            f"{unit.name}'s pod settled",
            timeout=60,
        )
    held = {
        unit.name: status.dra_status("", _claim(dev, unit.name))["devices"] for unit in CONTRACTS
    }

    # Its readiness probe fails: Running, but its container and the pod not ready.
    pod = _unit_pod(dev, "not-ready")
    _write_pod_status(
        dev,
        "not-ready",
        conditions=[
            {**condition, "status": "False", "reason": "ContainersNotReady"}
            if condition["type"] in ("Ready", "ContainersReady")
            else condition
            for condition in pod["status"]["conditions"]
        ],
        containerStatuses=[
            {**entry, "ready": False} for entry in pod["status"]["containerStatuses"]
        ],
    )
    _write_pod_status(
        dev, "failed", phase="Failed", reason="Evicted", message="The node was low on memory."
    )

    # An admin taints the device the "evicted" unit holds: the controller-manager evicts its
    # pod, which goes.
    (device,) = held["evicted"]
    since = dev.api.request("GET", "/api/v1/pods", query={"limit": "1"})["metadata"][
        "resourceVersion"
    ]
    dev.taint_device(
        device["driver"], device["pool"], device["device"], key="gpu.nvidia.com/xid", value="79"
    )
    deleted = []
    for change in dev.api.watch("v1", "Pod", resource_version=since, timeout=60):
        if change["type"] == "DELETED":
            deleted.append(change["object"])
            if change["object"]["metadata"]["name"] == manifests.pod_name_for("evicted"):
                break

    # The control plane writes each GPUUnit's status; one is being deleted, held by a
    # controller's finalizer.
    for unit in CONTRACTS:
        dev.api.patch(
            *RESOURCES["gpuunits"],
            unit.name,
            {
                "status": {
                    "phase": "Running",
                    "reason": "Running",
                    "message": "The unit is running.",
                    "nodeName": "gpu-node-h100-0",
                    "dra": {"claimName": unit.claim_name, "devices": []},
                    "observedGeneration": 1,
                    "lastSyncTime": "2026-01-01T00:00:00Z",
                }
            },
            UNITS,
            subresource="status",
        )
    dev.api.patch(*RESOURCES["gpuunits"], "failed", {"metadata": {"finalizers": [HOLD]}}, UNITS)
    dev.api.delete(*RESOURCES["gpuunits"], "failed", UNITS)

    # What the controllers do about a terminated pod settles before the objects are read: the
    # claims of the failed and the evicted pod are released, and the quota counts them all.
    for unit in ("failed", "evicted"):
        wait_until(
            lambda unit=unit: _released(_claim(dev, unit)),
            f"{unit}'s claim was released",
            timeout=60,
        )
    wait_until(
        lambda: (
            (dev.api.get("v1", "ResourceQuota", quota["metadata"]["name"], UNITS) or {})
            .get("status", {})
            .get("used", {})
            .get("count/resourceclaims.resource.k8s.io")
            == str(len(CONTRACTS))
        ),
        "the quota counted the claims",
        timeout=60,
    )
    objects = {
        plural: [as_served(plural, obj) for obj in dev.api.list(api_version, kind)]
        for plural, (api_version, kind) in RESOURCES.items()
    }
    return World(objects, [as_served("pods", obj) for obj in deleted], held)


def trimmed(plural: str, objects: list[dict]) -> list[dict]:
    return [trim.TRANSFORMS[plural](obj) for obj in objects]


def inventory_of(objects: dict[str, list[dict]], transform: bool) -> observe.Observation:
    raw = {
        name: trimmed(kind.plural, objects[kind.plural]) if transform else objects[kind.plural]
        for name, kind in INVENTORY_KINDS.items()
    }
    return observe.observe(**raw, packages=PACKAGES)


def observed_units(objects: dict[str, list[dict]]) -> dict[str, status.Observed]:
    claims = {key_of(claim): claim for claim in objects["resourceclaims"]}
    return {
        pod["metadata"]["labels"][manifests.LABEL_UNIT]: status.observe(
            claim_name="gpu",
            claim=claims.get(
                (UNITS, manifests.claim_name_for(pod["metadata"]["labels"][manifests.LABEL_UNIT]))
            ),
            pod=pod,
        )
        for pod in objects["pods"]
        if manifests.LABEL_UNIT in (pod["metadata"].get("labels") or {})
    }


def test_the_cluster_has_every_case_the_consumers_tell_apart(world) -> None:
    """Equal results would prove little of objects that all looked alike."""
    observed = observed_units(world.objects)
    assert {o.reason for o in observed.values()} == {
        "Running",
        "Starting",
        "NoMatchingDevices",
        "ImagePullFailed",
        "ContainerCrashLoop",
        "Evicted",
        "ContainersNotReady",
    }
    assert observed["fallback"].dra["alternative"] == "l40s"
    assert observed["shared"].dra["devices"][0]["shareID"]
    assert [reconcile.evicted_by_taint(pod) for pod in world.deleted_pods] == [True]
    inventory = inventory_of(world.objects, transform=False)
    assert inventory.shareable
    assert inventory.quotas
    assert any(counter_set.used for counter_set in inventory.counter_sets.values())
    assert any(device["tainted"] for device in inventory.devices.values())
    assert inventory.nodes["gpu-node-h100-0"]["cpu_requested_millicores"] > 0


def test_the_inventory_is_the_same_from_trimmed_objects(world) -> None:
    whole, kept = (
        inventory_of(world.objects, transform=False),
        inventory_of(world.objects, transform=True),
    )
    assert kept == whole
    assert observe.build_document(kept) == observe.build_document(whole)
    assert observe.package_availability(kept, PACKAGES) == observe.package_availability(
        whole, PACKAGES
    )


def _rows(gpuunit: dict, held: list[dict]) -> list[GPUUnit]:
    """The unit's row in each state the reconcile treats apart."""
    name = gpuunit["metadata"]["name"]
    claim_name = manifests.claim_name_for(name)
    dra = status.dra_status(claim_name, None)
    base = {
        "name": name,
        "namespace": UNITS,
        "claim_name": claim_name,
        "unit_k8s_uid": gpuunit["metadata"]["uid"],
        "generation": 1,
        "observed_generation": 1,
    }
    return [
        GPUUnit(**base, phase=UnitPhase.PROVISIONING, dra=dra),
        GPUUnit(**base, phase=UnitPhase.RUNNING, dra={**dra, "allocated": True, "devices": held}),
        GPUUnit(**base, phase=UnitPhase.FAILED, reason=reconcile.DEVICE_UNHEALTHY, dra=dra),
        GPUUnit(**base, phase=UnitPhase.STOPPED, dra=dra),
        GPUUnit(**base, phase=UnitPhase.TERMINATING, dra=dra),
        GPUUnit(**{**base, "generation": 2}, phase=UnitPhase.RUNNING, dra=dra),
        GPUUnit(**{**base, "unit_k8s_uid": "a-later-unit"}, phase=UnitPhase.RUNNING, dra=dra),
    ]


def test_each_units_reconcile_is_the_same_from_trimmed_objects(world) -> None:
    inventory = inventory_of(world.objects, transform=False)
    taints = {key: device["taints"] for key, device in inventory.devices.items()}
    by_key = {
        plural: {key_of(obj): obj for obj in world.objects[plural]}
        for plural in ("gpuunits", "resourceclaims", "pods")
    }
    deleted = {key_of(obj): obj for obj in world.deleted_pods}
    compared = 0
    for gpuunit in world.objects["gpuunits"]:
        name = gpuunit["metadata"]["name"]
        pod_key = (UNITS, manifests.pod_name_for(name))
        whole = reconcile.UnitObjects(
            gpuunit=gpuunit,
            claim=by_key["resourceclaims"].get((UNITS, manifests.claim_name_for(name))),
            pod=by_key["pods"].get(pod_key),
            last_pod=deleted.get(pod_key),
        )
        kept = reconcile.UnitObjects(
            **{
                part: obj and trim.TRANSFORMS[plural](obj)
                for part, plural, obj in (
                    ("gpuunit", "gpuunits", whole.gpuunit),
                    ("claim", "resourceclaims", whole.claim),
                    ("pod", "pods", whole.pod),
                    ("last_pod", "pods", whole.last_pod),
                )
            }
        )
        # Without taints in the mirror, only the deleted pod's last state says it was evicted.
        for unit, known in itertools.product(_rows(gpuunit, world.held[name]), (taints, {})):
            assert reconcile.plan_pod(unit, kept, known) == reconcile.plan_pod(unit, whole, known)
            now = timezone.now()  # the start deadline's clock, one for both
            assert reconcile.plan_row(unit, kept, known, now=now) == reconcile.plan_row(
                unit, whole, known, now=now
            )
            assert reconcile.desired_status(unit, kept.gpuunit) == reconcile.desired_status(
                unit, whole.gpuunit
            )
            compared += 1
        assert status.observe(
            claim_name=manifests.claim_name_for(name), claim=kept.claim, pod=kept.pod
        ) == status.observe(
            claim_name=manifests.claim_name_for(name), claim=whole.claim, pod=whole.pod
        )
        assert (kept.gpuunit or {}).get("status") == whole.gpuunit.get("status")
    assert compared == len(CONTRACTS) * 7 * 2


def test_the_observer_keys_and_filters_trimmed_objects_alike(world) -> None:
    """Events go to the same unit, and a GPUUnit's status write is told from a spec change
    (uid, generation, deletionTimestamp) as before; recreating a pod finds the request hash."""
    for kind in (kube.GPUUNIT, *INVENTORY_KINDS.values()):
        for obj in world.objects[kind.plural]:
            kept = trim.TRANSFORMS[kind.plural](obj)
            assert key_of(kept) == key_of(obj)
            assert Observer._unit_key(kind, kept) == Observer._unit_key(kind, obj)
            for field in ("uid", "generation", "deletionTimestamp", "resourceVersion"):
                assert kept["metadata"].get(field) == obj["metadata"].get(field)
    for gpuunit in world.objects["gpuunits"]:
        kept = trim.TRANSFORMS["gpuunits"](gpuunit)
        assert kept["metadata"]["annotations"] == {
            manifests.ANNOTATION_REQUEST_HASH: gpuunit["metadata"]["annotations"][
                manifests.ANNOTATION_REQUEST_HASH
            ]
        }


def test_trimming_drops_what_no_consumer_reads(world) -> None:
    for plural, transform in trim.TRANSFORMS.items():
        for obj in world.objects[plural]:
            kept = transform(obj)
            assert "managedFields" in obj["metadata"]
            assert "managedFields" not in kept["metadata"]
            assert "ownerReferences" not in kept["metadata"]
            assert "last-applied" not in str(kept.get("metadata"))
            assert set(kept) <= {"metadata", "spec", "status"}
    pod = next(p for p in world.objects["pods"] if p["metadata"]["name"] == "unit-running")
    kept = trim.trim_pod(pod)
    assert kept["spec"]["containers"] == [
        {"resources": {"requests": pod["spec"]["containers"][0]["resources"]["requests"]}}
    ]
    assert set(kept["spec"]) == {"nodeName", "containers"}
    assert "spec" not in trim.trim_gpuunit(world.objects["gpuunits"][0])
    assert "spec" not in trim.trim_resource_claim(world.objects["resourceclaims"][0])
    node = trim.trim_node(world.objects["nodes"][0])
    assert set(node["status"]) == {"allocatable", "conditions"}


def test_trimming_leaves_its_input_alone_and_is_idempotent(world) -> None:
    for plural, transform in trim.TRANSFORMS.items():
        for obj in world.objects[plural]:
            before = copy.deepcopy(obj)
            kept = transform(obj)
            assert obj == before
            assert transform(kept) == kept


def _pod(name: str, *, ready: str = "True", cpu: str = "1") -> dict:
    return {
        "metadata": {"name": name, "namespace": UNITS, "uid": f"uid-{name}"},
        "spec": {
            "nodeName": "node-a",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": name}],
        },
    }


def test_what_trimmed_objects_repeat_is_held_once() -> None:
    first, second = trim.trim_pod(_pod("a")), trim.trim_pod(_pod("b"))
    unready, bigger = trim.trim_pod(_pod("c", ready="False")), trim.trim_pod(_pod("d", cpu="2"))
    assert first["spec"]["containers"] is second["spec"]["containers"]
    assert first["status"]["conditions"] is second["status"]["conditions"]
    assert unready["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    assert bigger["spec"]["containers"] == [{"resources": {"requests": {"cpu": "2"}}}]
    assert first["metadata"] is not second["metadata"]
    assert first == trim.trim_pod(_pod("a"))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([0.0, 1.0, 2.5]) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON, max_size=20))
def test_a_shared_value_is_the_value_it_stands_for(values: list) -> None:
    """Kept values are looked up by what JSON tells apart: the same keys in the same order
    and items of the same types (True is not 1, nor 1 the same as 1.0)."""
    shared = trim._Shared(size=4)
    kept = [shared(value) for value in values]
    for value, found in zip(values, kept, strict=True):
        assert orjson.dumps(found) == orjson.dumps(value)
    assert len(shared.young) + len(shared.old) <= 8


def test_the_consumers_leave_what_the_informers_hold_alone(world) -> None:
    """Trimmed objects share their equal parts: a consumer that changed one in place would
    change it in every object that holds it. None does."""
    kept = {plural: trimmed(plural, world.objects[plural]) for plural in trim.TRANSFORMS}
    before = copy.deepcopy(kept)
    raw = {name: kept[kind.plural] for name, kind in INVENTORY_KINDS.items()}
    inventory = observe.observe(**raw, packages=PACKAGES)
    observe.build_document(inventory)
    observe.package_availability(inventory, PACKAGES)
    observed_units(kept)
    taints = {key: device["taints"] for key, device in inventory.devices.items()}
    by_key = {plural: {key_of(obj): obj for obj in kept[plural]} for plural in trim.TRANSFORMS}
    for gpuunit in kept["gpuunits"]:
        name = gpuunit["metadata"]["name"]
        objects = reconcile.UnitObjects(
            gpuunit=gpuunit,
            claim=by_key["resourceclaims"].get((UNITS, manifests.claim_name_for(name))),
            pod=by_key["pods"].get((UNITS, manifests.pod_name_for(name))),
        )
        for unit in _rows(gpuunit, world.held[name]):
            reconcile.plan_pod(unit, objects, taints)
            reconcile.plan_row(unit, objects, taints)
            reconcile.desired_status(unit, gpuunit)
    assert kept == before


def test_every_watched_kind_has_a_transform() -> None:
    assert set(trim.TRANSFORMS) == {k.plural for k in (kube.GPUUNIT, *INVENTORY_KINDS.values())}


def test_an_informer_keeps_and_hands_on_what_its_transform_returns(dev) -> None:
    """Even with a transform that drops the resourceVersion, the informer follows the
    versions the server sent (what its watch resumes from)."""

    def reason_only(obj: dict) -> dict:
        metadata = obj["metadata"]
        kept = {"name": metadata["name"], "namespace": metadata["namespace"]}
        return {"metadata": kept, "reason": obj.get("reason")}

    seen: list[dict] = []

    class Keeping(Recorder):
        def replaced(self, kind, objects) -> None:
            seen.extend(objects.values())
            super().replaced(kind, objects)

        def changed(self, kind, change) -> None:
            seen.append(change.object)
            super().changed(kind, change)

    kube.create(EVENT, NAMESPACE, event("before"))
    handler = Keeping()
    informer = watching(handler, transform=reason_only)
    try:
        listed_at = int(informer.resource_version)
        kube.merge_patch(EVENT, NAMESPACE, "before", {"reason": "Changed"})
        kube.create(EVENT, NAMESPACE, event("after"))
        handler.wait_for(lambda: len(handler.events) == 2)
        assert informer.snapshot() == {
            (NAMESPACE, "before"): {
                "metadata": {"name": "before", "namespace": NAMESPACE},
                "reason": "Changed",
            },
            (NAMESPACE, "after"): {
                "metadata": {"name": "after", "namespace": NAMESPACE},
                "reason": "Probe",
            },
        }
        assert all(set(obj) == {"metadata", "reason"} for obj in seen)
        assert int(informer.resource_version) > listed_at
    finally:
        informer.stop()

"""Validation by emulated version, over HTTP: a write is checked against the strict schemas of
the version the cluster emulates (kubernetes-validate's v1.34.0, v1.35.0 and v1.36.0 sets), and
by that version's ResourceSlice and device-taint rules: 1.34 keeps a device's counters in its own
slice, 1.35 puts counter sets in slices of their own, and 1.35 adds the None effect. Each
cluster has the alpha DRA gates the checks need turned on, as a 1.34 or 1.35 cluster running
partitionable devices must."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from simcluster.cluster import SimCluster
from simcluster.tests.conftest import TINY_TOPOLOGY
from simcluster.tests.test_scheduler_api import _make_env
from simcluster.topology import load_topology

VERSIONS = ("1.34", "1.35", "1.36")
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
# Off by default before 1.36; on in 1.36.
ALPHA_GATES = {"DRAPartitionableDevices": True, "DRADeviceTaints": True}


@pytest.fixture(scope="module")
def clusters() -> Iterator[dict[str, SimCluster]]:
    started: dict[str, SimCluster] = {}
    try:
        for version in VERSIONS:
            gates = ALPHA_GATES if version != "1.36" else {"DRADeviceTaintRules": True}
            started[version] = SimCluster(
                topology=TINY_TOPOLOGY, emulated_version=version, feature_gates=gates
            ).start()
        yield started
    finally:
        for cluster in started.values():
            cluster.stop()


def _send(
    cluster: SimCluster, method: str, path: str, body: Any = None
) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        cluster.url + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _slice(**spec: Any) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"slice-{tag}"},
        "spec": {
            "driver": "gpu.example.com",
            "allNodes": True,
            "pool": {"name": f"pool-{tag}", "generation": 1, "resourceSliceCount": 1},
            **spec,
        },
    }


def _counter_set(name: str) -> dict[str, Any]:
    return {"name": name, "counters": {"memory": {"value": "80Gi"}}}


def _partition(name: str, counter_set: str) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"type": {"string": "partition"}},
        "consumesCounters": [
            {"counterSet": counter_set, "counters": {"memory": {"value": "40Gi"}}}
        ],
    }


def _causes(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in body["details"]["causes"]]


# -- the schema set of the version ---------------------------------------------------------------


@pytest.mark.parametrize(("version", "status"), [("1.34", 400), ("1.35", 201), ("1.36", 400)])
def test_a_pod_field_is_known_only_where_the_versions_schema_has_it(
    clusters: dict[str, SimCluster], version: str, status: int
) -> None:
    """Pod spec.workloadRef exists in the 1.35 schema only (1.36 replaced it with
    schedulingGroup): a strict create knows it there and nowhere else."""
    name = f"wl-{uuid.uuid4().hex[:8]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "workloadRef": {"name": "training", "podGroup": "workers"},
        },
    }
    cluster = clusters[version]

    code, body = _send(
        cluster, "POST", "/api/v1/namespaces/default/pods?fieldValidation=Strict", pod
    )
    if code == 201:
        _send(cluster, "DELETE", f"/api/v1/namespaces/default/pods/{name}")

    assert code == status
    if status == 400:
        assert body["message"] == (
            'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
            'unknown field "spec.workloadRef"'
        )


def test_a_rule_selecting_by_device_class_is_known_to_1_34_only(
    clusters: dict[str, SimCluster],
) -> None:
    """1.35 dropped DeviceTaintRule's deviceClassName and CEL selectors (k8s PR #134152): its
    v1alpha3 schema has neither, so a strict create refuses them."""
    rule = {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"by-class-{uuid.uuid4().hex[:8]}"},
        "spec": {
            "deviceSelector": {"deviceClassName": "gpu.example.com"},
            "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
        },
    }
    path = "/apis/resource.k8s.io/v1alpha3/devicetaintrules?fieldValidation=Strict"

    old_status, _ = _send(clusters["1.34"], "POST", path, rule)
    new_status, refused = _send(clusters["1.36"], "POST", path, rule)

    assert old_status == 201
    assert new_status == 400
    assert refused["message"] == (
        'DeviceTaintRule in version "v1alpha3" cannot be handled as a DeviceTaintRule: strict '
        'decoding error: unknown field "spec.deviceSelector.deviceClassName"'
    )


# -- ResourceSlice counters ------------------------------------------------------------------


def test_a_1_34_slice_holds_its_counters_and_the_devices_drawing_on_them(
    clusters: dict[str, SimCluster],
) -> None:
    together = _slice(
        sharedCounters=[_counter_set("gpu-0")], devices=[_partition("gpu-0-half", "gpu-0")]
    )
    apart = _slice(devices=[_partition("gpu-0-half", "gpu-0")])

    together_status, _ = _send(clusters["1.34"], "POST", SLICES, together)
    apart_status, refused = _send(clusters["1.34"], "POST", SLICES, apart)

    assert together_status == 201
    assert apart_status == 422
    assert _causes(refused) == [
        (
            "spec.devices[0].consumesCounters[0].counterSet",
            'Invalid value: "gpu-0": must reference a counterSet defined in the ResourceSlice '
            "sharedCounters",
        )
    ]


def test_a_1_34_slice_holds_at_most_32_shared_counters(clusters: dict[str, SimCluster]) -> None:
    sets = [
        {"name": f"gpu-{n}", "counters": {f"c{i}": {"value": "1"} for i in range(11)}}
        for n in range(3)
    ]

    status, refused = _send(clusters["1.34"], "POST", SLICES, _slice(sharedCounters=sets))

    assert status == 422
    assert _causes(refused) == [
        (
            "spec.sharedCounters",
            "Invalid value: 33: the total number of shared counters must not exceed 32",
        )
    ]


@pytest.mark.parametrize("version", ["1.35", "1.36"])
def test_a_slice_holds_devices_or_counters_not_both_when_1_35_on(
    clusters: dict[str, SimCluster], version: str
) -> None:
    """The error dra-driver-nvidia-gpu #859 reports from a 1.35 server."""
    cluster = clusters[version]
    together = _slice(
        sharedCounters=[_counter_set("gpu-0")], devices=[_partition("gpu-0-half", "gpu-0")]
    )
    counters = _slice(sharedCounters=[_counter_set("gpu-0")])
    devices = _slice(devices=[_partition("gpu-0-half", "gpu-0")])

    status, refused = _send(cluster, "POST", SLICES, together)
    counters_status, _ = _send(cluster, "POST", SLICES, counters)
    devices_status, _ = _send(cluster, "POST", SLICES, devices)

    assert status == 422
    assert refused["message"] == (
        f'ResourceSlice.resource.k8s.io "{together["metadata"]["name"]}" is invalid: spec: '
        'Invalid value: "": only one of `sharedCounters` or `devices` is allowed'
    )
    assert (counters_status, devices_status) == (201, 201)


def test_a_slice_holds_at_most_8_counter_sets_when_1_35(clusters: dict[str, SimCluster]) -> None:
    sets = [_counter_set(f"gpu-{n}") for n in range(9)]

    status, refused = _send(clusters["1.35"], "POST", SLICES, _slice(sharedCounters=sets))

    assert status == 422
    assert _causes(refused) == [("spec.sharedCounters", "Too many: 9: must have at most 8 items")]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_sample_topologys_slices_are_valid_when_each_version(
    clusters: dict[str, SimCluster], version: str
) -> None:
    """What the shipped topology seeds (its MIG node's counters included) is what a driver may
    publish to a server of that version."""
    cluster = clusters[version]
    slices = [obj for kind, obj in load_topology(None, version=version) if kind == "resourceslices"]
    answers = []
    for resource_slice in slices:
        resource_slice["metadata"]["name"] += f"-{uuid.uuid4().hex[:6]}"
        status, body = _send(cluster, "POST", SLICES, resource_slice)
        answers.append((status, body.get("message")))

    assert any("sharedCounters" in s["spec"] for s in slices)
    assert answers == [(201, None)] * len(slices)


# -- device taints ----------------------------------------------------------------------------


def test_a_none_taint_is_refused_when_1_34_and_kept_when_1_36(
    clusters: dict[str, SimCluster],
) -> None:
    device = {"name": "gpu-0", "taints": [{"key": "example.com/health", "effect": "None"}]}

    old_status, refused = _send(clusters["1.34"], "POST", SLICES, _slice(devices=[device]))
    new_status, stored = _send(clusters["1.36"], "POST", SLICES, _slice(devices=[device]))

    assert old_status == 422
    assert _causes(refused) == [
        (
            "spec.devices[0].taints[0].effect",
            'Unsupported value: "None": supported values: "NoExecute", "NoSchedule"',
        )
    ]
    assert new_status == 201
    assert stored["spec"]["devices"][0]["taints"][0]["effect"] == "None"


def test_a_device_holds_16_taints_when_1_36_and_4_when_1_34(
    clusters: dict[str, SimCluster],
) -> None:
    taints = [{"key": f"example.com/t{n}", "effect": "NoSchedule"} for n in range(5)]
    device = {"name": "gpu-0", "taints": taints}

    old_status, refused = _send(clusters["1.34"], "POST", SLICES, _slice(devices=[device]))
    new_status, _ = _send(clusters["1.36"], "POST", SLICES, _slice(devices=[device]))

    assert (old_status, new_status) == (422, 201)
    assert _causes(refused) == [
        ("spec.devices[0].taints", "Too many: 5: must have at most 4 items")
    ]


def test_an_untolerated_none_taint_does_not_keep_a_device_from_a_claim_when_1_36(
    sim: SimCluster, kube_api: client.ApiClient
) -> None:
    """None marks a device (device health) without affecting scheduling: the allocator counts
    only NoSchedule and NoExecute."""
    env = next(gpus := _make_env(sim, kube_api, [1]))
    try:
        name = (
            env.resource.list_resource_slice(field_selector=f"spec.nodeName={env.nodes[0]}")
            .items[0]
            .metadata.name
        )
        stored = env.resource.api_client.sanitize_for_serialization(
            env.resource.read_resource_slice(name)
        )
        stored["spec"]["devices"][0]["taints"] = [{"key": "example.com/health", "effect": "None"}]
        env.resource.replace_resource_slice(name, stored)
        env.claim("marked", count=1)
        env.pod("marked", "marked")

        pod = env.wait_running("marked")
    finally:
        next(gpus, None)

    assert pod.spec.node_name == env.nodes[0]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("selector", [{}, {"cel": None}])
def test_a_claim_selector_without_cel_is_refused_as_the_api_server_does(
    clusters: dict[str, SimCluster], version: str, selector: dict
) -> None:
    """validateSelector: `cel` is a DeviceSelector's required member (422, Required value at
    its path), in `exactly` and in each firstAvailable subrequest alike."""
    name = f"no-cel-{uuid.uuid4().hex[:8]}"
    exactly = {"deviceClassName": "gpu.example.com", "selectors": [selector]}
    for request in (
        {"name": "gpu", "exactly": exactly},
        {"name": "gpu", "firstAvailable": [{"name": "a", **exactly}]},
    ):
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [request]}},
        }
        code, status = _send(
            clusters[version],
            "POST",
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
            body,
        )
        assert code == 422, status
        causes = status["details"]["causes"]
        where = "exactly" if "exactly" in request else "firstAvailable[0]"
        assert {
            "reason": "FieldValueRequired",
            "message": "Required value",
            "field": f"spec.devices.requests[0].{where}.selectors[0].cel",
        } in causes, causes

"""Device taints and tolerations (KEP-5055) in the simulated cluster, over HTTP with the official
client against a cluster emulating 1.34 with DRADeviceTaints on (which serves DeviceTaintRules,
resource.k8s.io/v1alpha3): ResourceSlice taints and DeviceTaintRules validated and defaulted as
the API server does, the allocator honouring taints and the claims' tolerations, and the
device-taint-eviction controller deleting the pods of a device tainted NoExecute. What 1.35 and
1.36 changed is in test_emulated_version.py."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client import ApiException

from simcluster.cluster import SimCluster
from simcluster.tests.conftest import TINY_TOPOLOGY, Kubectl, wait_until
from simcluster.tests.test_scheduler_api import GpuEnv, _make_env

RULES_PATH = "/apis/resource.k8s.io/v1alpha3/devicetaintrules"
TAINT_KEY = "example.com/unhealthy"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimCluster]:
    """This module's cluster: 1.34, with the alpha DRADeviceTaints gate turned on."""
    cluster = SimCluster(
        topology=TINY_TOPOLOGY, emulated_version="1.34", feature_gates={"DRADeviceTaints": True}
    ).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def kubeconfig(sim: SimCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sim.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")


@pytest.fixture
def gpus(sim: SimCluster, kube_api: client.ApiClient) -> Iterator[GpuEnv]:
    """One node with two GPUs."""
    yield from _make_env(sim, kube_api, [2])


@pytest.fixture
def two_nodes(sim: SimCluster, kube_api: client.ApiClient) -> Iterator[GpuEnv]:
    """Two nodes with two GPUs each, of two distinct products."""
    yield from _make_env(sim, kube_api, [2, 2])


@pytest.fixture
def rules(kube_api: client.ApiClient) -> Iterator[client.ResourceV1alpha3Api]:
    """The v1alpha3 API; every rule a test makes is deleted after it (rules are cluster-wide)."""
    api = client.ResourceV1alpha3Api(kube_api)
    before = {r.metadata.name for r in api.list_device_taint_rule().items}
    yield api
    for rule in api.list_device_taint_rule().items:
        if rule.metadata.name not in before:
            api.delete_device_taint_rule(rule.metadata.name)


def _raw(sim: SimCluster, method: str, path: str, body: Any = None) -> tuple[int, dict]:
    """A request the typed client cannot send: its 1.37 models lack the 1.34 selector fields
    (deviceClassName, selectors) and refuse invalid bodies before they leave."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        sim.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _rule(name: str, selector: dict[str, Any] | None, effect: str, **taint: Any) -> dict:
    spec: dict[str, Any] = {"taint": {"key": TAINT_KEY, "effect": effect, **taint}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def _slice_name(env: GpuEnv, node: str) -> str:
    found = env.resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items
    return found[0].metadata.name


def _taint_slice(env: GpuEnv, node: str, taints: dict[str, list[dict]]) -> dict:
    """Put `taints` (by device name) on the node's slice, as its driver would; the stored slice."""
    name = _slice_name(env, node)
    current = env.resource.api_client.sanitize_for_serialization(
        env.resource.read_resource_slice(name)
    )
    for device in current["spec"]["devices"]:
        device["taints"] = taints.get(device["name"], [])
    updated = env.resource.replace_resource_slice(name, current)
    return env.resource.api_client.sanitize_for_serialization(updated)


def _claim_body(name: str, requests: list[dict]) -> dict:
    return {"metadata": {"name": name}, "spec": {"devices": {"requests": requests}}}


def _results(env: GpuEnv, claim: str) -> list[dict]:
    raw = env.resource.api_client.sanitize_for_serialization(env.read_claim(claim))
    return raw["status"]["allocation"]["devices"]["results"]


def _pod_gone(env: GpuEnv, name: str) -> bool:
    try:
        env.read_pod(name)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _events(env: GpuEnv, pod: str, reason: str) -> list[client.CoreV1Event]:
    return [
        e
        for e in env.core.list_namespaced_event(env.namespace).items
        if e.reason == reason and e.involved_object.name == pod
    ]


# -- the API: DeviceTaintRule served, taints and tolerations validated --------------------------


def test_device_taint_rule_is_served_cluster_scoped_under_v1alpha3(
    kube_api: client.ApiClient,
) -> None:
    group = next(
        g for g in client.ApisApi(kube_api).get_api_versions().groups if g.name == "resource.k8s.io"
    )
    resources = client.ResourceV1alpha3Api(kube_api).get_api_resources().resources

    assert {v.version for v in group.versions} == {"v1", "v1alpha3"}
    assert group.preferred_version.version == "v1"
    rule = next(r for r in resources if r.name == "devicetaintrules")
    assert (rule.kind, rule.namespaced, rule.singular_name) == (
        "DeviceTaintRule",
        False,
        "devicetaintrule",
    )
    assert "devicetaintrules/status" not in {r.name for r in resources}


def test_rule_taint_is_stamped_and_a_new_effect_restamps_it(
    rules: client.ResourceV1alpha3Api,
) -> None:
    name = f"stamp-{uuid.uuid4().hex[:8]}"
    created = rules.create_device_taint_rule(
        _rule(name, {"driver": "gpu.example.com"}, "NoSchedule")
    )
    old = _rule(f"{name}-old", {"driver": "gpu.example.com"}, "NoSchedule")
    old["spec"]["taint"]["timeAdded"] = "2025-01-01T00:00:00Z"
    pinned = rules.create_device_taint_rule(old)
    moved = rules.patch_device_taint_rule(
        f"{name}-old", {"spec": {"taint": {"effect": "NoExecute"}}}
    )

    assert created.spec.taint.time_added is not None
    assert created.metadata.generation == 1
    assert pinned.spec.taint.time_added.isoformat() == "2025-01-01T00:00:00+00:00"
    assert moved.spec.taint.effect == "NoExecute"
    assert moved.spec.taint.time_added.year > 2025
    assert moved.metadata.generation == 2


def test_invalid_rules_are_refused_with_the_servers_messages(sim: SimCluster) -> None:
    status, bad_effect = _raw(
        sim, "POST", RULES_PATH, _rule("bad-effect", {"driver": "x.example.com"}, "NoEvict")
    )
    bad_names = _rule("bad-key", {"device": "Not_A_Label"}, "NoSchedule")
    bad_names["spec"]["taint"]["key"] = "bad key"
    _, bad_key = _raw(sim, "POST", RULES_PATH, bad_names)
    _, bad_cel = _raw(
        sim,
        "POST",
        RULES_PATH,
        _rule(
            "bad-cel", {"selectors": [{"cel": {"expression": "device.driver =="}}]}, "NoSchedule"
        ),
    )

    assert status == 422
    assert bad_effect["reason"] == "Invalid"
    assert bad_effect["message"] == (
        'DeviceTaintRule.resource.k8s.io "bad-effect" is invalid: spec.taint.effect: '
        'Unsupported value: "NoEvict": supported values: "NoExecute", "NoSchedule"'
    )
    fields = {c["field"] for c in bad_key["details"]["causes"]}
    assert fields == {"spec.deviceSelector.device", "spec.taint.key"}
    assert "name part must consist of alphanumeric characters" in bad_key["message"]
    assert bad_cel["details"]["causes"][0]["field"] == (
        "spec.deviceSelector.selectors[0].cel.expression"
    )
    assert "compilation failed" in bad_cel["details"]["causes"][0]["message"]


def test_slice_taints_are_validated_as_1_34_does_and_stamped(gpus: GpuEnv) -> None:
    node = gpus.nodes[0]
    name = _slice_name(gpus, node)
    current = gpus.resource.api_client.sanitize_for_serialization(
        gpus.resource.read_resource_slice(name)
    )
    device = current["spec"]["devices"][0]

    device["taints"] = [{"key": f"example.com/t{i}", "effect": "NoSchedule"} for i in range(5)]
    with pytest.raises(ApiException) as too_many:
        gpus.resource.replace_resource_slice(name, current)
    device["taints"] = [{"key": TAINT_KEY, "effect": "None"}]
    with pytest.raises(ApiException) as none_effect:
        gpus.resource.replace_resource_slice(name, current)
    stored = _taint_slice(gpus, node, {"gpu-0": [{"key": TAINT_KEY, "effect": "NoExecute"}]})

    assert json.loads(too_many.value.body)["details"]["causes"] == [
        {
            "reason": "FieldValueTooMany",
            "field": "spec.devices[0].taints",
            "message": "Too many: 5: must have at most 4 items",
        }
    ]
    # "None" is a 1.35 effect; a 1.34 server refuses it.
    assert json.loads(none_effect.value.body)["details"]["causes"][0]["message"] == (
        'Unsupported value: "None": supported values: "NoExecute", "NoSchedule"'
    )
    taint = stored["spec"]["devices"][0]["taints"][0]
    assert taint["effect"] == "NoExecute"
    stamped = datetime.fromisoformat(taint["timeAdded"])
    assert abs((datetime.now(UTC) - stamped).total_seconds()) < 60


def test_claim_tolerations_are_validated_and_defaulted(gpus: GpuEnv, sim: SimCluster) -> None:
    def request(toleration: dict) -> list[dict]:
        exactly = {"deviceClassName": gpus.device_class, "tolerations": [toleration]}
        return [{"name": "gpu", "exactly": exactly}]

    path = f"/apis/resource.k8s.io/v1/namespaces/{gpus.namespace}/resourceclaims"
    exists = {"key": "k", "operator": "Exists", "value": "v"}
    status, exists_with_value = _raw(sim, "POST", path, _claim_body("c1", request(exists)))
    _, bad_operator = _raw(
        sim, "POST", path, _claim_body("c2", request({"key": "k", "operator": "In"}))
    )
    _, bad_effect = _raw(
        sim, "POST", path, _claim_body("c3", request({"key": "k", "effect": "PreferNoSchedule"}))
    )
    created = gpus.resource.create_namespaced_resource_claim(
        gpus.namespace, _claim_body("c4", request({"key": "k", "value": "v"}))
    )

    assert status == 422
    assert exists_with_value["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.devices.requests[0].exactly.tolerations[0].value",
            "message": 'Invalid value: "v": must be empty for operator `Exists`',
        }
    ]
    assert bad_operator["details"]["causes"][0]["message"] == (
        'Unsupported value: "In": supported values: "Equal", "Exists"'
    )
    assert bad_effect["details"]["causes"][0]["field"] == (
        "spec.devices.requests[0].exactly.tolerations[0].effect"
    )
    assert created.spec.devices.requests[0].exactly.tolerations[0].operator == "Equal"


# -- allocation --------------------------------------------------------------------------------


def test_untolerated_no_schedule_taint_keeps_the_device_from_claims(gpus: GpuEnv) -> None:
    node = gpus.nodes[0]
    _taint_slice(gpus, node, {"gpu-0": [{"key": TAINT_KEY, "effect": "NoSchedule"}]})
    gpus.claim("both", count=2)
    gpus.pod("both", "both")
    gpus.claim("one", count=1)
    gpus.pod("one", "one")

    condition = gpus.wait_unscheduled("both")
    gpus.wait_running("one")

    assert condition.reason == "Unschedulable"
    assert "1 cannot allocate all claims" in condition.message
    assert [r["device"] for r in _results(gpus, "one")] == ["gpu-1"]


def test_a_tolerated_taint_allows_the_device_and_the_result_records_the_toleration(
    gpus: GpuEnv,
) -> None:
    node = gpus.nodes[0]
    _taint_slice(
        gpus, node, {"gpu-0": [{"key": TAINT_KEY, "value": "xid", "effect": "NoSchedule"}]}
    )
    toleration = {"key": TAINT_KEY, "operator": "Equal", "value": "xid", "effect": "NoSchedule"}
    gpus.claim("tolerant", count=2, tolerations=[toleration])
    gpus.pod("tolerant", "tolerant")

    gpus.wait_running("tolerant")

    results = _results(gpus, "tolerant")
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]
    assert all(r["tolerations"] == [toleration] for r in results)


def test_a_toleration_of_another_value_does_not_tolerate(gpus: GpuEnv) -> None:
    taint = {"key": TAINT_KEY, "value": "xid", "effect": "NoSchedule"}
    _taint_slice(gpus, gpus.nodes[0], {"gpu-0": [taint]})
    gpus.claim("wrong", count=2, tolerations=[{"key": TAINT_KEY, "value": "other"}])
    gpus.pod("wrong", "wrong")

    assert "cannot allocate all claims" in gpus.wait_unscheduled("wrong").message


def test_all_mode_needs_every_device_of_the_node_tolerated(gpus: GpuEnv) -> None:
    _taint_slice(gpus, gpus.nodes[0], {"gpu-1": [{"key": TAINT_KEY, "effect": "NoSchedule"}]})
    gpus.claim("everything", allocationMode="All")
    gpus.pod("greedy", "everything")

    assert "cannot allocate all claims" in gpus.wait_unscheduled("greedy").message


def test_first_available_falls_back_to_the_subrequest_that_tolerates(gpus: GpuEnv) -> None:
    _taint_slice(gpus, gpus.nodes[0], {"gpu-0": [{"key": TAINT_KEY, "effect": "NoSchedule"}]})
    tolerate = [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    gpus.resource.create_namespaced_resource_claim(
        gpus.namespace,
        _claim_body(
            "fallback",
            [
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {"name": "strict", "deviceClassName": gpus.device_class, "count": 2},
                        {
                            "name": "tolerant",
                            "deviceClassName": gpus.device_class,
                            "count": 2,
                            "tolerations": tolerate,
                        },
                    ],
                }
            ],
        ),
    )
    gpus.pod("fallback", "fallback")

    gpus.wait_running("fallback")

    results = _results(gpus, "fallback")
    assert {r["request"] for r in results} == {"gpu/tolerant"}
    assert results[0]["tolerations"] == [{**tolerate[0]}]


def test_a_rule_keeps_its_devices_free_until_it_is_deleted(
    gpus: GpuEnv, rules: client.ResourceV1alpha3Api
) -> None:
    name = f"drain-{gpus.nodes[0]}"
    rules.create_device_taint_rule(_rule(name, {"pool": gpus.nodes[0]}, "NoSchedule"))
    gpus.claim("waiting", count=1)
    gpus.pod("waiting", "waiting")
    gpus.wait_unscheduled("waiting")

    rules.delete_device_taint_rule(name)

    assert gpus.wait_running("waiting").spec.node_name == gpus.nodes[0]


def test_a_rule_by_device_class_and_cel_taints_only_the_devices_it_selects(
    sim: SimCluster, two_nodes: GpuEnv, rules: client.ResourceV1alpha3Api
) -> None:
    product = two_nodes.products[0]
    expression = f"device.attributes['gpu.nvidia.com'].productName == '{product}'"
    selector = {
        "deviceClassName": two_nodes.device_class,
        "selectors": [{"cel": {"expression": expression}}],
    }
    status, created = _raw(
        sim, "POST", RULES_PATH, _rule(f"by-cel-{uuid.uuid4().hex[:8]}", selector, "NoSchedule")
    )
    two_nodes.claim("pair", count=2)
    two_nodes.pod("pair", "pair")

    pod = two_nodes.wait_running("pair")

    assert status == 201
    assert created["spec"]["deviceSelector"]["deviceClassName"] == two_nodes.device_class
    assert pod.spec.node_name == two_nodes.nodes[1]


# -- eviction ----------------------------------------------------------------------------------


def test_no_execute_evicts_the_pod_frees_its_claim_and_a_new_pod_gets_a_healthy_device(
    gpus: GpuEnv, rules: client.ResourceV1alpha3Api
) -> None:
    gpus.claim("work", count=1)
    gpus.pod("worker", "work")
    gpus.wait_running("worker")
    held = _results(gpus, "work")[0]["device"]
    version = gpus.core.list_namespaced_pod(gpus.namespace).metadata.resource_version
    rule = f"xid-{uuid.uuid4().hex[:8]}"

    selector = {"driver": "gpu.nvidia.com", "pool": gpus.nodes[0], "device": held}
    rules.create_device_taint_rule(_rule(rule, selector, "NoExecute"))
    seen = []
    for event in watch.Watch().stream(
        gpus.core.list_namespaced_pod,
        gpus.namespace,
        resource_version=version,
        timeout_seconds=10,
    ):
        seen.append((event["type"], event["object"]))
        if event["type"] == "DELETED":
            break
    claim = wait_until(
        lambda: gpus.read_claim("work"),
        lambda c: c.status is None or c.status.allocation is None,
        "claim deallocated",
    )

    kinds = [kind for kind, _pod in seen]
    assert kinds[-1] == "DELETED"
    disruption = [c for c in seen[-1][1].status.conditions or [] if c.type == "DisruptionTarget"]
    assert [(c.status, c.reason, c.message) for c in disruption] == [
        (
            "True",
            "DeletionByDeviceTaintManager",
            "Device Taint manager: deleting due to NoExecute taint",
        )
    ]
    marked = _events(gpus, "worker", "DeviceTaintManagerEviction")
    assert [(e.type, e.message, e.source.component) for e in marked] == [
        ("Normal", "Marking for deletion", "device-taint-eviction-controller")
    ]
    assert not claim.metadata.finalizers
    # The claim is allocated afresh for the next pod: never on the tainted device.
    gpus.pod("worker-2", "work")
    gpus.wait_running("worker-2")
    assert [r["device"] for r in _results(gpus, "work")] == [
        "gpu-1" if held == "gpu-0" else "gpu-0"
    ]


def test_toleration_seconds_delay_the_eviction(
    sim: SimCluster, gpus: GpuEnv, rules: client.ResourceV1alpha3Api
) -> None:
    toleration = {
        "key": TAINT_KEY,
        "operator": "Exists",
        "effect": "NoExecute",
        # timeAdded has second precision, so the eviction comes 5-6 s after the rule: time
        # enough to see the pod still there on a busy machine, within _wait's deadline.
        "tolerationSeconds": 6,
    }
    gpus.claim("patient", count=2, tolerations=[toleration])
    gpus.pod("patient", "patient")
    gpus.wait_running("patient")

    rules.create_device_taint_rule(
        _rule(f"late-{uuid.uuid4().hex[:8]}", {"pool": gpus.nodes[0]}, "NoExecute")
    )
    assert sim.scheduler is not None
    sim.scheduler.run_once()

    assert not _pod_gone(gpus, "patient")
    wait_until(lambda: _pod_gone(gpus, "patient"), bool, "pod evicted after tolerationSeconds")


def test_removing_the_taint_before_its_time_cancels_the_eviction(
    sim: SimCluster, gpus: GpuEnv, rules: client.ResourceV1alpha3Api
) -> None:
    toleration = {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
    gpus.claim("spared", count=1, tolerations=[toleration])
    gpus.pod("spared", "spared")
    gpus.wait_running("spared")
    name = f"brief-{uuid.uuid4().hex[:8]}"
    assert sim.scheduler is not None

    rules.create_device_taint_rule(_rule(name, {"pool": gpus.nodes[0]}, "NoExecute"))
    sim.scheduler.run_once()
    rules.delete_device_taint_rule(name)
    sim.scheduler.run_once()

    cancelled = _events(gpus, "spared", "DeviceTaintManagerEviction")
    assert [e.message for e in cancelled] == ["Cancelling deletion"]
    assert gpus.read_pod("spared").status.phase == "Running"


def test_a_no_execute_toleration_without_seconds_keeps_the_pod(
    sim: SimCluster, gpus: GpuEnv, rules: client.ResourceV1alpha3Api
) -> None:
    gpus.claim("steady", count=1, tolerations=[{"operator": "Exists", "effect": "NoExecute"}])
    gpus.pod("steady", "steady")
    gpus.wait_running("steady")

    rules.create_device_taint_rule(
        _rule(f"stay-{uuid.uuid4().hex[:8]}", {"pool": gpus.nodes[0]}, "NoExecute")
    )
    assert sim.scheduler is not None
    report = sim.scheduler.run_once()

    assert report.evicted == 0
    assert gpus.read_pod("steady").status.phase == "Running"


def test_a_toleration_without_effect_does_not_stop_the_eviction(
    gpus: GpuEnv, rules: client.ResourceV1alpha3Api
) -> None:
    """The 1.34 controller counts only tolerations whose effect is NoExecute: one for every
    effect lets the scheduler place the tainted device, and the pod is evicted all the same."""
    rules.create_device_taint_rule(
        _rule(f"any-{uuid.uuid4().hex[:8]}", {"pool": gpus.nodes[0]}, "NoExecute")
    )
    gpus.claim("broad", count=1, tolerations=[{"operator": "Exists"}])
    gpus.pod("broad", "broad")

    wait_until(lambda: _events(gpus, "broad", "Scheduled"), bool, "pod scheduled")
    wait_until(lambda: _pod_gone(gpus, "broad"), bool, "pod evicted")


def test_a_tainted_device_is_not_given_to_anyone_while_the_rule_stands(
    gpus: GpuEnv, rules: client.ResourceV1alpha3Api
) -> None:
    name = f"hold-{uuid.uuid4().hex[:8]}"
    gpus.claim("first", count=2)
    gpus.pod("first", "first")
    gpus.wait_running("first")

    rules.create_device_taint_rule(_rule(name, {"pool": gpus.nodes[0]}, "NoExecute"))
    wait_until(lambda: _pod_gone(gpus, "first"), bool, "pod evicted")
    gpus.claim("second", count=1)
    gpus.pod("second", "second")
    gpus.wait_unscheduled("second")
    rules.delete_device_taint_rule(name)

    gpus.wait_running("second")


def test_the_taint_device_hook_evicts_and_untaint_makes_the_device_allocatable(
    sim: SimCluster, gpus: GpuEnv
) -> None:
    gpus.claim("pair", count=2)
    gpus.pod("pair", "pair")
    gpus.wait_running("pair")

    rule = sim.taint_device("gpu.nvidia.com", gpus.nodes[0], "gpu-1")
    wait_until(lambda: _pod_gone(gpus, "pair"), bool, "pod evicted")
    gpus.pod("pair-again", "pair")
    gpus.wait_unscheduled("pair-again")
    sim.untaint_device(rule)

    gpus.wait_running("pair-again")


def test_a_cluster_without_the_rules_gate_answers_404_and_still_schedules() -> None:
    with SimCluster(
        topology={"generate": {"nodes": 1, "gpus_per_node": 1}}, device_taint_rules=False
    ) as bare:
        status, body = _raw(bare, "GET", RULES_PATH)
        assert bare.scheduler is not None
        report = bare.scheduler.run_once()

    assert (status, body["reason"]) == (404, "NotFound")
    assert report.errors == 0


# -- kubectl -----------------------------------------------------------------------------------


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_kubectl_applies_lists_and_deletes_a_rule(
    kubectl: Kubectl, tmp_path: Path, rules: client.ResourceV1alpha3Api
) -> None:
    name = f"kc-rule-{uuid.uuid4().hex[:6]}"
    manifest = tmp_path / "rule.yaml"
    manifest.write_text(
        yaml.safe_dump(_rule(name, {"driver": "gpu.example.com", "pool": "nowhere"}, "NoSchedule"))
    )

    created = kubectl("apply", "-f", str(manifest)).stdout
    listed = kubectl("get", "devicetaintrules").stdout
    shown = yaml.safe_load(kubectl("get", "devicetaintrule", name, "-o", "yaml").stdout)
    again = kubectl("apply", "-f", str(manifest)).stdout
    deleted = kubectl("delete", "-f", str(manifest)).stdout

    assert created.strip() == f"devicetaintrule.resource.k8s.io/{name} created"
    assert any(line.split()[0] == name for line in listed.splitlines()[1:])
    assert shown["spec"]["taint"]["timeAdded"]
    assert again.strip() == f"devicetaintrule.resource.k8s.io/{name} unchanged"
    assert deleted.strip() == f'devicetaintrule.resource.k8s.io "{name}" deleted'
    assert name not in {r.metadata.name for r in rules.list_device_taint_rule().items}

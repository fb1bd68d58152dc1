"""The three objects behind a unit: exact shapes, and valid for Kubernetes 1.34 and the CRD."""

import dataclasses
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

import dracel
from runtime import manifests

CRD = yaml.safe_load((Path(__file__).resolve().parents[2] / "k8s" / "gpuunit-crd.yaml").read_text())
OWNER_UID = "6f1c1e56-0000-4000-8000-000000000001"
CONTRACT = manifests.UnitContract(
    name="demo-instance",
    namespace="runtime-instance",
    tenant="default",
    operation_id="unit-demo-001",
    request_hash="ab" * 32,
    package_id="gpu-rtx3080-2x-cpu10-mem40g",
    spec_name="gpu.rtx3080.2x.10c.40g",
    image="python:3.12",
    cpu="10",
    memory="40Gi",
    gpu=2,
    device_class_name="nvidia-rtx-3080",
    claim_name="unit-demo-instance-gpu",
    claim_request_name="gpu",
    count=2,
)
LABELS = {
    "app.kubernetes.io/managed-by": "gpu-control-plane",
    "runtime.lokiwager.io/unit": "demo-instance",
    "runtime.lokiwager.io/tenant": "default",
}
OWNER = {
    "apiVersion": "runtime.lokiwager.io/v1alpha1",
    "kind": "GPUUnit",
    "name": "demo-instance",
    "uid": OWNER_UID,
    "controller": True,
    "blockOwnerDeletion": True,
}


def test_gpuunit_is_the_article_object_with_idempotency_annotations():
    assert manifests.build_gpuunit(CONTRACT) == {
        "apiVersion": "runtime.lokiwager.io/v1alpha1",
        "kind": "GPUUnit",
        "metadata": {
            "name": "demo-instance",
            "namespace": "runtime-instance",
            "labels": LABELS,
            "annotations": {
                "runtime.lokiwager.io/operation-id": "unit-demo-001",
                "runtime.lokiwager.io/request-hash": "ab" * 32,
            },
        },
        "spec": {
            "packageID": "gpu-rtx3080-2x-cpu10-mem40g",
            "specName": "gpu.rtx3080.2x.10c.40g",
            "image": "python:3.12",
            "cpu": "10",
            "memory": "40Gi",
            "gpu": 2,
            "allocation": {
                "deviceClassName": "nvidia-rtx-3080",
                "claimName": "unit-demo-instance-gpu",
                "claimRequestName": "gpu",
                "count": 2,
            },
            "runPolicy": "Running",
        },
    }


def test_claim_is_owned_by_the_unit_and_asks_exactly_count_devices_of_the_class():
    claim = manifests.build_resource_claim(CONTRACT, owner_uid=OWNER_UID)
    assert claim["metadata"] == {
        "name": "unit-demo-instance-gpu",
        "namespace": "runtime-instance",
        "labels": LABELS,
        "ownerReferences": [OWNER],
    }
    assert claim["spec"] == {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "nvidia-rtx-3080",
                        "allocationMode": "ExactCount",
                        "count": 2,
                    },
                }
            ]
        }
    }


def test_claim_carries_package_selectors_and_capacity():
    contract = manifests.UnitContract(
        **{
            **CONTRACT.__dict__,
            "selectors": ['device.driver == "gpu.nvidia.com"'],
            "capacity": {"memory": "8Gi"},
        }
    )
    exactly = manifests.build_resource_claim(contract, owner_uid=OWNER_UID)["spec"]["devices"][
        "requests"
    ][0]["exactly"]
    assert exactly["selectors"] == [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]
    assert exactly["capacity"] == {"requests": {"memory": "8Gi"}}


def test_pod_references_the_claim_never_nvidia_gpu_and_is_restricted():
    pod = manifests.build_pod(CONTRACT, owner_uid=OWNER_UID)
    assert pod["metadata"]["name"] == "unit-demo-instance"
    assert pod["metadata"]["ownerReferences"] == [OWNER]
    spec = pod["spec"]
    assert spec["resourceClaims"] == [
        {"name": "gpu", "resourceClaimName": "unit-demo-instance-gpu"}
    ]
    assert "nodeName" not in spec
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert container["name"] == "runtime-worker"
    assert container["resources"] == {
        "requests": {"cpu": "10", "memory": "40Gi"},
        "limits": {"cpu": "10", "memory": "40Gi"},
        "claims": [{"name": "gpu", "request": "gpu"}],
    }
    assert "nvidia.com/gpu" not in str(pod)
    assert container["env"][:3] == [
        {"name": "SPEC_NAME", "value": "gpu.rtx3080.2x.10c.40g"},
        {"name": "UNIT_NAME", "value": "demo-instance"},
        {"name": "GPU_COUNT", "value": "2"},
    ]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["runAsNonRoot"] is True
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}


def test_pod_template_command_args_and_env():
    contract = manifests.UnitContract(
        **{
            **CONTRACT.__dict__,
            "command": ["python"],
            "args": ["-m", "http.server"],
            "env": [{"name": "MODE", "value": "serve"}],
        }
    )
    container = manifests.build_pod(contract, owner_uid=OWNER_UID)["spec"]["containers"][0]
    assert container["command"] == ["python"]
    assert container["args"] == ["-m", "http.server"]
    assert container["env"][-1] == {"name": "MODE", "value": "serve"}


@pytest.mark.parametrize(
    "build",
    [
        lambda: manifests.build_resource_claim(CONTRACT, owner_uid=OWNER_UID),
        lambda: manifests.build_pod(CONTRACT, owner_uid=OWNER_UID),
        lambda: manifests.build_namespace("runtime-instance", tenant="default"),
        lambda: manifests.build_resource_quota(
            "runtime-instance", tenant="default", cpu="160", memory="256Gi", claims=64
        ),
    ],
    ids=["claim", "pod", "namespace", "quota"],
)
def test_built_in_objects_validate_against_kubernetes_1_34_strict(build):
    kubernetes_validate.validate(build(), "1.34.0", strict=True)


def test_gpuunit_validates_against_the_crd_schema():
    schema = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.validate(manifests.build_gpuunit(CONTRACT), schema)
    broken = manifests.build_gpuunit(CONTRACT)
    broken["spec"]["gpu"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_names_fit_kubernetes_limits_at_the_longest_unit_name():
    longest = "n" * 54
    assert len(manifests.claim_name_for(longest)) == 63
    assert len(manifests.pod_name_for(longest)) <= 63


def _undescribed(schema: dict, path: str) -> list[str]:
    missing = [] if schema.get("description") else [path]
    for name, sub in (schema.get("properties") or {}).items():
        missing += _undescribed(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict) and schema["items"].get("properties"):
        missing += [p for p in _undescribed(schema["items"], f"{path}[]") if p != f"{path}[]"]
    return missing


def test_every_gpuunit_field_is_described_for_kubectl_explain():
    """Every field but `metadata`, which an API server takes as `{type: object}` alone (it
    refuses a CRD that describes it) and explains as ObjectMeta."""
    schema = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert _undescribed(schema, "gpuunit") == ["gpuunit.metadata"]


def test_the_pod_carries_the_hash_of_what_it_was_built_from():
    base = CONTRACT
    pod = manifests.build_pod(base, owner_uid="u")
    same = manifests.build_pod(dataclasses.replace(CONTRACT), owner_uid="u")
    assert manifests.template_hash(pod) == manifests.template_hash(same) != ""
    changed = [
        dataclasses.replace(base, image="python:3.13"),
        dataclasses.replace(base, env=[{"name": "A", "value": "b"}]),
        dataclasses.replace(base, restarted_at="2026-12-01T10:00:00Z"),
        dataclasses.replace(base, termination_grace_seconds=600),
    ]
    hashes = {manifests.template_hash(manifests.build_pod(c, owner_uid="u")) for c in changed}
    assert len(hashes) == 4
    assert manifests.template_hash(pod) not in hashes
    # What does not reach the pod leaves its hash alone (no replacement for it).
    quiet = dataclasses.replace(base, stop_after="8h", run_policy="Stopped")
    assert manifests.template_hash(manifests.build_pod(quiet, owner_uid="u")) == (
        manifests.template_hash(pod)
    )
    restarted = manifests.build_pod(changed[2], owner_uid="u")
    assert restarted["metadata"]["annotations"][manifests.ANNOTATION_RESTARTED_AT] == (
        "2026-12-01T10:00:00Z"
    )


def test_the_pod_gets_its_package_s_termination_grace_when_it_is_not_kubernetes_default():
    for seconds in (0, 600, 3600):
        pod = manifests.build_pod(
            dataclasses.replace(CONTRACT, termination_grace_seconds=seconds), owner_uid="u"
        )
        assert pod["spec"]["terminationGracePeriodSeconds"] == seconds
        kubernetes_validate.validate(pod, "1.34.0", strict=True)
    # 30 is what the API server gives a pod that names none: left out, so the pods of units
    # ordered before packages had a grace are built as before and keep their template hash
    # (a different one would replace them at their next roll-out).
    default = manifests.build_pod(CONTRACT, owner_uid="u")
    assert CONTRACT.termination_grace_seconds == 30
    assert "terminationGracePeriodSeconds" not in default["spec"]


PACKAGE_KINDS = {
    "whole": CONTRACT,
    "shared": dataclasses.replace(
        CONTRACT,
        device_class_name="hami-core-gpu.project-hami.io",
        count=1,
        gpu=1,
        capacity={"cores": "25", "memory": "20Gi"},
    ),
    "mig": dataclasses.replace(
        CONTRACT,
        device_class_name="mig.nvidia.com",
        count=1,
        gpu=1,
        selectors=['device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'],
    ),
    "handed-over": dataclasses.replace(
        CONTRACT,
        handover=manifests.Handover(
            value="0b1e4c3a-0000-4000-8000-000000000002",
            selector=manifests.handover_selector([("gpu.nvidia.com", "GPU-a")]),
        ),
    ),
    "fallback": dataclasses.replace(
        CONTRACT,
        alternatives=[
            {"name": "l40s", "deviceClassName": "nvidia-l40s", "count": 2},
            {
                "name": "shared",
                "deviceClassName": "hami-core-gpu.project-hami.io",
                "count": 1,
                "capacity": {"cores": "50"},
            },
        ],
    ),
}


@pytest.mark.parametrize("kind", list(PACKAGE_KINDS))
def test_the_claim_of_every_package_kind_is_valid_for_1_34_strict(kind):
    contract = PACKAGE_KINDS[kind]
    claim = manifests.build_resource_claim(contract, owner_uid=OWNER_UID)
    kubernetes_validate.validate(claim, "1.34.0", strict=True)
    pod = manifests.build_pod(contract, owner_uid=OWNER_UID)
    kubernetes_validate.validate(pod, "1.34.0", strict=True)
    # The GPUUnit carries what was asked, alternatives included, within its CRD's schema.
    gpuunit = manifests.build_gpuunit(contract)
    jsonschema.validate(gpuunit, CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def test_dropped_fields_names_what_the_server_left_out_not_what_it_added():
    sent = {
        "devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "c", "capacity": {"cores": "25"}}}
            ],
            "constraints": [{"requests": ["gpu"], "matchAttribute": "a/b"}],
        }
    }
    kept = {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    # Defaults the server added are no concern.
                    "exactly": {"deviceClassName": "c", "allocationMode": "ExactCount"},
                }
            ],
        }
    }
    assert manifests.dropped_fields(sent, kept) == [
        "devices.requests[0].exactly.capacity",
        "devices.constraints",
    ]
    assert manifests.dropped_fields(sent, sent) == []
    assert manifests.dropped_fields({"a": [1, 2]}, {"a": [1]}) == ["a[1]"]
    # Zero values a Go server omits (omitempty) are not dropped features.
    assert manifests.dropped_fields({"a": [], "b": "", "c": 0, "d": {}}, {}) == []


HANDOVER = manifests.Handover(
    value="0b1e4c3a-0000-4000-8000-000000000002",
    selector=manifests.handover_selector(
        [("gpu.nvidia.com", "GPU-b"), ("gpu.nvidia.com", "GPU-a"), ("gpu.example.com", "gpu-9")]
    ),
)


def _slice_device(uuid: str) -> dict:
    return {"name": "gpu-0", "attributes": {"uuid": {"string": uuid}}}


def test_a_handover_selector_matches_exactly_the_named_devices_of_each_driver():
    selector = dracel.compile_selector(HANDOVER.selector)
    assert dracel.type_check(HANDOVER.selector) is None
    for driver, uuid, expected in [
        ("gpu.nvidia.com", "GPU-a", True),
        ("gpu.nvidia.com", "GPU-b", True),
        ("gpu.nvidia.com", "GPU-c", False),
        ("gpu.example.com", "gpu-9", True),
        ("gpu.example.com", "GPU-a", False),  # another driver's uuid of that text
    ]:
        env = dracel.device_env(driver, _slice_device(uuid))
        assert dracel.evaluate(selector, env) is expected, (driver, uuid)
    # A device of a driver it does not name, without a uuid: false, not an error.
    other = dracel.device_env("hami.project-hami.io", {"name": "x", "attributes": {}})
    assert dracel.evaluate(selector, other) is False


def test_a_handed_over_claim_tolerates_only_its_taint_and_selects_the_devices():
    contract = dataclasses.replace(CONTRACT, selectors=['device.driver == "gpu.nvidia.com"'])
    contract = dataclasses.replace(contract, handover=HANDOVER)
    claim = manifests.build_resource_claim(contract, owner_uid=OWNER_UID)
    assert claim["metadata"]["annotations"] == {"runtime.lokiwager.io/handover": HANDOVER.value}
    assert manifests.claim_handover(claim) == HANDOVER.value
    assert manifests.claim_handover(manifests.build_resource_claim(CONTRACT, owner_uid="x")) == ""
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["selectors"] == [
        {"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}},
        {"cel": {"expression": HANDOVER.selector}},
    ]
    assert exactly["tolerations"] == [
        {
            "key": "runtime.lokiwager.io/handover",
            "operator": "Equal",
            "value": HANDOVER.value,
            "effect": "NoSchedule",
        }
    ]
    # Every alternative of a fallback package asks for the same devices.
    fallback = dataclasses.replace(PACKAGE_KINDS["fallback"], handover=HANDOVER)
    subrequests = manifests.build_resource_claim(fallback, owner_uid=OWNER_UID)["spec"]["devices"][
        "requests"
    ][0]["firstAvailable"]
    assert all(sub["tolerations"] == exactly["tolerations"] for sub in subrequests)
    assert all(
        sub["selectors"][-1] == {"cel": {"expression": HANDOVER.selector}} for sub in subrequests
    )


@pytest.mark.parametrize(("version", "api_version"), [("1.34.0", "resource.k8s.io/v1alpha3")])
def test_a_handover_rule_is_a_valid_device_taint_rule(version, api_version):
    rule = manifests.build_handover_rule(
        name=manifests.handover_rule_name(HANDOVER.value, "gpu.nvidia.com", "node-a", "gpu-0"),
        handover=HANDOVER,
        driver="gpu.nvidia.com",
        pool="node-a",
        device="gpu-0",
        tenant="default",
    )
    kubernetes_validate.validate({**rule, "apiVersion": api_version}, version, strict=True)
    assert rule["spec"]["taint"] == {
        "key": "runtime.lokiwager.io/handover",
        "value": HANDOVER.value,
        "effect": "NoSchedule",
    }
    assert rule["metadata"]["labels"]["runtime.lokiwager.io/handover-for"] == HANDOVER.value
    # One name per device, the same on a retry.
    other = manifests.handover_rule_name(HANDOVER.value, "gpu.nvidia.com", "node-a", "gpu-1")
    assert rule["metadata"]["name"] != other
    assert rule["metadata"]["name"] == manifests.handover_rule_name(
        HANDOVER.value, "gpu.nvidia.com", "node-a", "gpu-0"
    )

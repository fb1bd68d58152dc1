"""ResourceClaimTemplates over HTTP: the kind is served (client and kubectl), and the
resourceclaim controller turns a pod's template reference into a claim owned by the pod, as
kube-controller-manager does."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from simcluster.claimtemplates import generate_name
from simcluster.cluster import SimCluster
from simcluster.tests.conftest import Kubectl, wait_until
from simcluster.tests.test_scheduler_api import GpuEnv, _make_env, _unique


@pytest.fixture
def gpus(sim: SimCluster, kube_api: client.ApiClient) -> Iterator[GpuEnv]:
    yield from _make_env(sim, kube_api, [2])


def _template(env: GpuEnv, name: str, **exactly: object) -> None:
    env.resource.create_namespaced_resource_claim_template(
        env.namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "metadata": {"labels": {"from": "template"}},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {"deviceClassName": env.device_class, **exactly},
                            }
                        ]
                    }
                },
            },
        },
    )


def _template_pod(env: GpuEnv, name: str, template: str) -> None:
    env.core.create_namespaced_pod(
        env.namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox:1.36",
                        "resources": {"claims": [{"name": "gpu"}]},
                    }
                ],
            },
        },
    )


def test_generated_name_is_cut_in_proportion_when_long() -> None:
    assert generate_name("pod0", "gpu") == "pod0-gpu-"
    long = generate_name("p" * 60, "c" * 30)
    assert long == "p" * 37 + "-" + "c" * 18
    assert len(long) + 5 <= 63


def test_template_is_served_with_defaults_and_an_immutable_spec(gpus: GpuEnv) -> None:
    _template(gpus, "one-gpu")
    stored = gpus.resource.read_namespaced_resource_claim_template("one-gpu", gpus.namespace)
    exact = stored.spec.spec.devices.requests[0].exactly
    assert (exact.allocation_mode, exact.count) == ("ExactCount", 1)
    with pytest.raises(ApiException) as raised:
        gpus.resource.patch_namespaced_resource_claim_template(
            "one-gpu",
            gpus.namespace,
            {"spec": {"metadata": {"labels": {"from": "edit"}}}},
        )
    assert raised.value.status == 422
    assert "field is immutable" in json.loads(raised.value.body)["message"]
    with pytest.raises(ApiException) as raised:
        gpus.resource.create_namespaced_resource_claim_template(
            gpus.namespace,
            {
                "metadata": {"name": "bad"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu"}]}}},
            },
        )
    assert raised.value.status == 422
    causes = json.loads(raised.value.body)["details"]["causes"]
    assert causes[0]["field"] == "spec.spec.devices.requests[0]"


def test_pod_gets_a_generated_claim_owned_by_it_and_runs(gpus: GpuEnv) -> None:
    _template(gpus, "one-gpu")
    _template_pod(gpus, "pod0", "one-gpu")
    pod = gpus.wait_running("pod0")
    statuses = pod.status.resource_claim_statuses
    assert [s.name for s in statuses] == ["gpu"]
    claim_name = statuses[0].resource_claim_name
    assert re.fullmatch(r"pod0-gpu-[a-z0-9]{5}", claim_name)
    claim = gpus.read_claim(claim_name)
    assert claim.metadata.annotations == {"resource.kubernetes.io/pod-claim-name": "gpu"}
    assert claim.metadata.labels == {"from": "template"}
    owner = claim.metadata.owner_references[0]
    assert (owner.api_version, owner.kind, owner.name, owner.uid) == (
        "v1",
        "Pod",
        "pod0",
        pod.metadata.uid,
    )
    assert owner.controller is True
    assert owner.block_owner_deletion is True
    assert [r.name for r in claim.status.reserved_for] == ["pod0"]
    assert claim.status.allocation.devices.results[0].pool == pod.spec.node_name


def test_generated_claim_goes_with_its_pod(gpus: GpuEnv) -> None:
    _template(gpus, "one-gpu")
    _template_pod(gpus, "pod0", "one-gpu")
    claim_name = gpus.wait_running("pod0").status.resource_claim_statuses[0].resource_claim_name
    gpus.core.delete_namespaced_pod("pod0", gpus.namespace)

    def gone() -> bool:
        try:
            gpus.read_claim(claim_name)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_until(gone, bool, f"claim {claim_name} deleted")


def test_missing_template_is_an_event_and_the_pod_waits(gpus: GpuEnv) -> None:
    _template_pod(gpus, "waiting", "later")
    events = wait_until(
        lambda: [
            e
            for e in gpus.core.list_namespaced_event(gpus.namespace).items
            if e.reason == "FailedResourceClaimCreation"
        ],
        bool,
        "FailedResourceClaimCreation event",
    )
    assert events[0].message == (
        'PodResourceClaim gpu: resource claim template "later": '
        'resourceclaimtemplates.resource.k8s.io "later" not found'
    )
    assert events[0].source.component == "resource_claim"
    condition = gpus.wait_unscheduled("waiting")
    assert condition.message == f'pod "{gpus.namespace}/waiting": ResourceClaim not created yet'
    _template(gpus, "later")
    gpus.wait_running("waiting")


def test_pod_whose_claim_status_is_written_later_is_retried_at_once(
    sim: SimCluster, gpus: GpuEnv
) -> None:
    """The claim exists (owned by the pod, so usable for it, but without the pod-claim-name
    annotation the controller adopts by) before the pod status names it: the pod runs at
    once after the status write, not at the 30 s resync."""
    assert sim.scheduler is not None
    assert sim.scheduler.retry_interval >= 30
    _template_pod(gpus, "late", "absent")
    pod = gpus.wait_unscheduled("late") and gpus.read_pod("late")
    gpus.resource.create_namespaced_resource_claim(
        gpus.namespace,
        {
            "metadata": {
                "name": "made-elsewhere",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": "late",
                        "uid": pod.metadata.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": gpus.device_class}}]
                }
            },
        },
    )
    time.sleep(0.5)  # passes have seen the claim; the pod still waits for its status
    assert gpus.read_pod("late").status.phase == "Pending"
    gpus.core.patch_namespaced_pod_status(
        "late",
        gpus.namespace,
        {
            "status": {
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "made-elsewhere"}]
            }
        },
    )
    # Retried at once: wait_running gives up after 10 s, the periodic retry (asserted above)
    # comes after 30 s.
    gpus.wait_running("late")


def test_claim_not_owned_by_the_pod_is_not_used_for_its_template_entry(gpus: GpuEnv) -> None:
    _template_pod(gpus, "picky", "absent")
    gpus.wait_unscheduled("picky")
    gpus.claim("someone-elses")
    gpus.core.patch_namespaced_pod_status(
        "picky",
        gpus.namespace,
        {
            "status": {
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "someone-elses"}]
            }
        },
    )
    expected = (
        f"ResourceClaim someone-elses was not created for pod {gpus.namespace}/picky "
        "(pod is not owner)"
    )
    condition = wait_until(
        lambda: next(
            c for c in gpus.read_pod("picky").status.conditions if c.type == "PodScheduled"
        ),
        lambda c: c.message == expected,
        "not-owner condition",
    )
    assert condition.reason == "Unschedulable"


def test_kubectl_applies_and_lists_a_template(
    gpus: GpuEnv, kubectl: Kubectl, tmp_path: Path
) -> None:
    name = _unique("tpl")
    manifest = tmp_path / "template.yaml"
    manifest.write_text(
        "apiVersion: resource.k8s.io/v1\n"
        "kind: ResourceClaimTemplate\n"
        f"metadata: {{name: {name}, namespace: {gpus.namespace}}}\n"
        "spec:\n"
        "  spec:\n"
        "    devices:\n"
        "      requests:\n"
        "      - name: gpu\n"
        f"        exactly: {{deviceClassName: {gpus.device_class}}}\n"
    )
    applied = kubectl("apply", "-f", str(manifest))
    assert f"resourceclaimtemplate.resource.k8s.io/{name} created" in applied.stdout
    listed = kubectl("get", "resourceclaimtemplates", "-n", gpus.namespace)
    assert listed.stdout.split()[:3] == ["NAME", "AGE", name]


def _admin_template(namespace: str, device_class: str) -> dict:
    """dra-example-driver demo/examples/admin-access: a template asking for all devices of
    the class with admin access."""
    return {
        "metadata": {"name": "multiple-gpus-admin", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "admin-gpu",
                            "exactly": {
                                "deviceClassName": device_class,
                                "allocationMode": "All",
                                "adminAccess": True,
                            },
                        }
                    ]
                }
            }
        },
    }


def test_admin_access_is_refused_outside_a_labelled_namespace(gpus: GpuEnv) -> None:
    with pytest.raises(ApiException) as raised:
        gpus.resource.create_namespaced_resource_claim_template(
            gpus.namespace, _admin_template(gpus.namespace, gpus.device_class)
        )
    assert raised.value.status == 422
    body = json.loads(raised.value.body)
    assert body["message"] == (
        'ResourceClaimTemplate.resource.k8s.io "multiple-gpus-admin" is invalid: '
        "spec.spec.devices.requests[0].exactly.adminAccess: Forbidden: admin access to devices "
        "requires the `resource.kubernetes.io/admin-access: true` label on the containing "
        "namespace"
    )
    with pytest.raises(ApiException) as raised:
        gpus.claim("admin", adminAccess=True)
    assert raised.value.status == 422


def test_admin_access_demo_runs_in_a_labelled_namespace(gpus: GpuEnv) -> None:
    """The demo's namespace carries the label: the pod runs with every device of the node,
    which stay free for others."""
    admin = _unique("admin-access")
    gpus.core.create_namespace(
        {"metadata": {"name": admin, "labels": {"resource.kubernetes.io/admin-access": "true"}}}
    )
    try:
        gpus.resource.create_namespaced_resource_claim_template(
            admin, _admin_template(admin, gpus.device_class)
        )
        gpus.core.create_namespaced_pod(
            admin,
            {
                "metadata": {"name": "pod0"},
                "spec": {
                    "resourceClaims": [
                        {"name": "admin-gpus", "resourceClaimTemplateName": "multiple-gpus-admin"}
                    ],
                    "containers": [
                        {
                            "name": "ctr0",
                            "image": "ubuntu:22.04",
                            "resources": {"claims": [{"name": "admin-gpus"}]},
                        }
                    ],
                },
            },
        )
        pod = wait_until(
            lambda: gpus.core.read_namespaced_pod("pod0", admin),
            lambda p: p.status.phase == "Running",
            "admin pod Running",
        )
        claim = gpus.resource.read_namespaced_resource_claim(
            pod.status.resource_claim_statuses[0].resource_claim_name, admin
        )
        results = claim.status.allocation.devices.results
        assert sorted(r.device for r in results) == ["gpu-0", "gpu-1"]
        assert all(r.admin_access for r in results)
        gpus.claim("after", count=2)
        gpus.pod("after", "after")
        gpus.wait_running("after")
    finally:
        gpus.core.delete_namespace(admin)

"""k8s/control-plane's RBAC and admission policies, enforced by a real API server (issue 41,
item 6): they are applied to a development cluster, and each of the control plane's accounts
writes with its own ServiceAccount token. Writes outside a tenant namespace, a reserved
namespace, and a NoExecute DeviceTaintRule are refused by the server; the control plane's
own writes in a tenant namespace go through. The `kubectl auth can-i` table of
docs/operations.md is this test's."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack.cluster import DevCluster
from runtime.tests.helpers import wait_until
from tests.test_manifests import K8S, needs_kubectl

pytestmark = [needs_kubectl, pytest.mark.kubectl]

ROOT = K8S.parent
APPLIED = [
    K8S / "control-plane" / "namespace.yaml",
    K8S / "control-plane" / "serviceaccount.yaml",
    K8S / "control-plane" / "rbac.yaml",
    K8S / "control-plane" / "admission-policy.yaml",
    K8S / "gpuunit-crd.yaml",
    K8S / "tenant-namespace.yaml",
]
TENANT = "runtime-instance"  # k8s/tenant-namespace.yaml
WORKER = "gpu-control-plane"
WEB = "gpu-control-plane-unprivileged"
# (verb, resource, namespace): what the operations guide's table asks of each account.
QUESTIONS = [
    ("create", "pods", TENANT),
    ("delete", "pods", "kube-system"),
    ("create", "resourceclaims.resource.k8s.io", TENANT),
    ("patch", "gpuunits.runtime.lokiwager.io", TENANT),
    ("create", "secrets", TENANT),
    ("get", "secrets", TENANT),
    ("get", "pods --subresource=log", TENANT),
    ("create", "pods --subresource=exec", TENANT),
    ("create", "devicetaintrules.resource.k8s.io", ""),
    ("list", "resourceslices.resource.k8s.io", ""),
    ("create", "namespaces", ""),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", ""),
]
Kubectl = Callable[..., subprocess.CompletedProcess]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[DevCluster]:
    folder = tmp_path_factory.mktemp("enforced")
    with DevCluster(folder / "cluster") as dev:
        yield dev


def _kubectl(kubeconfig: Path, home: Path) -> Kubectl:
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(home / "c"), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            input=stdin,
            check=False,
        )

    return run


@pytest.fixture(scope="module")
def admin(cluster: DevCluster, tmp_path_factory) -> Kubectl:
    home = tmp_path_factory.mktemp("admin")
    run = _kubectl(cluster.write_kubeconfig(home / "kubeconfig", direct=True), home)
    for path in APPLIED:
        applied = run("apply", "-f", str(path))
        assert applied.returncode == 0, f"{path.name}: {applied.stderr}"
    return run


def _as(cluster: DevCluster, account: str, home: Path) -> Kubectl:
    """kubectl with `account`'s own token (a TokenRequest), no client certificate."""
    kubeconfig = cluster.write_account_kubeconfig(
        home / "kubeconfig", "gpu-control-plane", account, seconds=3600
    )
    return _kubectl(kubeconfig, home)


@pytest.fixture(scope="module")
def worker(cluster, admin, tmp_path_factory) -> Kubectl:
    run = _as(cluster, WORKER, tmp_path_factory.mktemp("worker"))
    _in_force(run, admin)
    return run


@pytest.fixture(scope="module")
def web(cluster, admin, worker, tmp_path_factory) -> Kubectl:
    return _as(cluster, WEB, tmp_path_factory.mktemp("web"))


def _object(kind: str, name: str, namespace: str, **spec) -> str:
    body: dict = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}
    if namespace:
        body["metadata"]["namespace"] = namespace
    body.update(spec)
    return json.dumps(body)


def _create(run: Kubectl, manifest: str) -> subprocess.CompletedProcess:
    return run("create", "-f", "-", stdin=manifest)


def _refused(run: Kubectl, admin: Kubectl, manifest: str) -> subprocess.CompletedProcess:
    """Create `manifest` until an admission policy refuses it (the API server loads policies,
    and role bindings, a moment after they are written), removing what got through."""

    def refused() -> subprocess.CompletedProcess | None:
        answer = _create(run, manifest)
        if answer.returncode == 0:
            admin("delete", "-f", "-", stdin=manifest)
            return None
        return answer if "ValidatingAdmissionPolicy" in answer.stderr else None

    return wait_until(refused, "an admission policy to refuse it")


def _in_force(worker: Kubectl, admin: Kubectl) -> None:
    """Wait until the API server enforces the policies: a probe written where the worker may
    not write is refused."""
    _refused(worker, admin, _object("ConfigMap", "probe", "kube-public", data={"a": "b"}))


def test_the_worker_writes_in_a_tenant_namespace_and_nowhere_else(worker, admin):
    allowed = worker("create", "-f", "-", stdin=_object("ConfigMap", "ok", TENANT, data={"a": "b"}))
    assert allowed.returncode == 0, allowed.stderr
    refused = _create(worker, _object("ConfigMap", "sneaky", "kube-system", data={"a": "b"}))
    assert refused.returncode != 0
    assert "writes only in tenant namespaces, not in kube-system" in refused.stderr
    pod = _object(
        "Pod",
        "sneaky",
        "default",
        spec={"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    )
    refused = worker("create", "-f", "-", stdin=pod)
    assert "not in default" in refused.stderr
    # Deleting is a write too: kube-system's own objects are out of reach.
    assert admin("create", "configmap", "theirs", "-n", "kube-system").returncode == 0
    gone = worker("delete", "configmap", "theirs", "-n", "kube-system")
    assert "not in kube-system" in gone.stderr


def test_web_writes_secrets_only_in_tenant_namespaces_and_never_reads_them(web):
    secret = _object("Secret", "s", TENANT, stringData={"k": "v"})
    assert web("create", "-f", "-", stdin=secret).returncode == 0
    refused = _create(web, _object("Secret", "s", "kube-system", stringData={"k": "v"}))
    assert "not in kube-system" in refused.stderr
    read = web("get", "secret", "s", "-n", TENANT)
    assert "forbidden" in read.stderr.lower()


def test_the_control_plane_makes_no_reserved_namespace_and_only_noschedule_device_taints(
    worker, admin
):
    # The opt-in tenant-provisioning component's rights, granted here for the test.
    granted = admin(
        "create",
        "clusterrole",
        "provision-test",
        "--verb=create,patch",
        "--resource=namespaces",
    )
    assert granted.returncode == 0, granted.stderr
    bound = admin(
        "create",
        "clusterrolebinding",
        "provision-test",
        "--clusterrole=provision-test",
        f"--serviceaccount=gpu-control-plane:{WORKER}",
    )
    assert bound.returncode == 0, bound.stderr
    try:
        _namespaces_and_taints(worker, admin)
    finally:
        admin("delete", "clusterrolebinding", "provision-test")
        admin("delete", "clusterrole", "provision-test")


def _namespaces_and_taints(worker: Kubectl, admin: Kubectl) -> None:
    labelled = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "kube-mine", "labels": {"runtime.lokiwager.io/tenant": "x"}},
    }
    reserved = _refused(worker, admin, json.dumps(labelled))
    assert "namespace kube-mine is reserved" in reserved.stderr
    unlabelled = worker("create", "namespace", "plain")
    assert "a namespace the control plane writes is a tenant's" in unlabelled.stderr

    def rule(effect: str, labelled: bool) -> str:
        labels = {"app.kubernetes.io/managed-by": "gpu-control-plane"} if labelled else {}
        return json.dumps(
            {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": f"t-{effect.lower()}-{int(labelled)}", "labels": labels},
                "spec": {
                    "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "p", "device": "d"},
                    "taint": {"key": "runtime.lokiwager.io/handover", "effect": effect},
                },
            }
        )

    evicting = _refused(worker, admin, rule("NoExecute", labelled=True))
    assert "NoSchedule and labelled managed-by gpu-control-plane" in evicting.stderr
    assert "NoSchedule" in worker("create", "-f", "-", stdin=rule("NoSchedule", False)).stderr
    ours = worker("create", "-f", "-", stdin=rule("NoSchedule", True))
    assert ours.returncode == 0, ours.stderr
    assert admin("create", "-f", "-", stdin=rule("NoExecute", False)).returncode == 0
    theirs = worker("delete", "devicetaintrule", "t-noexecute-0")
    assert "deletes only its own device taints" in theirs.stderr


def _can_i(admin: Kubectl, account: str, verb: str, resource: str, namespace: str) -> str:
    args = [
        "auth",
        "can-i",
        verb,
        *resource.split(),
        f"--as=system:serviceaccount:gpu-control-plane:{account}",
    ]
    args += ["-n", namespace] if namespace else []
    return admin(*args).stdout.strip()


def test_the_operations_guide_shows_what_each_account_may_do(admin):
    """The table of docs/operations.md's RBAC section is what `kubectl auth can-i` answers here;
    the admission policies above narrow the namespaced rows to tenant namespaces."""
    lines = [
        "| verb | resource | namespace | worker, observer | web |",
        "| --- | --- | --- | --- | --- |",
    ]
    for verb, resource, namespace in QUESTIONS:
        answers = [_can_i(admin, account, verb, resource, namespace) for account in (WORKER, WEB)]
        shown = resource.replace(" --subresource=", "/")
        lines.append(f"| {verb} | {shown} | {namespace or '(cluster)'} | {' | '.join(answers)} |")
    table = "\n".join(lines)
    page = (ROOT / "docs" / "operations.md").read_text()
    assert table in page, f"docs/operations.md's can-i table is out of date; it is now:\n{table}"

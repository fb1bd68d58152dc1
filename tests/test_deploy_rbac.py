"""The RBAC in k8s/ is exactly what the code needs.

The product's real flows run against the simulated cluster — the health endpoint, a unit
ordered through the API and provisioned by a real Celery worker to Running, deleted to
Terminated, reconcile_units (run as beat would, while waiting for each phase), the inventory
sync, and the observer taking a unit to Running and Terminated on its own — while the
cluster's request log records every call. Each call, turned into
its RBAC attributes (verb, API group, resource/subresource, namespace or cluster-wide), must be
granted to the control plane's ServiceAccount by the (Cluster)Roles and bindings that
`kubectl kustomize` renders (k8s/ plus the opt-in tenant-provisioning component); and every
permission granted there must be used by some call."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from rest_framework.test import APIClient

from billing.models import Meter, UsageRecord
from catalog.tests.factories import PackageFactory
from controlplane import kube
from inventory import sync
from inventory.models import Cluster
from runtime.control import handover, preemption
from runtime.control import volumes as storage_claims
from runtime.control.observer import Observer
from runtime.models import GPUStorage, GPUUnit, Operation, OperationStatus, UnitPhase
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase
from tenancy import services as tenancy_services
from tenancy.models import AuditEvent
from tests.test_manifests import kustomize, kustomize_with_tenant_provisioning, needs_kubectl

# The flows commit their rows (a real worker reads them); the marker gets the test database set up.
pytestmark = [needs_kubectl, pytest.mark.django_db]

DEV_GATEWAY = Path(__file__).resolve().parent.parent / "k8s" / "components" / "dev-gateway"
RBAC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILSkOgILcqVAoeUWHkkxaz7JUr1aw5d3hCpJKnzFcYWi rbac"
SERVICE_ACCOUNT = ("gpu-control-plane", "gpu-control-plane")  # (namespace, name)
# Web's account: it calls the cluster only for /version, a unit pod's log and writing tenant
# secrets (POST/DELETE /secrets, in the request: a value never waits for a worker).
WEB_ACCOUNT = ("gpu-control-plane", "gpu-control-plane-unprivileged")
WEB_RESOURCES = {"pods/log", "secrets"}
WEB_GRANTS = {
    ("get", "pods/log"),
    ("create", "secrets"),
    ("patch", "secrets"),
    ("delete", "secrets"),
}
# Nothing of ours reads a Secret: the kubelet does, for pods.
SECRET_READS = {"get", "list", "watch"}
TENANT_NAMESPACE = "deploy-rbac-tenant"
# Paths every authenticated identity may GET by default (system:discovery and
# system:public-info-viewer), so they need no grant of ours.
PUBLIC_PATHS = {"/version", "/healthz", "/livez", "/readyz", "/api", "/apis"}
NEVER = {
    ("", "pods/exec"),
    ("", "pods/attach"),
    ("", "pods/portforward"),
    ("", "pods/proxy"),
    ("", "serviceaccounts/token"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "rolebindings"),
    ("rbac.authorization.k8s.io", "clusterroles"),
    ("rbac.authorization.k8s.io", "clusterrolebindings"),
}


@dataclass(frozen=True, order=True)
class Call:
    """A request's RBAC attributes; namespace None is a cluster-wide or cluster-scoped call."""

    verb: str
    group: str
    resource: str  # "pods" or "gpuunits/status"
    namespace: str | None
    name: str | None = None

    def __str__(self) -> str:
        where = f"in {self.namespace}" if self.namespace else "cluster-wide"
        group = self.group or "core"
        return f"{self.verb} {group}/{self.resource} {where}"


@dataclass(frozen=True)
class Grant:
    verb: str
    group: str
    resource: str
    namespace: str | None  # None: granted by a ClusterRoleBinding, so everywhere
    names: frozenset[str]  # resourceNames; empty means any name
    role: str

    def allows(self, call: Call) -> bool:
        return (
            (self.verb, self.group, self.resource) == (call.verb, call.group, call.resource)
            and (self.namespace is None or self.namespace == call.namespace)
            and (not self.names or call.name in self.names)
        )


def rbac_verb(verb: str, *, named: bool) -> str:
    """The RBAC verb of a request: GET one -> get, GET a collection -> list, POST -> create,
    PUT -> update, PATCH -> patch, DELETE one -> delete, DELETE a collection ->
    deletecollection. The simulator already logs RBAC verbs; HTTP methods are mapped too."""
    verb = {"post": "create", "put": "update"}.get(verb, verb)
    if not named and verb == "get":
        return "list"
    if not named and verb == "delete":
        return "deletecollection"
    return verb


def call_of(entry) -> Call | None:
    """The RBAC attributes of a request log entry; None for non-resource paths."""
    if entry.resource is None:
        return None
    parts = entry.path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    plural = entry.resource.split(".")[0]  # store key: plural, or <plural>.<group> for CRDs
    resource = f"{plural}/{entry.subresource}" if entry.subresource else plural
    return Call(
        verb=rbac_verb(entry.verb, named=entry.name is not None),
        group=group,
        resource=resource,
        namespace=entry.namespace,
        name=entry.name,
    )


def grants_for(objects: list[dict], account: tuple[str, str] = SERVICE_ACCOUNT) -> list[Grant]:
    """What the (Cluster)RoleBindings among `objects` grant to the ServiceAccount."""
    roles = {
        (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]): obj
        for obj in objects
        if obj["kind"] in ("ClusterRole", "Role")
    }
    grants = []
    for binding in objects:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        subjects = {
            (s.get("namespace"), s["name"])
            for s in binding.get("subjects", [])
            if s["kind"] == "ServiceAccount"
        }
        if account not in subjects:
            continue
        scope = (
            None if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        )
        ref = binding["roleRef"]
        role = roles[(ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role.get("rules", []):
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    for verb in rule["verbs"]:
                        grants.append(
                            Grant(
                                verb=verb,
                                group=group,
                                resource=resource,
                                namespace=scope,
                                names=frozenset(rule.get("resourceNames", [])),
                                role=ref["name"],
                            )
                        )
    return grants


@pytest.fixture(scope="module")
def rbac_objects(tmp_path_factory) -> list[dict]:
    """Everything RBAC-related that k8s/ can deploy, including the opt-in component."""
    return [
        obj
        for obj in kustomize_with_tenant_provisioning(tmp_path_factory.mktemp("overlay"))
        if obj["kind"] in ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
    ]


def _wait_for_operations(tenant, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while Operation.objects.filter(tenant=tenant).exclude(status=OperationStatus.SUCCEEDED):
        assert time.monotonic() < deadline, list(Operation.objects.values("kind", "status"))
        time.sleep(0.2)


@pytest.fixture(scope="module")
def recorded(cluster, celery_worker, django_db_blocker) -> dict[str, list]:
    """Run the product's flows and return the request log entries of each, by flow."""
    flows: dict[str, list] = {}
    cluster.apply_manifests(DEV_GATEWAY)  # a default StorageClass for the tenant's storage
    with django_db_blocker.unblock():
        tenant = tenancy_services.create_tenant(slug="deploy-rbac", namespace=TENANT_NAMESPACE)
        package = PackageFactory(id="deploy-rbac-rtx3080-1x", spec_name="rbac", gpu=1, count=1)
        client = APIClient()
        client.credentials(
            HTTP_AUTHORIZATION=f"Bearer {tenancy_services.create_api_key(tenant=tenant)[1]}"
        )
        # The tenant's namespace and quota exist but are not what the control plane wants,
        # so provisioning also takes its get-and-patch paths for both.
        kube.create(kube.NAMESPACE, None, {"metadata": {"name": TENANT_NAMESPACE}})
        kube.create(
            kube.RESOURCEQUOTA,
            TENANT_NAMESPACE,
            {"metadata": {"name": "gpu-units"}, "spec": {"hard": {"pods": "10"}}},
        )
        kube.create(
            kube.NETWORKPOLICY,
            TENANT_NAMESPACE,
            {
                "metadata": {"name": "gpu-units-isolation"},
                "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
            },
        )
        try:
            cluster.requests.clear()
            assert client.get("/api/v1/health").status_code == 200
            storage = {"name": "rbac-data", "size": "1Gi"}
            assert client.post("/api/v1/gpu-storages", storage, format="json").status_code == 201
            _wait(
                lambda: kube.get(kube.PERSISTENTVOLUMECLAIM, TENANT_NAMESPACE, "storage-rbac-data"),
                "the storage's claim",
            )
            # A tenant secret: created, sent again (patched in place), deleted at the end.
            secret = {"name": "rbac-hf", "data": {"token": "rbac-value"}}
            assert client.post("/api/v1/secrets", secret, format="json").status_code == 201
            assert client.post("/api/v1/secrets", secret, format="json").status_code == 200
            key = {"name": "rbac-key", "publicKey": RBAC_KEY}
            assert client.post("/api/v1/ssh-keys", key, format="json").status_code == 201
            body = {
                "operationID": "deploy-rbac-1",
                "name": "rbac-unit",
                "packageID": package.id,
                "image": "python:3.12",
                "template": {"ports": [{"name": "http", "port": 8080}]},
                "storageMounts": [{"name": "rbac-data", "mountPath": "/data"}],
                "ssh": {"enabled": True},
            }
            assert client.post("/api/v1/gpu-units", body, format="json").status_code == 201
            unit = wait_for_phase(GPUUnit.objects.get(tenant=tenant), "Running")
            assert client.get("/api/v1/gpu-units/rbac-unit/logs").status_code == 200
            # Removing the key rewrites the unit's authorized keys (get, then patch).
            assert client.delete("/api/v1/ssh-keys/rbac-key").status_code == 204
            _wait(
                lambda: (
                    kube.get(kube.CONFIGMAP, TENANT_NAMESPACE, "unit-rbac-unit-ssh")["data"]
                    == {"authorized_keys": ""}
                ),
                "the unit's keys to be rewritten",
            )
            # The key change is rolled out by an operation of its own: the ConfigMap is
            # rewritten before that operation is recorded done, and a stop meanwhile is 409.
            _wait_for_operations(tenant)
            # Stop, start, restart and update (spec patched, pod deleted and created again,
            # the unit's Service and route brought to its new ports).
            url = "/api/v1/gpu-units/rbac-unit"
            assert (
                client.post(f"{url}/stop", {"operationID": "rbac-stop"}, format="json").status_code
                == 202
            )
            unit = wait_for_phase(unit, "Stopped")
            assert (
                client.post(
                    f"{url}/start", {"operationID": "rbac-start"}, format="json"
                ).status_code
                == 202
            )
            unit = _wait_rolled_out(unit)
            assert (
                client.post(f"{url}/restart", {"operationID": "rbac-rs"}, format="json").status_code
                == 202
            )
            unit = _wait_rolled_out(unit)
            patch = {
                "operationID": "rbac-update",
                "template": {"ports": [{"name": "http", "port": 8081}]},
            }
            updated = client.patch(url, patch, format="json", HTTP_IF_MATCH=unit.etag)
            assert updated.status_code == 202, updated.json()
            unit = _wait_rolled_out(unit)
            # Devices handed over to the unit (a preemption's): tainted for it (a retry adopts
            # its own rules: create, then get), its claim made again by a restart, and the
            # taints removed once it holds them (list, delete).
            devices = {(d["driver"], d["pool"], d["device"]) for d in unit.dra["devices"]}
            handover.taint(unit, handover.begin(unit, devices, now=timezone.now()))
            assert (
                client.post(f"{url}/restart", {"operationID": "rbac-ho"}, format="json").status_code
                == 202
            )
            unit = _wait_rolled_out(unit)
            _wait(lambda: preemption.settle_handovers(now=timezone.now()), "the hand-over's end")
            assert client.delete("/api/v1/gpu-units/rbac-unit").status_code == 202
            wait_for_phase(unit, "Terminated")
            _wait_for_operations(tenant)
            # Beat's pass: one list of claims.
            assert storage_claims.sync_storages(settings.CLUSTER_NAME) >= 0
            assert client.delete("/api/v1/gpu-storages/rbac-data").status_code == 202
            _wait(
                lambda: not GPUStorage.objects.filter(tenant=tenant).exists(),
                "the storage's deletion",
            )
            assert client.delete("/api/v1/secrets/rbac-hf").status_code == 204
            flows["runtime"] = cluster.requests.entries()

            cluster.requests.clear()
            # Rolled back: the mirror it writes would leak into later tests.
            with transaction.atomic():
                run = sync.sync_inventory()
                assert run is not None
                assert not run.error, run.error
                transaction.set_rollback(True)
            flows["inventory"] = cluster.requests.entries()

            cluster.requests.clear()
            _observer_flow(client, tenant, package)
            flows["observer"] = cluster.requests.entries()
            yield flows
        finally:
            remove_namespace_objects(TENANT_NAMESPACE)
            Operation.objects.filter(tenant=tenant).delete()
            GPUUnit.objects.filter(tenant=tenant).delete()
            GPUStorage.objects.filter(tenant=tenant).delete()
            # The ledger keeps a tenant with usage (PROTECT): this one's goes with the test.
            Meter.objects.filter(tenant=tenant).delete()
            UsageRecord.objects.filter(tenant=tenant).delete()
            tenant.delete()
            package.delete()
            # The audit log refuses deletes (append-only: a trigger) and keeps a deleted
            # tenant's rows; what this module's writes recorded goes as a test flush's does,
            # by TRUNCATE, so later tests count only their own events.
            with connection.cursor() as cursor:
                cursor.execute(f"TRUNCATE {connection.ops.quote_name(AuditEvent._meta.db_table)}")


def _observer_flow(client, tenant, package) -> None:
    """An in-process observer takes a second unit to Running and Terminated (the worker
    provisions and tears down): its lists, watches and status patches are what moves it."""
    observer = Observer()
    thread = threading.Thread(target=observer.run, daemon=True)
    thread.start()
    try:
        _wait(observer.synced, "the observer to list the cluster")
        body = {
            "operationID": "deploy-rbac-2",
            "name": "rbac-watched",
            "packageID": package.id,
            "image": "python:3.12",
        }
        assert client.post("/api/v1/gpu-units", body, format="json").status_code == 201
        unit = GPUUnit.objects.filter(tenant=tenant, name="rbac-watched")
        _wait(lambda: unit.get().phase == UnitPhase.RUNNING, "Running by the observer")
        assert client.delete("/api/v1/gpu-units/rbac-watched").status_code == 202
        _wait(lambda: unit.get().phase == UnitPhase.TERMINATED, "Terminated by the observer")
        _wait_for_operations(tenant)
    finally:
        observer.stop()
        thread.join(10)
        # The observer committed the inventory mirror from its own connection: leave none of
        # it to later tests (the cluster registry beside it is configuration: it stays).
        for model in apps.get_app_config("inventory").get_models():
            if model is not Cluster:
                model.objects.all().delete()


def _wait(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _calls(entries: list) -> set[Call]:
    return {call for entry in entries if (call := call_of(entry)) is not None}


def _denied(calls: set[Call], grants: list[Grant]) -> list[str]:
    return sorted(str(c) for c in calls if not any(g.allows(c) for g in grants))


def _wait_rolled_out(unit: GPUUnit) -> GPUUnit:
    """Until the unit's worker recorded its rollout and the unit runs again."""

    def caught_up() -> bool:
        unit.refresh_from_db()
        return unit.observed_generation == unit.generation

    _wait(caught_up, "the rollout")
    return wait_for_phase(unit, "Running")


def test_every_call_of_provisioning_teardown_and_reconcile_is_granted(recorded, rbac_objects):
    calls = _calls(recorded["runtime"])
    # The flows really ran: the unit's objects were created, observed, patched and deleted.
    kinds = {(c.verb, c.resource) for c in calls}
    assert {
        ("create", "gpuunits"),
        ("create", "resourceclaims"),
        ("create", "pods"),
        ("list", "pods"),
        ("patch", "gpuunits/status"),
        ("delete", "gpuunits"),
        ("patch", "namespaces"),
        ("patch", "resourcequotas"),
        ("create", "services"),
        ("delete", "services"),
        ("create", "networkpolicies"),
        ("patch", "networkpolicies"),
        ("get", "pods/log"),
        ("create", "persistentvolumeclaims"),
        ("delete", "persistentvolumeclaims"),
        ("list", "persistentvolumeclaims"),
        ("create", "configmaps"),
        ("patch", "configmaps"),
        ("delete", "configmaps"),
        ("create", "secrets"),
        ("patch", "secrets"),
        ("delete", "secrets"),
    } <= kinds
    web = {c for c in calls if c.resource in WEB_RESOURCES}
    denied = _denied(calls - web, grants_for(rbac_objects)) + _denied(
        web, grants_for(rbac_objects, WEB_ACCOUNT)
    )
    assert not denied, "not granted by k8s/:\n" + "\n".join(denied)
    # Web's account may read logs, write secrets, and nothing the worker does.
    assert not [
        c for c in calls - web if any(g.allows(c) for g in grants_for(rbac_objects, WEB_ACCOUNT))
    ]


def test_inventory_sync_lists_are_granted_cluster_wide(recorded, rbac_objects):
    calls = _calls(recorded["inventory"])
    assert {(c.verb, c.resource, c.namespace) for c in calls} == {
        ("list", resource, None)
        for resource in (
            "nodes",
            "deviceclasses",
            "resourceslices",
            "devicetaintrules",
            "resourceclaims",
            "pods",
            "resourcequotas",
        )
    }
    denied = _denied(calls, grants_for(rbac_objects))
    assert not denied, "not granted by k8s/:\n" + "\n".join(denied)


def test_control_plane_calls_no_other_paths_than_public_ones(recorded):
    paths = {e.path for entries in recorded.values() for e in entries if e.resource is None}
    # Besides these, the discovery documents of one group version (/apis/<group>/<version>),
    # which system:discovery grants everyone ("/apis/*"), as DeviceTaintRule's lookup reads.
    discovery = {p for p in paths if re.fullmatch(r"/apis/[a-z0-9.-]+/v[0-9a-z]+", p)}
    assert paths - discovery <= PUBLIC_PATHS


def test_the_observer_lists_and_watches_cluster_wide_and_is_granted(recorded, rbac_objects):
    calls = _calls(recorded["observer"])
    watched = {(c.resource, c.namespace) for c in calls if c.verb == "watch"}
    assert watched == {
        (resource, None)
        for resource in (
            "gpuunits",
            "nodes",
            "deviceclasses",
            "resourceslices",
            "devicetaintrules",
            "resourceclaims",
            "pods",
            "resourcequotas",
        )
    }
    assert ("patch", "gpuunits/status") in {(c.verb, c.resource) for c in calls}
    denied = _denied(calls, grants_for(rbac_objects))
    assert not denied, "not granted by k8s/:\n" + "\n".join(denied)


def test_every_granted_permission_is_used_by_some_call(recorded, rbac_objects):
    calls = set().union(*(_calls(entries) for entries in recorded.values()))
    unused = sorted(
        f"{g.verb} {g.group or 'core'}/{g.resource} ({g.role})"
        for account in (SERVICE_ACCOUNT, WEB_ACCOUNT)
        for g in grants_for(rbac_objects, account)
        if not any(g.allows(c) for c in calls)
    )
    assert not unused, "granted but never used:\n" + "\n".join(unused)


def test_rbac_has_no_wildcards_secrets_exec_or_crd_writes(rbac_objects):
    grants = grants_for(rbac_objects)
    assert grants
    for role in (o for o in rbac_objects if o["kind"] in ("ClusterRole", "Role")):
        assert "aggregationRule" not in role
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (role["metadata"]["name"], rule)
    for grant in grants:
        assert (grant.group, grant.resource) not in NEVER, grant
        assert grant.verb not in ("escalate", "bind", "impersonate"), grant
    for binding in (o for o in rbac_objects if o["kind"].endswith("Binding")):
        subjects = [(s["kind"], s.get("namespace"), s["name"]) for s in binding["subjects"]]
        assert subjects in (
            [("ServiceAccount", *SERVICE_ACCOUNT)],
            [("ServiceAccount", *WEB_ACCOUNT)],
        )
    web_grants = grants_for(rbac_objects, WEB_ACCOUNT)
    assert {(g.verb, g.resource) for g in web_grants} == WEB_GRANTS
    assert not [g for g in web_grants if g.resource == "secrets" and g.verb in SECRET_READS]
    # The worker's account writes no Secret either: secrets are web's alone.
    assert not [g for g in grants if g.resource == "secrets"]


def test_namespace_rights_come_only_from_the_opt_in_component():
    default = grants_for(kustomize(Path(__file__).resolve().parent.parent / "k8s"))
    assert default
    assert not [g for g in default if g.resource == "namespaces"]


def test_the_checker_tells_cluster_wide_from_namespaced_grants():
    """The checks above can fail: a RoleBinding grants only in its namespace, and a grant
    never stretches to another verb, resource, subresource or name."""
    role = {
        "kind": "ClusterRole",
        "metadata": {"name": "r"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "get"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"], "resourceNames": ["a"]},
        ],
    }
    binding = {
        "kind": "RoleBinding",
        "metadata": {"name": "b", "namespace": "team"},
        "roleRef": {"kind": "ClusterRole", "name": "r"},
        "subjects": [
            {"kind": "ServiceAccount", "namespace": SERVICE_ACCOUNT[0], "name": SERVICE_ACCOUNT[1]}
        ],
    }
    grants = grants_for([role, binding])
    assert _denied({Call("list", "", "pods", "team")}, grants) == []
    assert _denied({Call("list", "", "pods", None)}, grants) == ["list core/pods cluster-wide"]
    assert _denied({Call("list", "", "pods", "other")}, grants) == ["list core/pods in other"]
    assert _denied({Call("delete", "", "pods", "team", "p")}, grants)
    assert _denied({Call("get", "", "pods/exec", "team", "p")}, grants)
    assert _denied({Call("get", "", "nodes", "team", "b")}, grants)
    cluster_binding = {**binding, "kind": "ClusterRoleBinding", "metadata": {"name": "b"}}
    cluster_wide = grants_for([role, cluster_binding])
    assert _denied({Call("list", "", "pods", None)}, cluster_wide) == []
    assert grants_for([role, binding], account=("elsewhere", "gpu-control-plane")) == []


@pytest.mark.parametrize(
    ("verb", "named", "expected"),
    [
        ("get", True, "get"),
        ("get", False, "list"),
        ("list", False, "list"),
        ("post", False, "create"),
        ("create", False, "create"),
        ("patch", True, "patch"),
        ("put", True, "update"),
        ("delete", True, "delete"),
        ("delete", False, "deletecollection"),
        ("watch", False, "watch"),
    ],
)
def test_http_verbs_map_to_rbac_verbs(verb, named, expected):
    assert rbac_verb(verb, named=named) == expected

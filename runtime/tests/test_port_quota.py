"""NodePorts and load balancers per tenant (NODE_PORTS_PER_TENANT, LOAD_BALANCERS_PER_TENANT):
every template port of a unit with tcp access and every SSH unit takes a NodePort, kept while
the unit is Pending or Stopped. An order or update past the allowance is 409 `limit_exceeded`
naming it before anything is written or created; the tenant's ResourceQuota carries both (and
its ephemeral storage), and GET /quota shows them."""

from __future__ import annotations

import uuid

import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from controlplane import kube
from controlplane.kube.errors import PermanentError
from runtime import access, manifests
from runtime.control.provisioning import CHILDREN, ensure_tenant_namespace
from runtime.models import GPUUnit, Operation, OperationStatus, UnitPhase
from runtime.tests.helpers import order_unit, remove_namespace_objects, wait_for_phase, wait_until
from tenancy.tests.factories import TenantFactory
from tenancy.tests.test_sshkeys import ED25519
from tests.endpoints import client_for

TCP = {"primaryPort": "p0", "scheme": "tcp"}


def ports(count: int) -> dict:
    return {"ports": [{"name": f"p{i}", "port": 8000 + i} for i in range(count)]}


def order(client, name: str, **extra):
    body = {"operationID": name, "name": name, "packageID": ARTICLE_PACKAGE_ID, "image": "b"}
    return client.post("/api/v1/gpu-units", {**body, **extra}, format="json")


def tcp_order(client, name: str, count: int):
    return order(client, name, template=ports(count), access=TCP)


def settle(name: str) -> None:
    """The unit runs and its create is done (no worker here), so it can be updated."""
    GPUUnit.objects.filter(name=name).update(
        phase=UnitPhase.RUNNING, unit_k8s_uid="00000000-0000-0000-0000-000000000001"
    )
    Operation.objects.filter(unit__name=name).update(status=OperationStatus.SUCCEEDED)


def assert_limit_exceeded(response, *, limit: str, used: int, requested: int, hard: int):
    assert response.status_code == 409, response.json()
    error = response.json()["error"]
    assert error["code"] == "limit_exceeded"
    assert error["details"] == {"limit": limit, "used": used, "requested": requested, "hard": hard}
    key = {"nodePorts": "services.nodeports", "loadBalancers": "services.loadbalancers"}[limit]
    assert key in error["message"]


# ------------------------------------------------------------------------------------- counting


def _contract(**overrides) -> manifests.UnitContract:
    fields = {
        "name": "u",
        "namespace": "ns",
        "tenant": "t",
        "operation_id": "op",
        "request_hash": "",
        "package_id": "p",
        "spec_name": "s",
        "image": "busybox",
        "cpu": "1",
        "memory": "1Gi",
        "gpu": 1,
        "device_class_name": "nvidia-h100",
        "claim_name": "unit-u-gpu",
        "claim_request_name": "gpu",
        "count": 1,
    }
    fields.update(overrides)
    return manifests.UnitContract(**fields)


def _charged(services: list[dict]) -> tuple[int, int]:
    """(node ports, load balancers) the API server's ResourceQuota admission charges for
    creating `services`: they are made in a namespace of their own under a quota of both, and
    its used status read back. Admission writes the charge to the quota before a create
    returns; the quota controller must have filled in the status first (until then admission
    refuses: status unknown for quota)."""
    namespace = f"exposure-{uuid.uuid4().hex[:12]}"
    kube.create(kube.NAMESPACE, None, {"metadata": {"name": namespace}})
    try:
        kube.create(
            kube.RESOURCEQUOTA,
            namespace,
            {
                "metadata": {"name": "exposure"},
                "spec": {"hard": {"services.nodeports": "100", "services.loadbalancers": "100"}},
            },
        )

        def status() -> dict:
            return kube.get(kube.RESOURCEQUOTA, namespace, "exposure").get("status") or {}

        wait_until(lambda: status().get("hard"), "the quota controller to fill in its status")
        for service in services:
            # No owner: the garbage collector would delete a Service whose GPUUnit is not
            # there, and the quota controller would then take its charge back.
            metadata = {**service["metadata"], "namespace": namespace}
            metadata.pop("ownerReferences")
            kube.create(kube.SERVICE, namespace, {**service, "metadata": metadata})
        used = status()["used"]
        return int(used["services.nodeports"]), int(used["services.loadbalancers"])
    finally:
        kube.delete(kube.NAMESPACE, None, namespace)


@pytest.mark.parametrize("service_type", ["NodePort", "LoadBalancer", "ClusterIP"])
@pytest.mark.parametrize(
    ("template_ports", "access_settings", "ssh"),
    [
        (3, TCP, False),
        (3, {"primaryPort": "p0", "scheme": "http"}, False),
        (0, {}, True),
        (2, TCP, True),
        (0, {}, False),
    ],
)
def test_exposure_counts_what_the_quota_charges_for_the_services_a_unit_gets(
    cluster, service_type, template_ports, access_settings, ssh
):
    """The count the control plane checks equals what the API server's ResourceQuota
    admission charges for the Services provisioning makes (CHILDREN, with provision_access's
    types)."""
    config = access.AccessConfig(tcp_service_type=service_type)
    contract = _contract(ports=ports(template_ports)["ports"], access=access_settings, ssh=ssh)
    wanted = {child.part for child in CHILDREN if child.wanted(contract, config)}
    services = []
    if manifests.Part.SERVICE in wanted:
        tcp = access.tcp_exposed(contract.access, config)
        services.append(
            manifests.build_service(
                contract, owner_uid="u", service_type=service_type if tcp else "ClusterIP"
            )
        )
    if manifests.Part.SSH_SERVICE in wanted:
        services.append(
            manifests.build_ssh_service(contract, owner_uid="u", service_type=service_type)
        )
    counted = access.exposure(ports=contract.ports, access=contract.access, ssh=ssh, config=config)
    assert (counted.node_ports, counted.load_balancers) == _charged(services)


def test_the_resource_quota_carries_node_ports_load_balancers_and_ephemeral_storage():
    hard = manifests.build_resource_quota(
        "ns",
        tenant="t",
        cpu="1",
        memory="1Gi",
        claims=1,
        node_ports=5,
        load_balancers=0,
        ephemeral_storage="200Gi",
    )["spec"]["hard"]
    assert hard["services.nodeports"] == "5"
    assert hard["services.loadbalancers"] == "0"
    assert hard["requests.ephemeral-storage"] == "200Gi"
    assert hard["limits.ephemeral-storage"] == "200Gi"


# --------------------------------------------------------------------------- orders and updates


@pytest.mark.django_db
class TestNodePortAllowance:
    @pytest.fixture(autouse=True)
    def _setup(self, settings):
        settings.NODE_PORTS_PER_TENANT = 3
        PackageFactory(article=True)
        self.tenant = TenantFactory()
        self.client = client_for(self.tenant)

    def test_an_order_past_the_node_ports_is_refused_and_writes_nothing(self):
        assert tcp_order(self.client, "two", 2).status_code == 201
        assert tcp_order(self.client, "one", 1).status_code == 201
        refused = tcp_order(self.client, "more", 1)
        assert_limit_exceeded(refused, limit="nodePorts", used=3, requested=1, hard=3)
        assert not GPUUnit.objects.filter(name="more").exists()
        assert not Operation.objects.filter(operation_id="more").exists()
        # Units without a public port take none; http access is not a NodePort.
        assert order(self.client, "plain").status_code == 201
        http = {"primaryPort": "p0", "scheme": "http"}
        assert order(self.client, "web", template=ports(4), access=http).status_code == 201

    def test_pending_and_stopped_units_hold_their_ports_terminated_ones_do_not(self):
        assert tcp_order(self.client, "held", 3).status_code == 201
        for phase in (UnitPhase.PENDING, UnitPhase.STOPPED):
            GPUUnit.objects.filter(name="held").update(phase=phase)
            assert tcp_order(self.client, "next", 1).status_code == 409
        GPUUnit.objects.filter(name="held").update(phase=UnitPhase.TERMINATED)
        assert tcp_order(self.client, "next", 1).status_code == 201

    def test_ssh_takes_a_node_port(self):
        response = self.client.post(
            "/api/v1/ssh-keys", {"name": "laptop", "publicKey": ED25519}, format="json"
        )
        assert response.status_code == 201
        assert tcp_order(self.client, "two", 2).status_code == 201
        assert order(self.client, "shell", ssh={"enabled": True}).status_code == 201
        refused = order(self.client, "shell2", ssh={"enabled": True})
        assert_limit_exceeded(refused, limit="nodePorts", used=3, requested=1, hard=3)

    def test_another_tenant_s_ports_are_not_counted(self):
        assert tcp_order(self.client, "full", 3).status_code == 201
        other = client_for(TenantFactory())
        assert tcp_order(other, "mine", 3).status_code == 201

    def test_an_update_past_the_node_ports_is_refused_and_changes_nothing(self):
        assert tcp_order(self.client, "grow", 1).status_code == 201
        assert tcp_order(self.client, "other", 1).status_code == 201
        settle("grow")
        url = "/api/v1/gpu-units/grow"
        etag = self.client.get(url).json()["data"]["etag"]
        refused = self.client.patch(
            url, {"operationID": "grow-3", "template": ports(3)}, format="json", HTTP_IF_MATCH=etag
        )
        assert_limit_exceeded(refused, limit="nodePorts", used=2, requested=2, hard=3)
        unit = GPUUnit.objects.get(name="grow")
        assert (unit.generation, len(unit.template["ports"])) == (1, 1)
        assert not Operation.objects.filter(operation_id="grow-3").exists()
        accepted = self.client.patch(
            url, {"operationID": "grow-2", "template": ports(2)}, format="json", HTTP_IF_MATCH=etag
        )
        assert accepted.status_code == 202, accepted.json()

    def test_an_update_that_opens_no_more_ports_passes_over_a_lowered_allowance(self, settings):
        assert tcp_order(self.client, "wide", 3).status_code == 201
        settings.NODE_PORTS_PER_TENANT = 1
        settle("wide")
        url = "/api/v1/gpu-units/wide"
        etag = self.client.get(url).json()["data"]["etag"]
        response = self.client.patch(
            url, {"operationID": "img", "image": "busybox:2"}, format="json", HTTP_IF_MATCH=etag
        )
        assert response.status_code == 202, response.json()

    def test_load_balancers_are_counted_when_tcp_units_get_them(self, settings):
        settings.ACCESS_TCP_SERVICE_TYPE = "LoadBalancer"
        settings.LOAD_BALANCERS_PER_TENANT = 1
        assert tcp_order(self.client, "lb", 1).status_code == 201
        refused = tcp_order(self.client, "lb2", 1)
        assert_limit_exceeded(refused, limit="loadBalancers", used=1, requested=1, hard=1)
        # In-cluster only: nothing public, nothing counted.
        settings.ACCESS_TCP_SERVICE_TYPE = "ClusterIP"
        assert tcp_order(self.client, "inside", 3).status_code == 201

    def test_quota_shows_node_ports_load_balancers_and_ephemeral_storage(self, settings):
        self.tenant.quota_ephemeral_storage = "100Gi"
        self.tenant.save()
        assert tcp_order(self.client, "two", 2).status_code == 201  # 20Gi (the default)
        assert order(self.client, "plain").status_code == 201
        GPUUnit.objects.filter(name="plain").update(
            phase=UnitPhase.STOPPED, run_policy="Stopped"
        )  # keeps no pod: its disk is not counted
        limits = self.client.get("/api/v1/quota").json()["data"]["limits"]
        assert limits["nodePorts"] == {"hard": "3", "used": "2", "free": "1"}
        assert limits["loadBalancers"] == {"hard": "8", "used": "0", "free": "8"}
        assert limits["ephemeralStorage"] == {"hard": "100Gi", "used": "20Gi", "free": "80Gi"}


# ------------------------------------------------------------------------- against the cluster


def _node_port_service(namespace: str, name: str, count: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "type": "NodePort",
            "selector": {"app": name},
            "ports": [{"name": f"p{i}", "port": 8000 + i} for i in range(count)],
        },
    }


@pytest.mark.django_db(transaction=True)
def test_the_tenant_resource_quota_bounds_node_ports_in_the_cluster(cluster, settings):
    settings.NODE_PORTS_PER_TENANT = 2
    settings.LOAD_BALANCERS_PER_TENANT = 0
    tenant = TenantFactory(quota_ephemeral_storage="300Gi")
    ensure_tenant_namespace(tenant)
    namespace = tenant.namespace
    hard = kube.get(kube.RESOURCEQUOTA, namespace, manifests.QUOTA_NAME)["spec"]["hard"]
    assert hard["services.nodeports"] == "2"
    assert hard["services.loadbalancers"] == "0"
    assert hard["requests.ephemeral-storage"] == hard["limits.ephemeral-storage"] == "300Gi"
    kube.create(kube.SERVICE, namespace, _node_port_service(namespace, "two", 2))
    try:
        wait_until(
            lambda: (
                (kube.get(kube.RESOURCEQUOTA, namespace, manifests.QUOTA_NAME).get("status") or {})
                .get("used", {})
                .get("services.nodeports")
                == "2"
            ),
            "the quota to count the Service's two NodePorts",
        )
        with pytest.raises(PermanentError) as refused:
            kube.create(kube.SERVICE, namespace, _node_port_service(namespace, "three", 1))
        assert refused.value.reason == "QuotaExceeded"
        assert "services.nodeports" in str(refused.value)
        assert kube.get(kube.SERVICE, namespace, "three") is None
    finally:
        kube.delete(kube.SERVICE, namespace, "two")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("celery_worker")
def test_a_tenant_at_its_node_ports_gets_409_and_nothing_reaches_the_cluster(
    auth_client, tenant, settings
):
    settings.NODE_PORTS_PER_TENANT = 2
    PackageFactory(article=True)
    try:
        first = order_unit(auth_client, "first", ARTICLE_PACKAGE_ID, template=ports(2), access=TCP)
        wait_for_phase(first, "Running")
        service = kube.get(kube.SERVICE, tenant.namespace, "unit-first")
        assert service["spec"]["type"] == "NodePort"
        assert all(port.get("nodePort") for port in service["spec"]["ports"])

        assert_limit_exceeded(
            tcp_order(auth_client, "second", 1), limit="nodePorts", used=2, requested=1, hard=2
        )
        assert not GPUUnit.objects.filter(name="second").exists()
        assert not Operation.objects.filter(operation_id="second").exists()
        # A later order the worker carries out: by the time it runs, anything queued before it
        # would have been done too.
        wait_for_phase(order_unit(auth_client, "third", ARTICLE_PACKAGE_ID), "Running")
        for kind, name in (
            (kube.GPUUNIT, "second"),
            (kube.RESOURCECLAIM, "unit-second-gpu"),
            (kube.POD, "unit-second"),
            (kube.SERVICE, "unit-second"),
            (kube.SERVICE, "unit-second-ssh"),
            (kube.NETWORKPOLICY, "unit-second"),
        ):
            assert kube.get(kind, tenant.namespace, name) is None, (kind, name)
        pod = kube.get(kube.POD, tenant.namespace, "unit-first")
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["ephemeral-storage"] == first.ephemeral_storage == "20Gi"
    finally:
        remove_namespace_objects(tenant.namespace)
        for kind in (kube.SERVICE, kube.NETWORKPOLICY):
            for obj in kube.list_objects(kind, namespace=tenant.namespace):
                if obj["metadata"].get("labels", {}).get(manifests.LABEL_MANAGED_BY):
                    kube.delete(kind, tenant.namespace, obj["metadata"]["name"])

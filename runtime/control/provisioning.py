"""Cluster side of a unit's operations: create or adopt its objects, tear them down, keep its
tenant's namespace ready. Each entry point carries out one claimed Operation.

Every step is idempotent, so a retried or duplicated task converges on the same objects.
TemporaryError propagates to the task (which retries); a permanent failure is recorded on the
unit and its operation here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import yaml
from django.conf import settings
from django.utils import timezone

from controlplane import kube
from controlplane.kube.errors import KubeError, PermanentError, TemporaryError
from inventory import clusters
from runtime import access, lifecycle, manifests, orders, outbox, selectors
from runtime.control import handover, metering
from runtime.models import EventType, GPUUnit, Operation, OperationKind, RunPolicy, UnitPhase
from tenancy.models import Tenant

logger = logging.getLogger(__name__)

# Tenants whose namespace and quota this process has ensured recently: provisioning a unit
# then costs three calls, not seven. Forgotten after a while, or when a create finds the
# namespace gone.
_ENSURED_FOR_SECONDS = 300.0
_ensured: dict[tuple, float] = {}


def _ensured_key(tenant: Tenant) -> tuple:
    return (
        kube.current_cluster(),
        tenant.pk,
        tenant.namespace,
        tenant.quota_cpu,
        tenant.quota_memory,
        tenant.quota_claims,
        tenant.quota_storage,
        tenant.quota_storages,
        tenant.quota_ephemeral_storage,
        tuple(sorted((tenant.quota_devices or {}).items())),
        settings.NODE_PORTS_PER_TENANT,
        settings.LOAD_BALANCERS_PER_TENANT,
        settings.SECRETS_PER_TENANT,
    )


def ensure_tenant_namespace_once(tenant: Tenant) -> None:
    key = _ensured_key(tenant)
    if _ensured.get(key, 0.0) > time.monotonic():
        return
    ensure_tenant_namespace(tenant)
    _ensured[key] = time.monotonic() + _ENSURED_FOR_SECONDS


def forget_ensured_namespace(tenant: Tenant) -> None:
    _ensured.pop(_ensured_key(tenant), None)


def ensure_tenant_namespace_of(tenant_pk: int) -> None:
    """ensure_tenant_namespace by the tenant's id (a task's argument), whatever this process
    last ensured, and remembered as ensured; a tenant gone is done."""
    tenant = Tenant.objects.filter(pk=tenant_pk).first()
    if tenant is not None:
        forget_ensured_namespace(tenant)
        ensure_tenant_namespace_once(tenant)


def _cluster_cidrs() -> list[str]:
    """The cluster's own ranges, which no policy rule meaning "the internet" may reach: the
    registry's for the cluster calls go to now (inventory.clusters.own_ranges)."""
    return clusters.own_ranges(kube.current_cluster())


def ensure_tenant_namespace(tenant: Tenant) -> None:
    """The tenant's namespace (Pod Security restricted) and quota exist and say what we want.
    With TENANT_NAMESPACE_PROVISIONING off the namespace is an admin's job: only the quota."""
    if settings.TENANT_NAMESPACE_PROVISIONING:
        kube.ensure(
            kube.NAMESPACE,
            manifests.build_namespace(tenant.namespace, tenant=tenant.slug),
            fields=[("metadata", "labels")],
        )
    kube.ensure(
        kube.RESOURCEQUOTA,
        manifests.build_resource_quota(
            tenant.namespace,
            tenant=tenant.slug,
            cpu=tenant.quota_cpu,
            memory=tenant.quota_memory,
            claims=tenant.quota_claims,
            storage=tenant.quota_storage,
            storages=tenant.quota_storages,
            devices=tenant.quota_devices,
            node_ports=settings.NODE_PORTS_PER_TENANT,
            load_balancers=settings.LOAD_BALANCERS_PER_TENANT,
            ephemeral_storage=tenant.quota_ephemeral_storage,
            secrets=settings.SECRETS_PER_TENANT,
        ),
        # All of spec.hard: a class taken off the tenant's device quota goes from it.
        exact_fields=[("spec", "hard")],
    )
    if settings.NETWORK_POLICIES:
        kube.ensure(
            kube.NETWORKPOLICY,
            manifests.build_tenant_network_policy(
                tenant.namespace,
                tenant=tenant.slug,
                gateway_namespace=settings.NETWORK_GATEWAY_NAMESPACE,
                egress_allow=settings.NETWORK_EGRESS_ALLOW,
                cluster_cidrs=_cluster_cidrs(),
            ),
            fields=[("spec",)],
        )


def provision_objects(contract: manifests.UnitContract) -> tuple[dict, dict, dict]:
    """Create or adopt GPUUnit -> ResourceClaim (owned) -> Pod (owned). Returns the three."""
    gpuunit = kube.create_or_adopt(
        kube.GPUUNIT,
        manifests.build_gpuunit(contract),
        ours=lambda found: manifests.is_unit_object(
            found, tenant=contract.tenant, unit=contract.name, operation_id=contract.operation_id
        ),
    )
    owner_uid = gpuunit["metadata"]["uid"]
    ours = manifests.owned_by(owner_uid, contract)
    wanted = manifests.build_resource_claim(contract, owner_uid=owner_uid)
    claim = kube.create_or_adopt(kube.RESOURCECLAIM, wanted, ours=ours)
    dropped = manifests.dropped_fields(wanted["spec"], claim.get("spec") or {})
    if dropped:
        # A server with the feature's gate off drops its fields without a word (a share's
        # capacity request on 1.34): the claim would ask for something else than the package.
        raise PermanentError(
            f"the cluster dropped {', '.join(f'spec.{path}' for path in dropped)} from "
            f"ResourceClaim {contract.claim_name}: the DRA feature this package needs is off "
            "there (consumable capacity, for one, is on by default from Kubernetes 1.36)",
            reason="ClusterLacksFeature",
        )
    pod = kube.create_or_adopt(
        kube.POD, manifests.build_pod(contract, owner_uid=owner_uid), ours=ours
    )
    return gpuunit, claim, pod


@dataclass(frozen=True)
class Child:
    """One kind of object a unit may have besides its GPUUnit: which it is (its name part),
    its kind under the access configuration, and whether a unit of this contract has it."""

    part: manifests.Part
    kind: Callable[[access.AccessConfig], kube.Kind]
    wanted: Callable[[manifests.UnitContract, access.AccessConfig], bool]
    # Whether the control plane manages this kind at all under the configuration (it may not
    # be allowed to read a route kind or NetworkPolicies it was not configured to use).
    managed: Callable[[access.AccessConfig], bool] = lambda config: True

    def name(self, unit: str) -> str:
        return manifests.object_name(unit, self.part)


def _public_ports(contract: manifests.UnitContract, config: access.AccessConfig) -> list[dict]:
    """The ports a unit opens to the outside: its primary port with tcp access, and SSH."""
    ports = []
    primary = access.primary_port(contract.ports, contract.access)
    if contract.ports and access.tcp_exposed(contract.access, config) and primary is not None:
        ports.append(primary)
    if contract.ssh and config.tcp_service_type != "ClusterIP":
        ports.append({"port": manifests.SSH_PORT, "protocol": "TCP"})
    return ports


def _http_published(contract: manifests.UnitContract, config: access.AccessConfig) -> bool:
    return (
        config.http_exposed
        and access.primary_port(contract.ports, contract.access) is not None
        and contract.access.get("scheme") in ("http", "https")
    )


# The one table of a unit's objects: provisioning creates the ones it wants, an update
# deletes the ones it no longer wants, teardown deletes them all, the GPUUnit last. A unit is
# one pod, so its own traffic needs no rule: only a port opened to the outside (tcp access,
# SSH) gets it a NetworkPolicy.
CHILDREN: tuple[Child, ...] = (
    Child(manifests.Part.POD, lambda config: kube.POD, lambda contract, config: True),
    Child(manifests.Part.CLAIM, lambda config: kube.RESOURCECLAIM, lambda contract, config: True),
    Child(
        manifests.Part.SERVICE,
        lambda config: kube.SERVICE,
        lambda contract, config: bool(contract.ports),
    ),
    Child(
        manifests.Part.SSH_SERVICE,
        lambda config: kube.SERVICE,
        lambda contract, config: contract.ssh and config.tcp_service_type != "ClusterIP",
    ),
    Child(
        manifests.Part.SSH_KEYS,
        lambda config: kube.CONFIGMAP,
        lambda contract, config: contract.ssh,
    ),
    Child(
        manifests.Part.ROUTE,
        # The route kind only when one is configured: the control plane may not read the other.
        lambda config: kube.HTTPROUTE if config.gateway else kube.INGRESS,
        _http_published,
        managed=lambda config: config.http_exposed,
    ),
    Child(
        manifests.Part.NETWORK_POLICY,
        lambda config: kube.NETWORKPOLICY,
        lambda contract, config: (
            settings.NETWORK_POLICIES and bool(_public_ports(contract, config))
        ),
        managed=lambda config: settings.NETWORK_POLICIES,
    ),
)
# What an update may change: everything but the pod (replaced by the roll-out) and the claim.
_CONVERGED = {child.part for child in CHILDREN} - {manifests.Part.POD, manifests.Part.CLAIM}


def provision_access(
    contract: manifests.UnitContract, *, owner_uid: str, converge: bool = False
) -> dict:
    """The objects that reach the unit, owned by its GPUUnit: the Service `unit-<name>` (with
    ports), the SSH Service, the HTTPRoute or Ingress publishing its primary HTTP port, and its
    NetworkPolicy, as CHILDREN says it wants them. Returns what the unit shows of them
    (`exposed`: node ports, load balancer address). With `converge` (an update), objects
    already there are brought to what the contract says and the ones it no longer wants are
    deleted."""
    config = access.from_settings()
    ours = manifests.owned_by(owner_uid, contract)
    exposed: dict = {}
    wanted = {child.part for child in CHILDREN if child.wanted(contract, config)}

    def put(kind: kube.Kind, body: dict) -> dict:
        if converge:
            found = kube.get(kind, contract.namespace, body["metadata"]["name"])
            if found is not None and ours(found):
                return kube.ensure(kind, body, fields=[("spec",)])
        return kube.create_or_adopt(kind, body, ours=ours)

    if manifests.Part.SERVICE in wanted:
        tcp = access.tcp_exposed(contract.access, config)
        service = put(
            kube.SERVICE,
            manifests.build_service(
                contract,
                owner_uid=owner_uid,
                service_type=config.tcp_service_type if tcp else "ClusterIP",
            ),
        )
        node_ports = {
            port["name"]: port["nodePort"]
            for port in service["spec"].get("ports") or []
            if port.get("nodePort")
        }
        if node_ports:
            exposed["nodePorts"] = node_ports
    if manifests.Part.ROUTE in wanted:
        primary = access.primary_port(contract.ports, contract.access)
        assert primary is not None
        _publish_http(contract, owner_uid, config, primary["port"], put)
    if manifests.Part.SSH_SERVICE in wanted:
        ssh_service = put(
            kube.SERVICE,
            manifests.build_ssh_service(
                contract, owner_uid=owner_uid, service_type=config.tcp_service_type
            ),
        )
        node_port = (ssh_service["spec"].get("ports") or [{}])[0].get("nodePort")
        if node_port:
            exposed["sshNodePort"] = node_port
    if manifests.Part.NETWORK_POLICY in wanted:
        put(
            kube.NETWORKPOLICY,
            manifests.build_unit_network_policy(
                contract,
                owner_uid=owner_uid,
                public_ports=_public_ports(contract, config),
                cluster_cidrs=_cluster_cidrs(),
            ),
        )
    if converge:
        for child in CHILDREN:
            if child.part not in _CONVERGED or child.part in wanted or not child.managed(config):
                continue
            kind, name = child.kind(config), child.name(contract.name)
            found = kube.get(kind, contract.namespace, name)
            if found is not None and ours(found):
                kube.delete(kind, contract.namespace, name)
    return exposed


def ensure_ssh_keys(unit: GPUUnit, *, owner_uid: str) -> None:
    """The unit's authorized keys as they are now (the keys it names that still exist)."""
    contract = unit.contract(request_hash="")
    kube.ensure(
        kube.CONFIGMAP,
        manifests.build_ssh_config_map(
            contract, owner_uid=owner_uid, public_keys=selectors.ssh_public_keys(unit)
        ),
        fields=[("data",)],
    )


def _publish_http(
    contract: manifests.UnitContract,
    owner_uid: str,
    config: access.AccessConfig,
    port: int,
    put: Callable[[kube.Kind, dict], dict],
) -> None:
    if not config.http_exposed:
        return  # in-cluster only
    host = access.hostname(
        contract.namespace, contract.name, config.domain, label=contract.host_label
    )
    if config.gateway:
        namespace, name = config.gateway_ref
        route = manifests.build_http_route(
            contract,
            owner_uid=owner_uid,
            hostname=host,
            gateway_namespace=namespace,
            gateway_name=name,
            port=port,
        )
        put(kube.HTTPROUTE, route)
    else:
        ingress = manifests.build_ingress(
            contract,
            owner_uid=owner_uid,
            hostname=host,
            ingress_class=config.ingress_class,
            port=port,
        )
        put(kube.INGRESS, ingress)


def recreate_pod(unit: GPUUnit, gpuunit: dict) -> dict:
    """Create the unit's pod again (it went missing) under its GPUUnit; record it."""
    owner_uid = gpuunit["metadata"]["uid"]
    annotations = gpuunit["metadata"].get("annotations") or {}
    contract = unit.contract(request_hash=annotations.get(manifests.ANNOTATION_REQUEST_HASH, ""))
    pod = kube.create_or_adopt(
        kube.POD,
        manifests.build_pod(contract, owner_uid=owner_uid),
        ours=manifests.owned_by(owner_uid, contract),
    )
    lifecycle.record_pod_recreated(unit, pod_k8s_uid=pod["metadata"]["uid"])
    return pod


def remove_stray_pod(unit: GPUUnit) -> None:
    """A stopped unit has no pod: delete one that is there (created behind our back, or by
    a worker that lost a race with the stop)."""
    name = manifests.pod_name_for(unit.name)
    pod = kube.get(kube.POD, unit.namespace, name)
    if pod is not None and _labelled_for(pod, unit):
        kube.delete(kube.POD, unit.namespace, name)


def _unit_objects(unit: GPUUnit) -> list[tuple[kube.Kind, str]]:
    """The unit's objects (CHILDREN it wants), the GPUUnit last: teardown deletes them in this
    order rather than leave them all to the garbage collector."""
    config = access.from_settings()
    contract = unit.contract(request_hash="")
    objects = [
        (child.kind(config), child.name(unit.name))
        for child in CHILDREN
        if child.wanted(contract, config)
    ]
    return [*objects, (kube.GPUUNIT, unit.name)]


def _labelled_for(found: dict, unit: GPUUnit) -> bool:
    return manifests.labelled_for(found, tenant=unit.tenant.slug, unit=unit.name)


def _is_ours(kind: kube.Kind, found: dict, unit: GPUUnit) -> bool:
    if kind == kube.GPUUNIT:
        return manifests.is_unit_object(
            found, tenant=unit.tenant.slug, unit=unit.name, operation_id=unit.operation_id
        )
    return _labelled_for(found, unit)


def remove_objects(unit: GPUUnit, *, propagation: str = "Background") -> None:
    """Delete whatever of the unit's objects exist and are ours (pod, claim, then the GPUUnit,
    with `propagation`)."""
    for kind, name in _unit_objects(unit):
        found = kube.get(kind, unit.namespace, name)
        if found is not None and _is_ours(kind, found, unit):
            policy = propagation if kind == kube.GPUUNIT else "Background"
            kube.delete(kind, unit.namespace, name, propagation=policy)


def provision_unit(*, operation_pk: int) -> None:
    """Carry out a create operation in the unit's cluster: namespace and quota, then the unit's
    objects. A permanent failure removes what was created and fails the unit with a reason the
    customer can read."""
    with outbox.claimed(operation_pk) as operation:
        if operation is None:
            return
        with kube.using(operation.unit.cluster):
            _provision(operation)


def _provision(operation: Operation) -> None:
    unit = operation.unit
    if unit.phase in UnitPhase.ENDING:
        outbox.finish_operation(
            operation, error_code=outbox.CANCELLED, error_message=outbox.CANCELLED_MESSAGE
        )
        return
    if operation.attempts > settings.OPERATION_MAX_ATTEMPTS:
        _fail(
            unit,
            operation,
            PermanentError("gave up after repeated cluster errors", reason="ProvisioningFailed"),
        )
        return
    if unit.phase in (UnitPhase.ACCEPTED, UnitPhase.PROVISIONING):
        # From the phase claim_operation read a moment ago: only the operation's holder moves
        # the unit on from Accepted.
        lifecycle.transition_unit(
            unit,
            to=UnitPhase.PROVISIONING,
            reason="Provisioning",
            message="Creating the GPUUnit, ResourceClaim and Pod.",
        )
    try:
        ensure_tenant_namespace_once(unit.tenant)
        if unit.reservation_id is not None and unit.reservation_slot is not None:
            # Its slot's placeholder hands its devices over (the claim below asks for them).
            handover.take_slot(unit, now=timezone.now())
        contract = unit.contract(request_hash=operation.request_hash)
        gpuunit, claim, pod = provision_objects(contract)
        exposed = provision_access(contract, owner_uid=gpuunit["metadata"]["uid"])
        if contract.ssh:
            ensure_ssh_keys(unit, owner_uid=gpuunit["metadata"]["uid"])
    except PermanentError as exc:
        if exc.status == 404 and settings.TENANT_NAMESPACE_PROVISIONING:
            # The namespace went away under us: recreate it on the next attempt.
            forget_ensured_namespace(unit.tenant)
            raise TemporaryError(exc.message, status=404, delay=1) from exc
        if exc.status == 404:
            exc = PermanentError(
                f"namespace {unit.namespace} does not exist; an administrator creates tenant "
                "namespaces (tenant namespace provisioning is off)",
                status=404,
                reason="NamespaceNotFound",
            )
        if _nothing_made(unit) and orders.place_again(unit, why=exc.message) is not None:
            return  # its create runs again, in the cluster it is in now
        _fail(unit, operation, exc)
        return
    provisioned = lifecycle.record_provisioned(
        unit,
        operation,
        unit_k8s_uid=gpuunit["metadata"]["uid"],
        claim_k8s_uid=claim["metadata"]["uid"],
        pod_k8s_uid=pod["metadata"]["uid"],
        exposed=exposed,
    )
    if not provisioned:
        # Deleted while we created: the delete task may have swept before our objects existed.
        remove_objects(unit)


def _nothing_made(unit: GPUUnit) -> bool:
    """Whether the cluster holds nothing of the unit (its GPUUnit, which owns the rest, is
    made first); False when it cannot say."""
    try:
        return kube.get(kube.GPUUNIT, unit.namespace, unit.name) is None
    except KubeError:
        return False


def _fail(unit: GPUUnit, operation: Operation, exc: PermanentError) -> None:
    try:
        remove_objects(unit)
    except KubeError:
        # The reconciler and a later delete clean up; the failure itself must still be recorded.
        logger.warning("could not remove objects of failed unit %s", unit, exc_info=True)
    lifecycle.transition_unit(
        unit,
        to=UnitPhase.FAILED,
        reason=exc.reason or "ProvisioningFailed",
        message=exc.message,
        allowed_from={UnitPhase.ACCEPTED, UnitPhase.PROVISIONING},
        event_type=EventType.WARNING,
    )
    outbox.finish_operation(operation, error_code=exc.reason or "failed", error_message=exc.message)


def delete_unit(*, operation_pk: int) -> None:
    """Carry out a delete operation in the unit's cluster: delete the GPUUnit (foreground) and
    wait until the claim and pod are gone too (TemporaryError until then), then mark the unit
    Terminated."""
    with outbox.claimed(operation_pk) as operation:
        if operation is None:
            return
        with kube.using(operation.unit.cluster):
            _delete(operation)


def _delete(operation: Operation) -> None:
    unit = operation.unit
    remove_objects(unit, propagation="Foreground")
    remaining = [
        f"{kind.kind} {name}"
        for kind, name in reversed(_unit_objects(unit))
        if (found := kube.get(kind, unit.namespace, name)) is not None
        and _labelled_for(found, unit)
    ]
    if remaining:
        raise TemporaryError(f"waiting for {', '.join(remaining)} to be deleted", delay=1)
    if metering.still_metered([unit]):
        # The observer bills the pod's end from its last state (its DELETED event), the
        # backstop from its last sighting: Terminated comes after UsageEnded.
        raise TemporaryError("waiting for the end of its pod's usage to be billed", delay=1)
    lifecycle.mark_unit_terminated(unit)
    outbox.finish_operation(operation)


# Spec fields the unit may have or not: a merge patch sets the absent ones to null (removed).
_OPTIONAL_SPEC = ("template", "access", "storageMounts", "ssh", "stopAfter", "restartedAt")


def _patch_spec(unit: GPUUnit, contract: manifests.UnitContract) -> dict:
    """Bring the GPUUnit's spec to the unit's (one merge patch, none when it already says
    it); returns the GPUUnit, or raises PermanentError when it is not the unit's any more."""
    current = kube.get(kube.GPUUNIT, unit.namespace, unit.name)
    if current is None or current["metadata"].get("uid") != unit.unit_k8s_uid:
        raise PermanentError(
            f"GPUUnit {unit.name} was deleted outside the control plane", reason="ObjectDeleted"
        )
    spec = manifests.build_gpuunit(contract)["spec"]
    patch = {key: None for key in _OPTIONAL_SPEC if key not in spec}
    patch.update(spec)
    have = current.get("spec") or {}
    if all(have.get(key) == value for key, value in patch.items()):
        return current
    return kube.merge_patch(kube.GPUUNIT, unit.namespace, unit.name, {"spec": patch})


def _remove_pod(unit: GPUUnit, *, unless_hash: str = "") -> None:
    """Delete the unit's pod (unless it is already built as `unless_hash` says) and wait for
    it to go: TemporaryError while it is still there."""
    name = manifests.pod_name_for(unit.name)
    pod = kube.get(kube.POD, unit.namespace, name)
    if pod is None or not _labelled_for(pod, unit):
        return
    if unless_hash and manifests.template_hash(pod) == unless_hash:
        return
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        kube.delete(kube.POD, unit.namespace, name)
        pod = kube.get(kube.POD, unit.namespace, name)
    if pod is not None:
        raise TemporaryError(f"waiting for pod {name} to be deleted", delay=0.5)


def _renew_claim(unit: GPUUnit, contract: manifests.UnitContract, *, owner_uid: str) -> None:
    """A claim made for another hand-over than the unit's now (a claim's spec cannot change:
    its selector and toleration name the devices) is replaced by one made for this one, its
    pod already gone. TemporaryError while the old claim is still there."""
    wanted = contract.handover.value if contract.handover is not None else ""
    claim = kube.get(kube.RESOURCECLAIM, unit.namespace, unit.claim_name)
    if claim is not None and manifests.claim_handover(claim) == wanted:
        return
    if claim is not None:
        if not _is_ours(kube.RESOURCECLAIM, claim, unit):
            return
        _remove_pod(unit)  # a pod reserving the old claim keeps it (and its devices)
        if not (claim.get("metadata") or {}).get("deletionTimestamp"):
            kube.delete(kube.RESOURCECLAIM, unit.namespace, unit.claim_name)
        if kube.get(kube.RESOURCECLAIM, unit.namespace, unit.claim_name) is not None:
            raise TemporaryError(f"waiting for claim {unit.claim_name} to be deleted", delay=0.5)
    made = kube.create_or_adopt(
        kube.RESOURCECLAIM,
        manifests.build_resource_claim(contract, owner_uid=owner_uid),
        ours=manifests.owned_by(owner_uid, contract),
    )
    lifecycle.record_claim(unit, claim_k8s_uid=made["metadata"]["uid"])


def _lifecycle_operation(operation: Operation | None) -> Operation | None:
    """A claimed stop, start, restart or update; None when there is nothing (more) to do. One
    whose unit's deletion was requested ends cancelled; one that kept failing ends failed."""
    if operation is None:
        return None
    unit = operation.unit
    if unit.phase in UnitPhase.ENDING:
        outbox.finish_operation(
            operation, error_code=outbox.CANCELLED, error_message=outbox.CANCELLED_BY_DELETE
        )
        return None
    if operation.attempts > settings.OPERATION_MAX_ATTEMPTS:
        _fail_lifecycle(
            unit,
            operation,
            PermanentError(
                "gave up after repeated cluster errors",
                reason=f"{operation.kind.capitalize()}Failed",
            ),
        )
        return None
    return operation


def _fail_lifecycle(unit: GPUUnit, operation: Operation, exc: PermanentError) -> None:
    reason = exc.reason or f"{operation.kind.capitalize()}Failed"
    lifecycle.transition_unit(
        unit,
        to=UnitPhase.FAILED,
        reason=reason,
        message=exc.message,
        allowed_from=UnitPhase.LIVE - {UnitPhase.TERMINATING},
        event_type=EventType.WARNING,
        observed_generation=unit.generation,
    )
    outbox.finish_operation(operation, error_code=reason, error_message=exc.message)


def _contract(unit: GPUUnit, gpuunit: dict | None = None) -> manifests.UnitContract:
    annotations = ((gpuunit or {}).get("metadata") or {}).get("annotations") or {}
    return unit.contract(request_hash=annotations.get(manifests.ANNOTATION_REQUEST_HASH, ""))


def stop_unit(*, operation_pk: int) -> None:
    """Carry out a stop: the GPUUnit says runPolicy Stopped, the pod goes (its claim stays;
    with no pod reserving it the claim is deallocated and its devices return to the pool),
    then the unit is Stopped and its CPU and memory given back."""
    with outbox.claimed(operation_pk) as claimed:
        if (operation := _lifecycle_operation(claimed)) is None:
            return
        with kube.using(operation.unit.cluster):
            _stop(operation)


def _stop(operation: Operation) -> None:
    unit = operation.unit
    try:
        _patch_spec(unit, _contract(unit, kube.get(kube.GPUUNIT, unit.namespace, unit.name)))
    except PermanentError as exc:
        _fail_lifecycle(unit, operation, exc)
        return
    _remove_pod(unit)
    lifecycle.mark_unit_stopped(unit, operation)


def roll_out_unit(*, operation_pk: int) -> None:
    """Carry out a start, restart or update: the GPUUnit's spec, the objects that reach the
    unit (an update may change them), and, when the unit runs, a pod built from the unit as
    it is now, replacing one built otherwise (the claim is kept; the new pod's devices are
    allocated afresh). Then the generation is recorded as rolled out."""
    with outbox.claimed(operation_pk) as claimed:
        if (operation := _lifecycle_operation(claimed)) is None:
            return
        with kube.using(operation.unit.cluster):
            _roll_out(operation)


def _roll_out(operation: Operation) -> None:
    unit = operation.unit
    try:
        gpuunit = _patch_spec(
            unit, _contract(unit, kube.get(kube.GPUUNIT, unit.namespace, unit.name))
        )
        owner_uid = gpuunit["metadata"]["uid"]
        contract = _contract(unit, gpuunit)
        exposed = None
        if operation.kind == OperationKind.UPDATE:
            exposed = provision_access(contract, owner_uid=owner_uid, converge=True)
        if contract.ssh:
            # The keys as they are now, on every roll-out: one removed while the unit was
            # stopped or being changed is gone from it when it runs again.
            ensure_ssh_keys(unit, owner_uid=owner_uid)
        pod_uid = ""
        if operation.kind == OperationKind.START and unit.reservation_slot is not None:
            # The owner's unit starting again takes its slot back from the placeholder that
            # held it meanwhile (its claim, renewed below, asks for exactly those devices).
            handover.take_slot(unit, now=timezone.now())
            contract = _contract(unit, gpuunit)
        if unit.run_policy == RunPolicy.RUNNING:
            desired = manifests.build_pod(contract, owner_uid=owner_uid)
            _remove_pod(unit, unless_hash=manifests.template_hash(desired))
            _renew_claim(unit, contract, owner_uid=owner_uid)
            pod = kube.create_or_adopt(
                kube.POD, desired, ours=manifests.owned_by(owner_uid, contract)
            )
            pod_uid = pod["metadata"]["uid"]
    except PermanentError as exc:
        _fail_lifecycle(unit, operation, exc)
        return
    if not lifecycle.record_rolled_out(unit, operation, pod_k8s_uid=pod_uid, exposed=exposed):
        remove_objects(unit)  # deleted meanwhile: the delete task may have swept before us


CRD_MANIFEST = settings.BASE_DIR / "k8s" / "gpuunit-crd.yaml"


# How long install_crd waits for the API server to serve GPUUnits (established within a
# second on a development cluster).
CRD_READY_TIMEOUT = 60.0


def install_crd() -> None:
    """Create the GPUUnit CRD, or bring an existing one up to date (make run, tests, deploys),
    and return once the API server serves GPUUnits: a CRD just created is first not
    Established, then its storage answers 503 "storage is (re)initializing" for a moment."""
    kube.ensure(kube.CRD, yaml.safe_load(CRD_MANIFEST.read_text()), replace_all=True)
    name = f"{kube.GPUUNIT.plural}.{kube.GPUUNIT.group}"
    deadline = time.monotonic() + CRD_READY_TIMEOUT
    while True:
        crd = kube.get(kube.CRD, None, name) or {}
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            try:
                kube.list_page(kube.GPUUNIT, limit=1)
                return
            except TemporaryError:
                pass
        if time.monotonic() > deadline:
            raise TemporaryError(f"the API server does not serve {name} yet")
        time.sleep(0.1)

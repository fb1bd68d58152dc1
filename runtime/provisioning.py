"""Cluster side of a unit: create-or-adopt its objects, tear them down, keep namespaces ready.

Every step is idempotent, so a retried or duplicated task converges on the same objects.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import yaml
from django.conf import settings

from controlplane import kube
from controlplane.kube.errors import KubeError, PermanentError, TemporaryError
from runtime import manifests, services
from runtime.models import EventType, GPUUnit, Operation, Tenant, UnitPhase

logger = logging.getLogger(__name__)


def contract_of(unit: GPUUnit, *, request_hash: str) -> manifests.UnitContract:
    template = unit.template or {}
    return manifests.UnitContract(
        name=unit.name,
        namespace=unit.namespace,
        tenant=unit.tenant.slug,
        operation_id=unit.operation_id,
        request_hash=request_hash,
        package_id=unit.package_id,
        spec_name=unit.spec_name,
        image=unit.image,
        cpu=unit.cpu,
        memory=unit.memory,
        gpu=unit.gpu,
        device_class_name=unit.device_class_name,
        claim_name=unit.claim_name,
        claim_request_name=unit.claim_request_name,
        count=unit.count,
        selectors=list(unit.selectors or []),
        capacity=dict(unit.capacity or {}),
        command=list(template.get("command") or []),
        args=list(template.get("args") or []),
        env=list(template.get("env") or []),
    )


def _labelled_for(obj: dict, unit: GPUUnit) -> bool:
    found = (obj.get("metadata") or {}).get("labels") or {}
    return (
        found.get(manifests.LABEL_MANAGED_BY) == manifests.MANAGED_BY
        and found.get(manifests.LABEL_UNIT) == unit.name
        and found.get(manifests.LABEL_TENANT) == unit.tenant.slug
    )


def _is_unit_object(obj: dict, unit: GPUUnit) -> bool:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return _labelled_for(obj, unit) and (
        annotations.get(manifests.ANNOTATION_OPERATION) == unit.operation_id
    )


def owned_by(owner_uid: str, unit: GPUUnit) -> Callable[[dict], bool]:
    def check(obj: dict) -> bool:
        owners = (obj.get("metadata") or {}).get("ownerReferences") or []
        return _labelled_for(obj, unit) and any(o.get("uid") == owner_uid for o in owners)

    return check


def create_or_adopt(kind: kube.Kind, body: dict, *, ours: Callable[[dict], bool]) -> dict:
    """Create the object; if one of that name exists and is ours, use it. An object of that
    name that is not ours is never touched: it is a permanent error."""
    metadata = body["metadata"]
    try:
        return kube.create(kind, metadata.get("namespace"), body)
    except KubeError as exc:
        if exc.status != 409:
            raise
    existing = kube.get(kind, metadata.get("namespace"), metadata["name"])
    if existing is None:  # deleted between our create and get: try again shortly
        raise TemporaryError(f"{kind.kind} {metadata['name']} vanished while adopting", delay=1)
    if (existing.get("metadata") or {}).get("deletionTimestamp"):
        raise TemporaryError(
            f"a previous {kind.kind} {metadata['name']} is still being deleted", delay=2
        )
    if not ours(existing):
        raise PermanentError(
            f"{kind.kind} {metadata.get('namespace')}/{metadata['name']} already exists and is "
            "not managed by this control plane",
            status=409,
            reason="NameInUse",
        )
    return existing


# Tenants whose namespace and quota this process has ensured recently: provisioning a unit
# then costs three calls, not seven. Forgotten after a while, or when a create finds the
# namespace gone.
_ENSURED_FOR_SECONDS = 300.0
_ensured: dict[tuple, float] = {}


def _ensured_key(tenant: Tenant) -> tuple:
    return (tenant.pk, tenant.namespace, tenant.quota_cpu, tenant.quota_memory, tenant.quota_claims)


def ensure_tenant_namespace_once(tenant: Tenant) -> None:
    key = _ensured_key(tenant)
    if _ensured.get(key, 0.0) > time.monotonic():
        return
    ensure_tenant_namespace(tenant)
    _ensured[key] = time.monotonic() + _ENSURED_FOR_SECONDS


def forget_ensured_namespace(tenant: Tenant) -> None:
    _ensured.pop(_ensured_key(tenant), None)


def ensure_tenant_namespace(tenant: Tenant) -> None:
    """The tenant's namespace (Pod Security restricted) and quota exist and say what we want.
    With TENANT_NAMESPACE_PROVISIONING off the namespace is an admin's job: only the quota."""
    if settings.TENANT_NAMESPACE_PROVISIONING:
        _ensure_namespace(tenant)
    _ensure_quota(tenant)


def _ensure_namespace(tenant: Tenant) -> None:
    namespace = manifests.build_namespace(tenant.namespace, tenant=tenant.slug)
    try:
        kube.create(kube.NAMESPACE, None, namespace)
    except KubeError as exc:
        if exc.status != 409:
            raise
        current = kube.get(kube.NAMESPACE, None, tenant.namespace) or {}
        labels = (current.get("metadata") or {}).get("labels") or {}
        wanted = namespace["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in wanted.items()):
            kube.merge_patch(
                kube.NAMESPACE, None, tenant.namespace, {"metadata": {"labels": wanted}}
            )


def _ensure_quota(tenant: Tenant) -> None:
    quota = manifests.build_resource_quota(
        tenant.namespace,
        tenant=tenant.slug,
        cpu=tenant.quota_cpu,
        memory=tenant.quota_memory,
        claims=tenant.quota_claims,
    )
    try:
        kube.create(kube.RESOURCEQUOTA, tenant.namespace, quota)
    except KubeError as exc:
        if exc.status != 409:
            raise
        current = kube.get(kube.RESOURCEQUOTA, tenant.namespace, manifests.QUOTA_NAME) or {}
        if ((current.get("spec") or {}).get("hard") or {}) != quota["spec"]["hard"]:
            kube.merge_patch(
                kube.RESOURCEQUOTA,
                tenant.namespace,
                manifests.QUOTA_NAME,
                {"spec": {"hard": quota["spec"]["hard"]}},
            )


def provision_objects(unit: GPUUnit, *, request_hash: str) -> tuple[dict, dict, dict]:
    """Create or adopt GPUUnit -> ResourceClaim (owned) -> Pod (owned). Returns the three."""
    contract = contract_of(unit, request_hash=request_hash)
    crd_object = create_or_adopt(
        kube.GPUUNIT, manifests.build_gpuunit(contract), ours=lambda o: _is_unit_object(o, unit)
    )
    owner_uid = crd_object["metadata"]["uid"]
    claim = create_or_adopt(
        kube.RESOURCECLAIM,
        manifests.build_resource_claim(contract, owner_uid=owner_uid),
        ours=owned_by(owner_uid, unit),
    )
    pod = create_or_adopt(
        kube.POD,
        manifests.build_pod(contract, owner_uid=owner_uid),
        ours=owned_by(owner_uid, unit),
    )
    return crd_object, claim, pod


def remove_objects(unit: GPUUnit, *, propagation: str = "Background") -> None:
    """Delete whatever of the unit's objects exist and are ours (pod, claim, then the GPUUnit)."""
    for kind, name in (
        (kube.POD, manifests.pod_name_for(unit.name)),
        (kube.RESOURCECLAIM, unit.claim_name),
    ):
        existing = kube.get(kind, unit.namespace, name)
        if existing is not None and _labelled_for(existing, unit):
            kube.delete(kind, unit.namespace, name)
    existing = kube.get(kube.GPUUNIT, unit.namespace, unit.name)
    if existing is not None and _is_unit_object(existing, unit):
        kube.delete(kube.GPUUNIT, unit.namespace, unit.name, propagation=propagation)


def provision_unit(*, operation_pk: int) -> None:
    """Run a create operation. TemporaryError propagates (the task retries); a permanent
    failure removes what was created and fails the unit with a reason the customer can read."""
    operation = services.claim_operation(operation_pk)
    if operation is None:
        return
    unit = operation.unit
    if unit.phase in (UnitPhase.TERMINATING, UnitPhase.TERMINATED):
        services.finish_operation(
            operation, error_code="cancelled", error_message="The unit was deleted."
        )
        return
    if operation.attempts > settings.OPERATION_MAX_ATTEMPTS:
        _fail(
            unit,
            operation,
            PermanentError("gave up after repeated cluster errors", reason="ProvisioningFailed"),
        )
        return
    services.transition_unit(
        unit,
        to=UnitPhase.PROVISIONING,
        reason="Provisioning",
        message="Creating the GPUUnit, ResourceClaim and Pod.",
        allowed_from={UnitPhase.ACCEPTED, UnitPhase.PROVISIONING},
    )
    try:
        ensure_tenant_namespace_once(unit.tenant)
        crd_object, claim, pod = provision_objects(unit, request_hash=operation.fingerprint)
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
        _fail(unit, operation, exc)
        return
    GPUUnit.objects.filter(pk=unit.pk).update(
        unit_k8s_uid=crd_object["metadata"]["uid"],
        claim_k8s_uid=claim["metadata"]["uid"],
        pod_k8s_uid=pod["metadata"]["uid"],
    )
    services.record_event(
        unit,
        reason="Provisioned",
        message=f"Created GPUUnit {unit.name}, ResourceClaim {unit.claim_name} and Pod "
        f"{manifests.pod_name_for(unit.name)}.",
    )
    services.finish_operation(operation)


def _fail(unit: GPUUnit, operation: Operation, exc: PermanentError) -> None:
    try:
        remove_objects(unit)
    except KubeError:
        # The reconciler and a later delete clean up; the failure itself must still be recorded.
        logger.warning("could not remove objects of failed unit %s", unit, exc_info=True)
    services.transition_unit(
        unit,
        to=UnitPhase.FAILED,
        reason=exc.reason or "ProvisioningFailed",
        message=exc.message,
        allowed_from={UnitPhase.ACCEPTED, UnitPhase.PROVISIONING},
        event_type=EventType.WARNING,
    )
    services.finish_operation(
        operation, error_code=exc.reason or "failed", error_message=exc.message
    )


def terminate_unit(*, operation_pk: int) -> None:
    """Run a delete operation: delete the GPUUnit (foreground) and wait until the claim and pod
    are gone too (TemporaryError until then), then mark the unit Terminated."""
    operation = services.claim_operation(operation_pk)
    if operation is None:
        return
    unit = operation.unit
    remove_objects(unit, propagation="Foreground")
    remaining = [
        f"{kind.kind} {name}"
        for kind, name in (
            (kube.GPUUNIT, unit.name),
            (kube.RESOURCECLAIM, unit.claim_name),
            (kube.POD, manifests.pod_name_for(unit.name)),
        )
        if (obj := kube.get(kind, unit.namespace, name)) is not None and _labelled_for(obj, unit)
    ]
    if remaining:
        raise TemporaryError(f"waiting for {', '.join(remaining)} to be deleted", delay=1)
    mark_terminated(unit)
    services.finish_operation(operation)


def mark_terminated(unit: GPUUnit) -> None:
    services.terminate(
        unit,
        reason="Terminated",
        message="The unit's objects are gone and its devices released.",
        dra={**(unit.dra or {}), "allocated": False, "devices": []},
    )


CRD_MANIFEST = settings.BASE_DIR / "k8s" / "gpuunit-crd.yaml"


def install_crd() -> None:
    """Create the GPUUnit CRD, or bring an existing one up to date (make run, tests, deploys)."""
    body = yaml.safe_load(CRD_MANIFEST.read_text())
    try:
        kube.create(kube.CRD, None, body)
    except KubeError as exc:
        if exc.status != 409:
            raise
        current = kube.get(kube.CRD, None, body["metadata"]["name"]) or {}
        body["metadata"]["resourceVersion"] = current.get("metadata", {}).get("resourceVersion")
        kube.replace(kube.CRD, None, body["metadata"]["name"], body)

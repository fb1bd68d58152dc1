"""The worker's half of tenant storages (runtime/storage.py records them): each storage's
PersistentVolumeClaim created (or adopted) and deleted, and beat's pass that mirrors the
claims' phases, makes a lost claim again and finishes deletions. Storage phases move by
compare-and-set, as units' do."""

from __future__ import annotations

import logging

from django.db import transaction

from controlplane import kube
from controlplane.kube.errors import KubeError, TemporaryError
from runtime import manifests
from runtime.control import provisioning
from runtime.models import GPUStorage, StoragePhase
from runtime.storage import DELETE_STORAGE_TASK, PROVISION_STORAGE_TASK, announce, send

logger = logging.getLogger(__name__)


def provision_storage(storage_pk: int) -> None:
    """The worker's half of a create: the claim (created or adopted), its phase recorded. A
    refusal fails the storage with the cluster's message; a TemporaryError is retried."""
    storage = GPUStorage.objects.select_related("tenant").filter(pk=storage_pk).first()
    if storage is None or storage.phase == StoragePhase.TERMINATING:
        return
    tenant = storage.tenant
    try:
        with kube.using(storage.cluster):
            provisioning.ensure_tenant_namespace_once(tenant)
            claim = kube.create_or_adopt(
                kube.PERSISTENTVOLUMECLAIM,
                _claim(storage),
                ours=lambda found: manifests.labelled_storage(
                    found, tenant=tenant.slug, name=storage.name
                ),
            )
    except TemporaryError:
        raise
    except KubeError as exc:
        _transition(
            storage, StoragePhase.FAILED, message=f"the cluster refused the claim: {exc.message}"
        )
        return
    _observe(storage, claim)


def _claim(storage: GPUStorage) -> dict:
    return manifests.build_storage_claim(
        namespace=storage.tenant.namespace,
        tenant=storage.tenant.slug,
        name=storage.name,
        size=storage.size,
        storage_class=storage.storage_class,
        access_mode=storage.access_mode,
    )


def finish_storage_deletion(storage_pk: int) -> None:
    """The worker's half of a delete: the claim deleted, then the row once it is gone."""
    storage = GPUStorage.objects.select_related("tenant").filter(pk=storage_pk).first()
    if storage is None or storage.phase != StoragePhase.TERMINATING:
        return
    namespace = storage.tenant.namespace
    with kube.using(storage.cluster):
        kube.delete(kube.PERSISTENTVOLUMECLAIM, namespace, storage.claim_name)
        if kube.get(kube.PERSISTENTVOLUMECLAIM, namespace, storage.claim_name) is not None:
            raise TemporaryError(f"waiting for claim {storage.claim_name} to be deleted", delay=1)
    with transaction.atomic():
        announce(storage, previous=storage.phase, phase="Deleted")
        storage.delete()


def _transition(storage: GPUStorage, to: str, **fields: str) -> bool:
    """Compare-and-set, as units' phases move: only from the phase `storage` was read in, so
    a deletion committed since (Terminating) is never written over by what a cluster call
    started before it saw. False when someone else moved it first."""
    with transaction.atomic():
        moved = GPUStorage.objects.filter(pk=storage.pk, phase=storage.phase).update(
            phase=to, **fields
        )
        if moved:
            previous, storage.phase = storage.phase, to
            for name, value in fields.items():
                setattr(storage, name, value)
            if previous != to:
                announce(storage, previous=previous)
    return bool(moved)


def _observe(storage: GPUStorage, claim: dict | None) -> None:
    if storage.phase in (StoragePhase.TERMINATING, StoragePhase.FAILED):
        return
    phase = ((claim or {}).get("status") or {}).get("phase") or StoragePhase.PENDING
    if claim is None:
        phase = StoragePhase.LOST
    uid = ((claim or {}).get("metadata") or {}).get("uid", "")
    if (storage.phase, storage.claim_k8s_uid) != (phase, uid):
        _transition(storage, phase, claim_k8s_uid=uid, message="")


def sync_storages(cluster: str) -> int:
    """Beat's pass over the storages of `cluster`, from one list of the control plane's
    claims there: phases mirrored, a lost or never-made claim made (again), deletions
    finished. How many changed."""
    storages = GPUStorage.objects.filter(cluster=cluster)
    if not storages.exists():
        return 0
    with kube.using(cluster):
        listed = kube.list_objects(
            kube.PERSISTENTVOLUMECLAIM, label_selector=manifests.STORAGE_SELECTOR
        )
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in listed}
    changed = 0
    for storage in storages.select_related("tenant"):
        claim = claims.get((storage.tenant.namespace, storage.claim_name))
        if storage.phase == StoragePhase.TERMINATING:
            send(DELETE_STORAGE_TASK, storage)
            continue
        if claim is None and storage.phase != StoragePhase.FAILED:
            send(PROVISION_STORAGE_TASK, storage)
        before = storage.phase
        _observe(storage, claim)
        changed += storage.phase != before
    return changed

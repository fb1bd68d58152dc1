"""Tenant storages (docs/architecture.md §11): a PersistentVolumeClaim per storage in the
tenant's namespace, deleted with the storage (never while a live unit mounts it), outliving the
units that mount it. This module records storages and their deletion; a worker creates and
deletes the claims (runtime/control/volumes.py: web makes no cluster writes), and beat's pass
mirrors their phase, makes a lost claim again and finishes deletions. The tenant's storage
quota (total size and count) is checked here under the tenant's row lock, and kept in its
ResourceQuota too."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Sum

from controlplane.errors import DomainError, InvalidRequest, NotFound
from controlplane.validation import dns_subdomain, fold_case, positive_quantity
from dracel import quantity
from inventory import placement
from inventory import selectors as inventory_selectors
from runtime import outbox, validation
from runtime.errors import QuotaExceeded, RegionUnavailable, StorageInUse
from runtime.models import GPUStorage, GPUUnit, StorageAccessMode, StoragePhase
from tenancy import services as tenancy_services
from tenancy import webhooks
from tenancy.models import Tenant
from tenancy.quota_words import quota_refusal

logger = logging.getLogger(__name__)


class StorageConflict(DomainError):
    code = "storage_conflict"


def _storage_class_problem(storage_class: str) -> str | None:
    """A class a tenant may name: one of ops' STORAGE_CLASSES (a class decides the disks, their
    cost and who else shares them, so tenants pick only among those offered)."""
    if problem := dns_subdomain(storage_class):
        return problem
    if storage_class not in settings.STORAGE_CLASSES:
        offered = ", ".join(settings.STORAGE_CLASSES)
        return (
            f"storageClass must be one of: {offered}."
            if offered
            else "storageClass cannot be chosen here: leave it out for the cluster's default."
        )
    return None


def _problems(name: str, size: str, storage_class: str, access_mode: str) -> dict[str, list[str]]:
    found = {
        "name": validation.storage_name(name),
        "size": positive_quantity(size, resource="storage"),
        "storageClass": _storage_class_problem(storage_class) if storage_class else None,
        "accessMode": None
        if access_mode in StorageAccessMode.values
        else f"accessMode must be one of {', '.join(StorageAccessMode.values)}.",
    }
    return {field: [message] for field, message in found.items() if message}


def create_storage(
    *,
    tenant: Tenant,
    name: str,
    size: str,
    storage_class: str = "",
    access_mode: str = "",
    region: str = "",
) -> GPUStorage:
    """Record the storage, placed in a cluster (of `region`, when named), and have a worker
    create its claim there; 400 naming fields, 409 for a taken name or a full storage quota,
    503 when no cluster of the region takes new work. Nothing is left behind when the cluster
    refuses the claim."""
    name = fold_case(name.strip())
    size, storage_class = size.strip(), storage_class.strip()
    access_mode = access_mode or StorageAccessMode.READ_WRITE_ONCE
    if problems := _problems(name, size, storage_class, access_mode):
        raise InvalidRequest("The storage is invalid.", details={"fields": problems})
    size_bytes = quantity.parse_bytes(size)
    placed = _place(region)
    try:
        with transaction.atomic():
            tenancy_services.lock_tenant(tenant.pk)
            _check_quota(tenant, size_bytes)
            storage = GPUStorage.objects.create(
                tenant=tenant,
                name=name,
                size=size,
                size_bytes=size_bytes,
                storage_class=storage_class,
                access_mode=access_mode,
                cluster=placed.cluster,
                region=placed.region,
            )
            transaction.on_commit(lambda: send(PROVISION_STORAGE_TASK, storage))
    except IntegrityError:
        raise StorageConflict(f"a storage named {name} exists.", details={"name": name}) from None
    return storage


# Sent by outbox.send; if the broker is down, beat's reconcile (sync_storages) sends them.
PROVISION_STORAGE_TASK = "runtime.provision_storage"
DELETE_STORAGE_TASK = "runtime.delete_storage"


def send(task: str, storage: GPUStorage) -> None:
    """Send a storage's task to the queue of the cluster it lives in."""
    outbox.send(task, storage.pk, cluster=storage.cluster)


def _place(region: str) -> placement.Placed:
    """The cluster a new storage goes to: the first, in ops' order, of `region` (any, when
    not named) that takes new work (enabled, reachable, not cordoned). Units that mount it
    run there."""
    decision = placement.place(
        inventory_selectors.placement_candidates(""), package="", sold_in=[], region=region
    )
    if isinstance(decision, placement.Placed):
        return decision
    if decision.code == "unknown_region":
        raise InvalidRequest(decision.message, details={"fields": {"region": [decision.message]}})
    raise RegionUnavailable(decision.message, details={"regions": decision.regions})


def _check_quota(tenant: Tenant, size_bytes: int) -> None:
    totals = GPUStorage.objects.filter(tenant=tenant).aggregate(
        held=Sum("size_bytes"), count=Count("id")
    )
    held, count = totals["held"], totals["count"]
    if count + 1 > tenant.quota_storages:
        details: dict[str, object] = {
            "limit": "persistentvolumeclaims",
            "used": str(count),
            "hard": str(tenant.quota_storages),
        }
        raise QuotaExceeded(quota_refusal(details, asked="storage"), details=details)
    used, requested = quantity.format_bytes(held or 0), quantity.format_bytes(size_bytes)
    if (held or 0) + size_bytes > tenant.quota_storage_bytes:
        details = {
            "limit": "requests.storage",
            "used": used,
            "requested": requested,
            "hard": tenant.quota_storage,
            # Deleting storages never makes room for it: a smaller size does.
            "largerThanQuota": size_bytes > tenant.quota_storage_bytes,
        }
        raise QuotaExceeded(quota_refusal(details, asked="storage"), details=details)


def get_storage(*, tenant: Tenant, name: str) -> GPUStorage:
    storage = GPUStorage.objects.filter(tenant=tenant, name=fold_case(name.strip())).first()
    if storage is None:
        raise NotFound(f"storage {name} not found.")
    return storage


def mounted_by(storage: GPUStorage) -> list[str]:
    """Names of the live units that mount the storage."""
    return list(
        GPUUnit.objects.live()
        .filter(tenant_id=storage.tenant_id, storage_mounts__contains=[{"name": storage.name}])
        .values_list("name", flat=True)
    )


def announce(storage: GPUStorage, *, previous: str, phase: str = "") -> None:
    """Tell the tenant's webhooks the volume moved from `previous` to its phase (or `phase`:
    Deleted, once it is gone), in order per volume."""
    webhooks.emit(
        storage.tenant_id,
        "storage.phase_changed",
        subject=f"gpu-storages/{storage.name}",
        data={
            "name": storage.name,
            "phase": phase or storage.phase,
            "previousPhase": previous,
            "message": storage.message,
            "size": storage.size,
            "region": storage.region,
            "cluster": storage.cluster,
        },
        ordering_key=f"storage:{storage.pk}",
    )


def delete_storage(*, tenant: Tenant, name: str) -> GPUStorage:
    """Mark the storage Terminating and have a worker delete its claim (its data goes with
    the volume's reclaim policy); 409 while a live unit mounts it. Repeating it is harmless."""
    with transaction.atomic():
        tenancy_services.lock_tenant(tenant.pk)
        storage = get_storage(tenant=tenant, name=name)
        if units := mounted_by(storage):
            raise StorageInUse(
                f"storage {storage.name} is mounted by {', '.join(units)}: delete them first.",
                details={"units": units},
            )
        GPUStorage.objects.filter(pk=storage.pk).update(
            phase=StoragePhase.TERMINATING, message="Deletion requested."
        )
        previous, storage.phase = storage.phase, StoragePhase.TERMINATING
        storage.message = "Deletion requested."
        if previous != storage.phase:
            announce(storage, previous=previous)
        transaction.on_commit(lambda: send(DELETE_STORAGE_TASK, storage))
    return storage

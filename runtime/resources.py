"""The runtime's customer resources besides units, declared once for the generic edges
(controlplane/resources.py): storages, reservations and secrets."""

from __future__ import annotations

from typing import Any

from controlplane.resources import Details, Made, Refusal, Resource, units_named
from runtime import reservations, storage, tenant_secrets
from runtime.errors import (
    InsufficientCapacity,
    InvalidState,
    LimitExceeded,
    QuotaExceeded,
    RegionUnavailable,
    StorageInUse,
)
from tenancy.models import Tenant
from tenancy.quota_words import quota_refusal


def _create_storage(tenant: Tenant, data: Details) -> Made:
    return Made(
        storage.create_storage(
            tenant=tenant,
            name=data["name"],
            size=data["size"],
            storage_class=data.get("storageClass", ""),
            access_mode=data.get("accessMode", ""),
            region=data.get("region", ""),
        )
    )


def _storage_in_use(details: Details) -> str:
    units, many = units_named(details)
    return (
        f"Storage {details['key']} was not deleted: unit{'s' if many else ''} {units} "
        f"mount{'' if many else 's'} it. Delete "
        f"{'those units' if many else 'that unit'} first; the storage keeps its data until then."
    )


STORAGE = Resource(
    name="storage",
    label="storage",
    plural="storages",
    fields={
        "name": "name",
        "size": "size",
        "storageClass": "storage_class",
        "accessMode": "access_mode",
        "region": "region",
    },
    create=_create_storage,
    delete=lambda tenant, name: storage.delete_storage(tenant=tenant, name=name),
    created=lambda made: (
        f"Storage {made.thing.name} ({made.thing.size}) created; it is Pending until the "
        "cluster binds a volume to it."
    ),
    deleted=lambda name: (
        f"Deletion of storage {name} requested: it goes, with its data, once the cluster has "
        "removed its volume claim."
    ),
    refusals={
        storage.StorageConflict: Refusal(
            lambda d: (
                f"A storage named {d.get('name')} exists. Choose another name, or delete that "
                "storage first."
            ),
            field="name",
        ),
        # The size's quota is about the size; the count's, about the form as a whole.
        QuotaExceeded: Refusal(
            lambda d: quota_refusal(d, asked="storage"),
            field=lambda d: "size" if d.get("limit") == "requests.storage" else None,
        ),
        StorageInUse: Refusal(_storage_in_use),
    },
)


def _create_reservation(tenant: Tenant, data: Details) -> Made:
    return Made(
        reservations.create_reservation(
            tenant=tenant,
            name=data["name"],
            package_id=data["packageID"],
            count=data["count"],
            start=data["start"],
            end=data["end"],
            region=data.get("region", ""),
            at_end=data.get("atEnd", "keep"),
        )
    )


def _reserved(made: Made) -> str:
    held: Any = made.thing
    return (
        f"Reservation {held.name} made: {held.count} x {held.package_id} from "
        f"{held.start:%Y-%m-%d %H:%M} to {held.end:%Y-%m-%d %H:%M} UTC."
    )


RESERVATIONS = Resource(
    name="reservation",
    label="reservation",
    plural="reservations",
    fields={
        "name": "name",
        "packageID": "package",
        "count": "count",
        "start": "start",
        "end": "end",
        "region": "region",
        "atEnd": "at_end",
    },
    create=_create_reservation,
    delete=lambda tenant, name: reservations.cancel_reservation(tenant=tenant, name=name),
    created=_reserved,
    deleted=lambda name: f"Reservation {name} cancelled: nothing is held or billed.",
    missing="{label} {key} does not exist.",
    refusals={
        reservations.ReservationConflict: Refusal(
            lambda d: f"A reservation named {d.get('name')} exists.", field="name"
        ),
        QuotaExceeded: Refusal(lambda d: quota_refusal(d, asked="package"), field="count"),
        InsufficientCapacity: Refusal(field="count"),
        RegionUnavailable: Refusal(field="count"),
        InvalidState: Refusal(
            lambda d: (
                f"Reservation {d['key']} has started: it holds its devices, and is billed, until "
                "its end."
            )
        ),
    },
)


def _create_secret(tenant: Tenant, data: Details) -> Made:
    secret, new = tenant_secrets.create_or_replace_secret(
        tenant=tenant, name=data["name"], data=data["data"]
    )
    return Made(secret, new=new)


def _saved(made: Made) -> str:
    keys = ", ".join(made.thing.keys)
    if made.new:
        return f"Secret {made.thing.name} created with keys {keys}."
    return (
        f"Secret {made.thing.name} replaced; its keys are now {keys}. Running units read the "
        "new values from their next start or restart."
    )


def _secret_in_use(details: Details) -> str:
    units, many = units_named(details)
    return (
        f"Secret {details['key']} was not deleted: unit{'s' if many else ''} {units} read"
        f"{'' if many else 's'} it, and a unit's next start fails without it. Delete "
        f"{'those units' if many else 'that unit'}, or take the secret out of "
        f"{'their' if many else 'its'} environment, first."
    )


SECRETS = Resource(
    name="secret",
    label="secret",
    plural="secrets",
    fields={"name": "name", "data": "entries"},
    create=_create_secret,
    delete=lambda tenant, name: tenant_secrets.delete_secret(tenant=tenant, name=name),
    created=_saved,
    deleted=lambda name: f"Secret {name} deleted.",
    refusals={
        tenant_secrets.SecretConflict: Refusal(
            lambda d: (
                f"The tenant's namespace holds a Kubernetes Secret secret-{d.get('name')} that "
                "this control plane does not manage. Choose another name."
            ),
            field="name",
        ),
        LimitExceeded: Refusal(
            lambda d: (
                f"The tenant holds as many secrets as it may ({d.get('hard')}). Delete one it "
                "no longer needs, or replace one it holds by giving its name."
            )
        ),
        tenant_secrets.NamespaceNotReady: Refusal(
            lambda d: "The tenant's namespace is being prepared: try again in a few seconds."
        ),
        tenant_secrets.SecretInUse: Refusal(_secret_in_use),
    },
)

"""The only package that imports the `kubernetes` client: connection, errors, and the
create-or-adopt and ensure idioms."""

from controlplane.kube.client import (
    CRD,
    DEVICECLASS,
    GPUUNIT,
    NAMESPACE,
    NODE,
    POD,
    RESOURCECLAIM,
    RESOURCEQUOTA,
    RESOURCESLICE,
    Kind,
    create,
    delete,
    get,
    list_objects,
    list_page,
    merge_patch,
    replace,
    reset,
    version,
)
from controlplane.kube.errors import KubeError, PermanentError, TemporaryError
from controlplane.kube.objects import create_or_adopt, ensure
from controlplane.kube.watch import Event, Gone, Informer, list_all

__all__ = [
    "CRD",
    "DEVICECLASS",
    "GPUUNIT",
    "NAMESPACE",
    "NODE",
    "POD",
    "RESOURCECLAIM",
    "RESOURCEQUOTA",
    "RESOURCESLICE",
    "Event",
    "Gone",
    "Informer",
    "Kind",
    "KubeError",
    "PermanentError",
    "TemporaryError",
    "create",
    "create_or_adopt",
    "delete",
    "ensure",
    "get",
    "list_all",
    "list_objects",
    "list_page",
    "merge_patch",
    "replace",
    "reset",
    "version",
]

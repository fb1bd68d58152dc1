"""Tenant secrets (/secrets): values a tenant's units read as environment variables by
reference (`template.env[].secretRef`), held only in the Kubernetes Secret `secret-<name>` of
the tenant's namespace. The database keeps the name and key names (TenantSecret) so the API
lists, counts and checks references without reading a value.

Unlike storages, the web process writes the Secret itself, in the request: a value handed to
a worker would have to wait in the database or a broker message, and a value must have no
home but the Secret. Web may create, patch and delete Secrets and never read one
(k8s/control-plane/rbac.yaml); no message, log line or error names a value.

Secrets are written to the process's own cluster (CLUSTER_NAME) only, so units that read one
are placed there (orders.bound_to) and a unit in another cluster cannot be changed to read
one (check_cluster)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction

from controlplane import kube
from controlplane.errors import DomainError, InvalidRequest, NotFound, ServiceUnavailable
from controlplane.kube.errors import KubeError, TemporaryError
from controlplane.validation import fold_case
from runtime import manifests, outbox, validation
from runtime.models import GPUUnit, TenantSecret
from tenancy import services as tenancy_services
from tenancy.errors import LimitExceeded
from tenancy.models import Tenant

logger = logging.getLogger(__name__)

MAX_KEYS = 64
# Sent (by name) when the tenant's namespace does not exist yet: the worker makes it, as it
# does before a tenant's first unit or storage (runtime/tasks.py).
ENSURE_NAMESPACE_TASK = "runtime.ensure_tenant_namespace"


class SecretConflict(DomainError):
    """A Secret of that name exists in the namespace and is not one of ours."""

    code = "secret_conflict"


class SecretInUse(DomainError):
    """A live unit reads the secret: deleting it would fail the unit's next start."""

    code = "secret_in_use"


class NamespaceNotReady(DomainError):
    """The tenant has no namespace yet (it comes with the first unit or storage, made by the
    worker, which has just been asked for it): nothing was saved; sending the secret again in
    a few seconds succeeds. A 409 with Retry-After, not a 5xx: nothing is wrong with the
    service, the tenant's state is not there yet."""

    code = "namespace_not_ready"


def _data_problems(data: object) -> dict[str, list[str]]:
    """Problems with `data`, by field path; messages name keys, never values."""
    if not isinstance(data, dict) or not data:
        return {"data": ["data is an object of at least one KEY: value."]}
    if len(data) > MAX_KEYS:
        return {"data": [f"a secret has at most {MAX_KEYS} keys."]}
    problems: dict[str, list[str]] = {}
    size = 0
    for key, value in data.items():
        if problem := validation.secret_key(key):
            problems[f"data.{key[:64]}"] = [problem]
            continue
        if not isinstance(value, str):
            problems[f"data.{key}"] = ["the value must be a string."]
            continue
        try:
            encoded = value.encode()
        except UnicodeEncodeError:
            problems[f"data.{key}"] = ["the value is not valid text (an unpaired surrogate)."]
            continue
        if "\x00" in value:
            problems[f"data.{key}"] = ["the value may not contain NUL (it becomes a variable)."]
        size += len(key) + len(encoded)
    if size > settings.SECRET_MAX_BYTES:
        problems.setdefault("data", []).append(
            f"keys and values together are {size} bytes; a secret holds at most "
            f"{settings.SECRET_MAX_BYTES} (1 MiB)."
        )
    return problems


def create_or_replace_secret(
    *, tenant: Tenant, name: str, data: dict[str, str]
) -> tuple[TenantSecret, bool]:
    """Write the secret's Secret with exactly `data` (a secret of that name is replaced:
    POST is a PUT by name, so a retry of a request that timed out simply writes it again).
    Returns the row and whether the secret is new. 400 naming the field, 409 limit_exceeded
    past SECRETS_PER_TENANT, 409 secret_conflict for a foreign Secret of that name. Units
    already running keep the value they started with until their next start or restart."""
    name = fold_case(name.strip()) if isinstance(name, str) else name
    problems = {}
    if problem := validation.secret_name(name):
        problems["name"] = [problem]
    problems.update(_data_problems(data))
    if problems:
        raise InvalidRequest("The secret is invalid.", details={"fields": problems})
    body = manifests.build_secret(
        namespace=tenant.namespace, tenant=tenant.slug, name=name, data=data
    )
    keys = sorted(data)
    # Under the tenant's row lock: the count limit holds under concurrent creates, and the
    # row and the Secret change together (a failed write leaves the row as it was).
    with transaction.atomic():
        tenancy_services.lock_tenant(tenant.pk)
        secret = TenantSecret.objects.filter(tenant=tenant, name=name).first()
        if secret is None:
            held = TenantSecret.objects.filter(tenant=tenant).count()
            if held >= settings.SECRETS_PER_TENANT:
                raise LimitExceeded(
                    f"tenant {tenant.slug} has {held} secrets, the most it may hold "
                    f"({settings.SECRETS_PER_TENANT}); delete one first.",
                    details={"limit": "secrets", "used": held, "hard": settings.SECRETS_PER_TENANT},
                )
        _write(tenant, name, body)
        if secret is None:
            return TenantSecret.objects.create(tenant=tenant, name=name, keys=keys), True
        secret.keys = keys
        secret.save(update_fields=["keys", "updated_at"])
        return secret, False


def _write(tenant: Tenant, name: str, body: dict) -> None:
    """Create the Secret, or replace the data of the one of ours already there (left by a
    request whose answer was lost). Ownership is checked by the API server in the same
    request (JSON Patch `test` of our labels), so no Secret is ever read."""
    object_name = body["metadata"]["name"]
    try:
        kube.create(kube.SECRET, tenant.namespace, body)
        return
    except KubeError as exc:
        _refused(exc, tenant, name)
    tests = [
        {"op": "test", "path": f"/metadata/labels/{_pointer(label)}", "value": value}
        for label, value in body["metadata"]["labels"].items()
    ]
    try:
        kube.json_patch(
            kube.SECRET,
            tenant.namespace,
            object_name,
            [*tests, {"op": "add", "path": "/data", "value": body["data"]}],
        )
    except KubeError as exc:
        if exc.status == 422:
            raise SecretConflict(
                f"a Secret {object_name} exists in namespace {tenant.namespace} and is not "
                "managed by this control plane: choose another name.",
                details={"name": name},
            ) from None
        if exc.status == 404:  # deleted between our create and patch
            raise ServiceUnavailable("The secret changed meanwhile: send it again.") from None
        _refused(exc, tenant, name)


def _refused(exc: KubeError, tenant: Tenant, name: str) -> None:
    """Raise what the API says for a failed write; returns only for 409 (the Secret exists)."""
    if exc.status == 409:
        return
    if isinstance(exc, TemporaryError):
        raise ServiceUnavailable("The cluster is unreachable; the secret was not saved.") from None
    if exc.status == 404:
        # Only the namespace can be missing on a create: the worker makes it.
        outbox.send(ENSURE_NAMESPACE_TASK, tenant.pk)
        raise NamespaceNotReady(
            f"The tenant's namespace {tenant.namespace} is being prepared; send the secret "
            "again in a few seconds.",
            details={"namespace": tenant.namespace},
        ) from None
    # The API server's message names fields and keys (never a value), as ours do.
    logger.warning("the cluster refused secret %s of %s: %s", name, tenant.slug, exc.message)
    raise InvalidRequest(
        f"The cluster refused the secret: {exc.message}", details={"name": name}
    ) from None


def _pointer(label: str) -> str:
    return label.replace("~", "~0").replace("/", "~1")


def count_secrets(tenant: Tenant) -> int:
    return TenantSecret.objects.filter(tenant=tenant).count()


def get_secret(*, tenant: Tenant, name: str) -> TenantSecret:
    name = fold_case(name.strip())
    secret = (
        None
        if validation.secret_name(name)
        else TenantSecret.objects.filter(tenant=tenant, name=name).first()
    )
    if secret is None:
        raise NotFound(f"secret {name} not found.")
    return secret


def readers(*, tenant_id: int) -> dict[str, dict[tuple[str, str], list[str]]]:
    """Which of the tenant's live units read which of its secrets, and the keys each reads:
    {secret name: {(unit name, unit uid): [keys]}}, units by name (one query)."""
    found: dict[str, dict[tuple[str, str], list[str]]] = {}
    units = (
        GPUUnit.objects.live()
        .filter(tenant_id=tenant_id, template__env__contains=[{"secretRef": {}}])
        .order_by("name")
        .values_list("name", "uid", "template")
    )
    for name, uid, template in units:
        for _, ref in validation.secret_refs(template):
            keys = found.setdefault(ref["name"], {}).setdefault((name, str(uid)), [])
            if ref["key"] not in keys:
                keys.append(ref["key"])
    return found


def referenced_by(secret: TenantSecret) -> list[str]:
    """Names of the tenant's live units whose environment reads the secret."""
    return [name for name, _uid in readers(tenant_id=secret.tenant_id).get(secret.name, {})]


def delete_secret(*, tenant: Tenant, name: str) -> None:
    """Delete the Secret and its row; 409 secret_in_use while a live unit reads it (its next
    start would fail). A Secret already gone is no error."""
    with transaction.atomic():
        tenancy_services.lock_tenant(tenant.pk)
        secret = get_secret(tenant=tenant, name=name)
        if units := referenced_by(secret):
            raise SecretInUse(
                f"secret {secret.name} is used by {', '.join(sorted(units))}: delete them or "
                "take it out of their template.env first.",
                details={"units": sorted(units)},
            )
        try:
            kube.delete(kube.SECRET, tenant.namespace, secret.object_name)
        except TemporaryError:
            raise ServiceUnavailable(
                "The cluster is unreachable; the secret was not deleted."
            ) from None
        secret.delete()


def check_references(*, tenant: Tenant, template: dict | None) -> None:
    """400 naming `template.env[i].secretRef` for each reference to a secret the tenant does
    not have, or to a key it does not hold: found at order time, not as a unit that never
    starts."""
    refs = validation.secret_refs(template)
    if not refs:
        return
    held = dict(
        TenantSecret.objects.filter(
            tenant=tenant, name__in={ref["name"] for _, ref in refs}
        ).values_list("name", "keys")
    )
    problems: dict[str, list[str]] = {}
    for index, ref in refs:
        where = f"template.env[{index}].secretRef"
        if ref["name"] not in held:
            problems[f"{where}.name"] = [f"no secret named {ref['name']} (see /secrets)."]
        elif ref["key"] not in held[ref["name"]]:
            problems[f"{where}.key"] = [f"secret {ref['name']} has no key {ref['key']}."]
    if problems:
        raise InvalidRequest(
            "The unit references secrets it cannot read.", details={"fields": problems}
        )


def check_cluster(*, template: dict | None, cluster: str) -> None:
    """Secrets are written to the process's own cluster only: a unit placed in another cannot
    read one (400 naming template.env). Units that read secrets are placed there
    (orders.bound_to)."""
    if cluster != settings.CLUSTER_NAME and validation.secret_refs(template):
        message = (
            f"secrets live in cluster {settings.CLUSTER_NAME}; the unit runs in cluster "
            f"{cluster}: order a unit that reads them there."
        )
        raise InvalidRequest(
            "The unit cannot read secrets in its cluster.",
            details={"fields": {"template.env": [message]}},
        )

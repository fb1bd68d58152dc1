"""Tenant, API key and dashboard user writes, and the tenant's usage counters: `charge`,
`refund` and `set_usage` are their only writers outside the order statement itself
(runtime/orders.py charges an order in the same SQL that inserts it). Every writer holds the
tenant's lock (`lock_tenant`) for its transaction."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from controlplane.errors import InvalidRequest, NotFound
from controlplane.validation import dns_label, fold_case
from dracel import quantity
from tenancy import sshkeys
from tenancy.errors import BudgetExceeded, LimitExceeded, QuotaExceeded, SSHKeyConflict
from tenancy.models import API_KEY_NAME_MAX, ApiKey, BudgetMode, SSHKey, Tenant
from tenancy.quota_words import quota_refusal
from tenancy.selectors import TenantUsage

KEY_PREFIX = "gcp"


def hash_key(key: str) -> str:
    # Keys are 256-bit random secrets, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(*, tenant: Tenant, name: str = "", capped: bool = False) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is never stored and never shown again.
    `capped` (a customer's own request) refuses past API_KEYS_PER_TENANT active keys; ops
    minting a key for a tenant are not held to it."""
    name = name.strip()
    if len(name) > API_KEY_NAME_MAX:
        raise InvalidRequest(
            "The API key is invalid.",
            details={"fields": {"name": [f"At most {API_KEY_NAME_MAX} characters."]}},
        )
    if capped:
        with transaction.atomic():
            lock_tenant(tenant.pk)
            held = ApiKey.objects.filter(tenant=tenant, revoked_at__isnull=True).count()
            if held >= settings.API_KEYS_PER_TENANT:
                raise LimitExceeded(
                    f"tenant {tenant.slug} has {held} active API keys, the most it may have "
                    f"({settings.API_KEYS_PER_TENANT}); revoke one first.",
                    details={
                        "limit": "apiKeys",
                        "used": held,
                        "hard": settings.API_KEYS_PER_TENANT,
                    },
                )
            return _new_api_key(tenant, name)
    return _new_api_key(tenant, name)


def _new_api_key(tenant: Tenant, name: str) -> tuple[ApiKey, str]:
    prefix = secrets.token_hex(6)
    key = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    api_key = ApiKey(tenant=tenant, name=name, prefix=prefix, key_hash=hash_key(key))
    api_key.full_clean()
    api_key.save()
    return api_key, key


def revoke_api_key(*, api_key: ApiKey) -> None:
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


def revoke_tenant_key(*, tenant: Tenant, prefix: str) -> ApiKey:
    """Revoke the tenant's active key with this prefix: it stops working at once (404 if the
    tenant has no such active key)."""
    api_key = ApiKey.objects.filter(tenant=tenant, prefix=prefix, revoked_at__isnull=True).first()
    if api_key is None:
        raise NotFound(f"API key {prefix} not found.")
    revoke_api_key(api_key=api_key)
    return api_key


def note_api_key_used(*, api_key: ApiKey) -> None:
    """Stamp the key's last use (a hint for ops, written at most once a minute by callers)."""
    now = timezone.now()
    ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
    api_key.last_used_at = now


@transaction.atomic
def lock_tenant(tenant_pk: int) -> TenantUsage:
    """Lock the tenant's row for the rest of the transaction (the order of locks: the tenant,
    then its units) and read its usage counters under it. FOR NO KEY UPDATE: it serialises
    with every other writer of the counters (and with the orders' FOR UPDATE) but not with the
    KEY SHARE an INSERT referencing the tenant takes, so a request that holds a unit's row and
    records an operation for it (stop, restart, delete) cannot deadlock against a start or a
    termination holding the tenant and waiting for that unit."""
    return TenantUsage(
        *Tenant.objects.select_for_update(no_key=True)
        .filter(pk=tenant_pk)
        .values_list("used_cpu_millicores", "used_memory_bytes", "used_claims")
        .get()
    )


def charge(
    *, tenant_pk: int, cpu_millicores: int = 0, memory_bytes: int = 0, claims: int = 0
) -> None:
    """Add to what the tenant's units hold against its quota (a start charges its unit's CPU
    and memory again). The caller holds the tenant's lock, and has checked the quota under it."""
    Tenant.objects.filter(pk=tenant_pk).update(
        used_cpu_millicores=F("used_cpu_millicores") + cpu_millicores,
        used_memory_bytes=F("used_memory_bytes") + memory_bytes,
        used_claims=F("used_claims") + claims,
    )


def refund(
    *, tenant_pk: int, cpu_millicores: int = 0, memory_bytes: int = 0, claims: int = 0
) -> None:
    """Give back what a unit held (a stop its CPU and memory; a termination its claim too).
    The caller holds the tenant's lock."""
    charge(
        tenant_pk=tenant_pk,
        cpu_millicores=-cpu_millicores,
        memory_bytes=-memory_bytes,
        claims=-claims,
    )


def quota_problem(
    tenant: Tenant,
    usage: TenantUsage,
    *,
    cpu_millicores: int,
    memory_bytes: int,
    claims: int = 1,
    starting: str = "",
) -> QuotaExceeded | None:
    """Why the tenant's live units plus a new one (or the stopped unit `starting` started
    again, which already holds its claim: `claims=0`) do not fit its quota (checked under the
    tenant lock), or None when they do."""
    limits: list[tuple[str, int, int, int, Callable[[int], str]]] = [
        (
            "requests.cpu",
            usage.cpu_millicores,
            cpu_millicores,
            tenant.quota_cpu_millicores,
            quantity.format_cpu,
        ),
        (
            "requests.memory",
            usage.memory_bytes,
            memory_bytes,
            tenant.quota_memory_bytes,
            quantity.format_bytes,
        ),
        ("count/resourceclaims.resource.k8s.io", usage.claims, claims, tenant.quota_claims, str),
    ]
    for limit, used, requested, hard, show in limits:
        if requested and used + requested > hard:
            return quota_exceeded(
                tenant,
                limit,
                used=show(used),
                requested=show(requested),
                hard=show(hard),
                larger=requested > hard,
                starting=starting,
            )
    return None


def quota_exceeded(
    tenant: Tenant,
    limit: str,
    *,
    used: str,
    requested: str,
    hard: str,
    larger: bool,
    starting: str = "",
) -> QuotaExceeded:
    """The refusal of a request over the tenant's quota for `limit`, in the one wording
    customers see (API and dashboard: tenancy.quota_words), with what to do next. `larger`:
    the request alone is over the whole quota, so deleting units never helps; a smaller
    package does. `starting`: the unit a refused start was for."""
    details = {
        "limit": limit,
        "used": used,
        "requested": requested,
        "hard": hard,
        "largerThanQuota": larger,
    }
    asked = "start" if starting else "package"
    return QuotaExceeded(quota_refusal(details, asked=asked, unit=starting), details=details)


def set_usage(*, tenant_pk: int, usage: TenantUsage) -> None:
    """Set the counters to a recount of the tenant's live units (under the tenant's lock)."""
    Tenant.objects.filter(pk=tenant_pk).update(
        used_cpu_millicores=usage.cpu_millicores,
        used_memory_bytes=usage.memory_bytes,
        used_claims=usage.claims,
    )


def create_tenant(
    *,
    slug: str,
    namespace: str,
    display_name: str = "",
    quota_cpu: str = "160",
    quota_memory: str = "256Gi",
    quota_claims: int = 64,
    quota_storage: str = "1Ti",
    quota_storages: int = 16,
    quota_ephemeral_storage: str = "1Ti",
    quota_devices: dict[str, int] | None = None,
    is_operator: bool = False,
) -> Tenant:
    tenant = Tenant(
        slug=slug,
        namespace=namespace,
        display_name=display_name,
        quota_cpu=quota_cpu,
        quota_memory=quota_memory,
        quota_claims=quota_claims,
        quota_storage=quota_storage,
        quota_storages=quota_storages,
        quota_ephemeral_storage=quota_ephemeral_storage,
        quota_devices=quota_devices or {},
        is_operator=is_operator,
    )
    tenant.full_clean()
    tenant.save()
    return tenant


@transaction.atomic
def ensure_tenant_user(
    *, tenant: Tenant, username: str, password: str = ""
) -> tuple[AbstractBaseUser, str | None]:
    """The dashboard user `username`, acting for `tenant`: created when missing (with
    `password`, or a random one) and returned with the password it got, or with None when it
    already existed (its password is left alone)."""
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    created_with = None
    if user is None:
        created_with = password or secrets.token_urlsafe(12)
        user = user_model.objects.create_user(username=username, password=created_with)
    tenant.users.add(user)
    return user, created_with


# Called with (tenant, key name) in the transaction that removes a key: the runtime registers
# taking it off the units that use it (runtime.apps), since tenancy cannot import the runtime.
SSH_KEY_REMOVED: list[Callable[[Tenant, str], None]] = []


def add_ssh_key(*, tenant: Tenant, name: str, public_key: str) -> SSHKey:
    """Register a public key under `name`; 400 naming the field, 409 for a name or key the
    tenant already has."""
    name = fold_case(name.strip())
    problems: dict[str, list[str]] = {}
    if name_problem := dns_label(name):
        problems["name"] = [name_problem]
    try:
        parsed = sshkeys.parse(public_key)
    except sshkeys.KeyRefused as exc:
        problems["publicKey"] = [str(exc)]
    if problems:
        raise InvalidRequest("The SSH key is invalid.", details={"fields": problems})
    taken = SSHKey.objects.filter(tenant=tenant)
    try:
        with transaction.atomic():
            # The count under the tenant lock: parallel adds cannot pass the cap together.
            lock_tenant(tenant.pk)
            if (held := taken.count()) >= settings.SSH_KEYS_PER_TENANT:
                raise LimitExceeded(
                    f"tenant {tenant.slug} has {held} SSH keys, the most it may register "
                    f"({settings.SSH_KEYS_PER_TENANT}); delete one first.",
                    details={
                        "limit": "sshKeys",
                        "used": held,
                        "hard": settings.SSH_KEYS_PER_TENANT,
                    },
                )
            if taken.filter(name=name).exists():
                raise SSHKeyConflict(f"an SSH key named {name} exists.", details={"name": name})
            same = taken.filter(fingerprint=parsed.fingerprint).first()
            if same is not None:
                raise SSHKeyConflict(
                    f"this key is already registered as {same.name}.",
                    details={"name": same.name, "fingerprint": parsed.fingerprint},
                )
            return SSHKey.objects.create(
                tenant=tenant,
                name=name,
                kind=parsed.kind,
                bits=parsed.bits,
                public_key=parsed.openssh,
                comment=parsed.comment,
                fingerprint=parsed.fingerprint,
            )
    except IntegrityError:  # the same name or key, registered by a request in between
        raise SSHKeyConflict(
            f"an SSH key named {name}, or this key, exists.", details={"name": name}
        ) from None


def remove_ssh_key(*, tenant: Tenant, name: str) -> None:
    """Remove the key (404 if there is none) and take it off every unit that uses it."""
    name = fold_case(name.strip())
    with transaction.atomic():
        deleted, _ = SSHKey.objects.filter(tenant=tenant, name=name).delete()
        if not deleted:
            raise NotFound(f"SSH key {name} not found.")
        # In the same transaction: the key is never gone while a unit still names it.
        for listener in SSH_KEY_REMOVED:
            listener(tenant, name)


def check_budget(tenant: Tenant) -> None:
    """Refuse to start spending (an order, a start) once the tenant's enforced budget for the
    month is spent (billing.budgets marks the moment; the tenant row is read anyway)."""
    if tenant.budget_mode == BudgetMode.ENFORCE and tenant.budget_exceeded_at is not None:
        raise BudgetExceeded(
            f"The monthly budget of {tenant.monthly_budget} is spent (since "
            f"{tenant.budget_exceeded_at:%Y-%m-%d %H:%M:%S} UTC): no new order or start until "
            "it is raised or the month ends.",
            details={"budgetExceededAt": tenant.budget_exceeded_at.isoformat()},
        )

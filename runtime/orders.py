"""Orders: a customer's create request becomes a unit, its operation and first timeline entry.

This is the one module with hand-written SQL (ARCHITECTURE §4): the create path and the API key
lookup every request makes cost twice as much through the ORM's query building as their
database work (docs/benchmarks.md). The statements still speak in models: column lists come from
the models' field metadata, rows come back as model instances, new rows pass `clean_fields()`,
and `check_order_models` (a Django system check) refuses model features the statements cannot
carry, so a field added to a model either reaches these statements or stops `manage.py check`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache
from typing import Any, TypeVar

import psycopg
from django.conf import settings
from django.core import checks
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, models, transaction
from django.db.backends.utils import CursorWrapper
from django.db.models.signals import post_save, pre_save
from django.utils import timezone

from catalog.models import Package
from controlplane.validation import dns_label
from dracel import quantity
from runtime import manifests, outbox, selectors, stopafter
from runtime.errors import InvalidRequest, NameConflict, QuotaExceeded, StorageInUse
from runtime.models import (
    EventType,
    GPUStorage,
    GPUUnit,
    Operation,
    OperationKind,
    StoragePhase,
    UnitEvent,
    UnitPhase,
)
from tenancy.models import ApiKey, SSHKey, Tenant
from tenancy.selectors import TenantUsage

M = TypeVar("M", bound=models.Model)

# Models whose new rows the order statement writes: what Model.save() would do for them beyond
# INSERTing their fields' values (database defaults, generated columns, signals) never happens.
WRITTEN_MODELS: tuple[type[models.Model], ...] = (GPUUnit, Operation, UnitEvent)


@dataclass(frozen=True)
class CreateResult:
    unit: GPUUnit
    created: bool


def create_unit(
    *,
    tenant: Tenant,
    operation_id: str,
    name: str,
    package_id: str,
    image: str,
    template: dict | None = None,
    access: dict | None = None,
    storage_mounts: list[dict] | None = None,
    ssh: dict | None = None,
    stop_after: str | None = None,
) -> CreateResult:
    """Record a new unit and its create operation, or return the unit an earlier identical
    request created (same operationID and payload; a different payload is a conflict).
    Provisioning is queued after commit. Nothing is written when the order is refused."""
    template = template or {}
    access = access or {}
    request: dict[str, Any] = {
        "operationID": operation_id,
        "name": name,
        "packageID": package_id,
        "image": image,
        "template": template,
    }
    # Only when given: the fingerprints of earlier orders stay what they were.
    if access:
        request["access"] = access
    storage_mounts = storage_mounts or []
    if storage_mounts:
        request["storageMounts"] = storage_mounts
    ssh = ssh or {}
    if ssh:
        request["ssh"] = ssh
    if stop_after:
        request["stopAfter"] = stop_after
    request_hash = outbox.fingerprint(request)
    earlier, package = _lookup(tenant, operation_id, package_id)
    if earlier is not None:
        return _replayed(earlier, request_hash)
    if package is None:
        raise InvalidRequest(
            f'packageID "{package_id}" is not offered.',
            details={"fields": {"packageID": ["Unknown or inactive package."]}},
        )
    if ssh:
        ssh = {"enabled": True, "keys": ssh_key_names(tenant, ssh.get("keys"))}
    now = timezone.now()
    unit = GPUUnit(
        tenant=tenant,
        name=name,
        namespace=tenant.namespace,
        operation_id=operation_id,
        image=image,
        template=template,
        access=access,
        storage_mounts=storage_mounts,
        ssh=ssh,
        stop_after=stopafter.effective_stop_after(
            tenant, package.id, stop_after, package_max=package.max_stop_after
        ),
        started_at=now,
        **GPUUnit.contract_fields(package, name=name),
    )
    unit.stops_at = stopafter.stops_at(unit)
    operation = Operation(
        tenant=tenant,
        operation_id=operation_id,
        kind=OperationKind.CREATE,
        fingerprint=request_hash,
    )
    # A new unit has no timeline yet, so nothing to bump: its first entry is appended directly.
    event = UnitEvent(
        type=EventType.NORMAL, reason="Accepted", message=f"Ordered package {package.id}."
    )
    try:
        # Foreign keys are not checked here (that would cost a query each): the tenant row is
        # locked below and the unit is written by the same statement.
        unit.clean_fields(exclude=["tenant"])
        operation.clean_fields(exclude=["tenant", "unit"])
        event.clean_fields(exclude=["unit"])
    except ValidationError as exc:
        raise InvalidRequest(
            "The order does not fit the unit's fields.", details={"fields": exc.message_dict}
        ) from exc
    params: dict[str, Any] = {
        "unit": _row_json(unit),
        "operation": _row_json(operation, skip=("unit",)),
        "event": _row_json(event, skip=("unit",)),
        "cpu": unit.cpu_millicores,
        "memory": unit.memory_bytes,
        "tenant": tenant.pk,
    }
    try:
        with transaction.atomic(), cursor() as sql:
            # Serialise orders per tenant: each sees the usage the one before it charged.
            sql.execute(
                "SELECT used_cpu_millicores, used_memory_bytes, used_claims "
                f"FROM {_table(Tenant)} WHERE id = %s FOR UPDATE",
                [tenant.pk],
            )
            usage = TenantUsage(*sql.fetchone())
            if problem := quota_problem(
                tenant, usage, cpu_millicores=unit.cpu_millicores, memory_bytes=unit.memory_bytes
            ):
                raise problem
            if problem := device_quota_problem(tenant, unit.device_class_name, unit.count):
                raise problem
            if storage_mounts:  # under the tenant lock: two orders cannot take one storage
                check_storage_mounts(tenant, storage_mounts)
            sql.execute(_order_sql(), params)
            unit_pk, operation_pk = sql.fetchone()
            _saved(unit, unit_pk)
            operation.unit = unit
            _saved(operation, operation_pk)
            transaction.on_commit(lambda: outbox.enqueue(operation))
    except (IntegrityError, QuotaExceeded) as exc:
        # An identical request that committed first (its operationID, or its unit's name, is
        # taken now) is a replay; the name being taken comes before a full quota.
        replay = selectors.get_operation(tenant=tenant, operation_id=operation_id)
        if replay is not None:
            return _replayed(replay, request_hash)
        if isinstance(exc, IntegrityError) or selectors.name_in_use(tenant=tenant, name=name):
            raise NameConflict(
                f"gpu unit name {tenant.namespace}/{name} is already in use.",
                details={"name": name},
            ) from None
        raise
    return CreateResult(unit=unit, created=True)


def _replayed(operation: Operation, request_hash: str) -> CreateResult:
    """The unit of an earlier identical request; a different request under the same
    operationID is a conflict."""
    outbox.check_replay(operation, kind=OperationKind.CREATE, request_hash=request_hash)
    return CreateResult(unit=operation.unit, created=False)


def quota_problem(
    tenant: Tenant, usage: TenantUsage, *, cpu_millicores: int, memory_bytes: int, claims: int = 1
) -> QuotaExceeded | None:
    """Why the tenant's live units plus a new one (or a stopped one started again, which
    already holds its claim: `claims=0`) do not fit its quota (checked under the tenant
    lock), or None when they do."""
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
            # Larger than the whole quota: deleting units never helps, a smaller package does.
            never = requested > hard
            return QuotaExceeded(
                f"the package is larger than tenant {tenant.slug}'s quota for {limit}: "
                f"requested={show(requested)} hard={show(hard)}"
                if never
                else f"tenant {tenant.slug} quota would be exceeded for {limit}: "
                f"used={show(used)} requested={show(requested)} hard={show(hard)}",
                details={
                    "limit": limit,
                    "used": show(used),
                    "requested": show(requested),
                    "hard": show(hard),
                    "largerThanQuota": never,
                },
            )
    return None


def device_quota_problem(tenant: Tenant, device_class: str, count: int) -> QuotaExceeded | None:
    """Why `count` more devices of `device_class` do not fit the tenant's device quota for
    that class (checked under the tenant lock), or None. Every live unit's claim counts, a
    stopped one's too, as the ResourceQuota counts claims. No query for a class without one."""
    hard = (tenant.quota_devices or {}).get(device_class)
    if hard is None:
        return None
    used = selectors.devices_requested(tenant=tenant, device_class=device_class)
    if used + count <= hard:
        return None
    limit = f"{device_class}{manifests.DEVICE_QUOTA_SUFFIX}"
    never = count > hard
    return QuotaExceeded(
        f"the package is larger than tenant {tenant.slug}'s quota for {limit}: "
        f"requested={count} hard={hard}"
        if never
        else f"tenant {tenant.slug} quota would be exceeded for {limit}: "
        f"used={used} requested={count} hard={hard}",
        details={
            "limit": limit,
            "used": str(used),
            "requested": str(count),
            "hard": str(hard),
            "largerThanQuota": never,
        },
    )


def find_api_key(prefix: str) -> ApiKey | None:
    """The API key with this prefix and its tenant, in one statement (registered as
    tenancy.auth's key lookup: every API request makes it)."""
    with cursor() as sql:
        sql.execute(
            f"SELECT {_select_list(ApiKey, 'k')}, {_select_list(Tenant, 't')} "
            f"FROM {_table(ApiKey)} k JOIN {_table(Tenant)} t ON t.id = k.tenant_id "
            "WHERE k.prefix = %s",
            [prefix],
        )
        row = sql.fetchone()
    if row is None:
        return None
    api_key = _from_row(ApiKey, row)
    assert api_key is not None  # an inner join: the key's columns are there
    api_key.tenant = _from_row(Tenant, row, _width(ApiKey))  # type: ignore[assignment]
    return api_key


def _lookup(
    tenant: Tenant, operation_id: str, package_id: str
) -> tuple[Operation | None, Package | None]:
    """The operation already recorded under this operationID and the active package, in one
    statement (the create path's only one before the tenant lock)."""
    if dns_label(package_id):
        package_id = ""  # cannot be a package: matches nothing
    with cursor() as sql:
        sql.execute(
            f"SELECT {_select_list(Operation, 'o')}, {_select_list(Package, 'p')} "
            "FROM (VALUES (1)) AS one (x) "
            f"LEFT JOIN {_table(Operation)} o ON o.tenant_id = %s AND o.operation_id = %s "
            f"LEFT JOIN {_table(Package)} p ON p.id = %s AND p.active",
            [tenant.pk, operation_id, package_id],
        )
        row = sql.fetchone()
    return _from_row(Operation, row), _from_row(Package, row, _width(Operation))


@cache
def _order_sql() -> str:
    """The order itself, one statement run under the tenant row lock once the quota check
    passed: the unit, its operation and first timeline entry, and the tenant charged for it.
    Each row travels as one JSON parameter, so the text never changes and the server reuses
    its plan. A name or operationID taken meanwhile ends in a unique violation, and nothing is
    written."""
    unit = _insert_columns(GPUUnit)
    operation = _insert_columns(Operation, skip=("unit",))
    event = _insert_columns(UnitEvent, skip=("unit",))
    return f"""
WITH new_unit AS (
    INSERT INTO {_table(GPUUnit)} ({unit})
    SELECT {unit} FROM jsonb_populate_record(NULL::{_table(GPUUnit)}, %(unit)s::jsonb)
    RETURNING id
), new_operation AS (
    INSERT INTO {_table(Operation)} ({operation}, unit_id)
    SELECT {operation}, new_unit.id
    FROM jsonb_populate_record(NULL::{_table(Operation)}, %(operation)s::jsonb), new_unit
    RETURNING id
), new_event AS (
    INSERT INTO {_table(UnitEvent)} ({event}, unit_id)
    SELECT {event}, new_unit.id
    FROM jsonb_populate_record(NULL::{_table(UnitEvent)}, %(event)s::jsonb), new_unit
), charge AS (
    UPDATE {_table(Tenant)}
    SET used_cpu_millicores = used_cpu_millicores + %(cpu)s,
        used_memory_bytes = used_memory_bytes + %(memory)s,
        used_claims = used_claims + 1
    WHERE id = %(tenant)s
)
SELECT new_unit.id, new_operation.id FROM new_unit, new_operation
"""


# --- the statements' machinery -----------------------------------------------------------


class _Preparing:
    """A psycopg cursor (server-side binding) that prepares each statement it runs: the server
    parses and plans it once per connection, then only binds and executes it."""

    def __init__(self, raw: psycopg.Cursor) -> None:
        self._cursor = raw

    def execute(self, query: str, params: Any = None) -> psycopg.Cursor:
        return self._cursor.execute(query, params, prepare=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


@contextlib.contextmanager
def cursor() -> Iterator[CursorWrapper]:
    """The cursor of these statements: prepared ones (about half their database CPU, measured
    in docs/benchmarks.md) unless settings.DB_PREPARED_STATEMENTS is off or Django logs
    queries (DEBUG: its log shows the SQL of its own cursors only). Wrapped like any Django
    cursor, so execute_wrapper (which the statement-count tests use) and the translation of
    database errors (IntegrityError, ...) apply."""
    if not settings.DB_PREPARED_STATEMENTS or connection.queries_logged:
        with connection.cursor() as plain:
            yield plain
        return
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = psycopg.Cursor(connection.connection)
    try:
        # make_cursor wraps any DB-API cursor; _Preparing is one that prepares what it runs.
        yield connection.make_cursor(_Preparing(raw))  # type: ignore[arg-type]
    finally:
        raw.close()


@cache
def _fields(model: type[models.Model]) -> tuple[models.Field, ...]:
    return tuple(model._meta.concrete_fields)


def _table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _column(field: models.Field) -> str:
    assert field.column is not None  # concrete fields have one
    return connection.ops.quote_name(field.column)


@cache
def _select_list(model: type[models.Model], alias: str) -> str:
    """`alias.col, alias.col, ...` for every concrete field, in the order `_from_row` reads."""
    return ", ".join(f"{alias}.{_column(field)}" for field in _fields(model))


def _width(model: type[models.Model]) -> int:
    return len(_fields(model))


@cache
def _readers(model: type[models.Model]) -> tuple[int, tuple[tuple, ...], list[str]]:
    """Where the primary key sits in a row, each field's converters (what the ORM applies after
    a SELECT: JSON decoding, for instance) and the attribute names: looked up once per model."""
    fields = _fields(model)
    return (
        fields.index(model._meta.pk),
        tuple(tuple(field.get_db_converters(connection)) for field in fields),
        [field.attname for field in fields],
    )


def _from_row(model: type[M], row: Sequence[Any], start: int = 0) -> M | None:
    """The instance whose columns (as `_select_list` lists them) start at `row[start]`, or None
    when its primary key is NULL (an outer join found nothing)."""
    pk_index, converters, attnames = _readers(model)
    values = row[start : start + len(attnames)]
    if values[pk_index] is None:
        return None
    converted = []
    for field, value, field_converters in zip(_fields(model), values, converters, strict=True):
        for converter in field_converters:
            value = converter(value, field, connection)
        converted.append(value)
    return model.from_db(connection.alias, attnames, converted)


@cache
def _insert_fields(model: type[models.Model], skip: tuple[str, ...]) -> tuple[models.Field, ...]:
    return tuple(
        field for field in _fields(model) if not field.primary_key and field.name not in skip
    )


@cache
def _insert_columns(model: type[models.Model], skip: tuple[str, ...] = ()) -> str:
    """The quoted columns a new row is written with: every concrete field but the primary key
    (the database numbers rows) and the fields named in `skip`."""
    return ", ".join(_column(field) for field in _insert_fields(model, skip))


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()  # full precision, unlike DjangoJSONEncoder
    return str(value)  # UUID, Decimal


def _row_json(instance: models.Model, skip: tuple[str, ...] = ()) -> str:
    """A new instance as one JSON object `{column: value}` holding what `instance.save()`
    would INSERT (auto_now/auto_now_add are filled in on the instance), for
    `jsonb_populate_record(NULL::<table>, %s::jsonb)`."""
    return json.dumps(
        {
            field.column: field.pre_save(instance, add=True)
            for field in _insert_fields(type(instance), skip)
        },
        default=_json_value,
        ensure_ascii=False,
    )


def _saved(instance: M, pk: Any) -> M:
    """Mark an instance written by these statements as saved, with its new primary key."""
    instance.pk = pk
    instance._state.adding = False
    instance._state.db = connection.alias
    return instance


def check_order_models(
    app_configs: Any = None,
    *,
    written: Sequence[type[models.Model]] = WRITTEN_MODELS,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    """System check: the models the order writes have nothing the statement would skip."""
    errors: list[checks.CheckMessage] = []
    for model in written:
        label = model._meta.label
        for field in model._meta.concrete_fields:
            if isinstance(field, models.GeneratedField):
                errors.append(
                    checks.Error(
                        f"{label}.{field.name} is a GeneratedField; runtime/orders.py writes "
                        f"{label} rows by hand and cannot leave generated columns out.",
                        obj=field,
                        id="runtime.E001",
                    )
                )
            elif field.has_db_default():
                errors.append(
                    checks.Error(
                        f"{label}.{field.name} has a db_default; runtime/orders.py writes {label} "
                        "rows by hand and would store the expression object instead. Use a "
                        "Python default.",
                        obj=field,
                        id="runtime.E002",
                    )
                )
        for signal, signal_name in ((pre_save, "pre_save"), (post_save, "post_save")):
            if signal.has_listeners(model):
                errors.append(
                    checks.Error(
                        f"{label} has {signal_name} receivers; runtime/orders.py writes {label} "
                        "rows by hand and never sends the signal. Do the work in the service "
                        "instead.",
                        obj=model,
                        id="runtime.E003",
                    )
                )
    return errors


def check_storage_mounts(
    tenant: Tenant, mounts: list[dict], *, exclude: GPUUnit | None = None
) -> None:
    """Every mounted storage is the tenant's and usable, and none that only one live unit
    may mount is mounted by another (than `exclude`, the unit being updated): 400 naming the
    mount, 409 `storage_in_use`."""
    names = [mount["name"] for mount in mounts]
    found = {s.name: s for s in GPUStorage.objects.filter(tenant=tenant, name__in=names)}
    problems = {}
    for index, name in enumerate(names):
        storage = found.get(name)
        if storage is None:
            problems[f"storageMounts[{index}].name"] = [f"the tenant has no storage {name}."]
        elif storage.phase in (StoragePhase.TERMINATING, StoragePhase.FAILED):
            problems[f"storageMounts[{index}].name"] = [
                f"storage {name} is {storage.phase.lower()}: {storage.message}"
            ]
    if problems:
        raise InvalidRequest("A storage mount is invalid.", details={"fields": problems})
    for name in names:
        if not found[name].exclusive:
            continue
        others = GPUUnit.objects.filter(
            tenant=tenant, storage_mounts__contains=[{"name": name}]
        ).exclude(phase=UnitPhase.TERMINATED)
        if exclude is not None:
            others = others.exclude(pk=exclude.pk)
        holders = list(others.values_list("name", flat=True))
        if holders:
            raise StorageInUse(
                f"storage {name} ({found[name].access_mode}) is mounted by {holders[0]}: one "
                "live unit at a time.",
                details={"storage": name, "units": holders},
            )


def ssh_key_names(tenant: Tenant, wanted: list[str] | None) -> list[str]:
    """The tenant's SSH keys a unit gets: the named ones (each must exist), or all of them;
    400 when SSH is enabled and there is none to give."""
    keys = SSHKey.objects.filter(tenant=tenant).order_by("name")
    have = list(keys.values_list("name", flat=True))
    if wanted is None:
        if not have:
            raise InvalidRequest(
                "SSH is enabled but the tenant has no SSH key: register one (POST /ssh-keys).",
                details={"fields": {"ssh": ["the tenant has no SSH key."]}},
            )
        return have
    problems = {
        f"ssh.keys[{index}]": [f"the tenant has no SSH key {name}."]
        for index, name in enumerate(wanted)
        if name not in have
    }
    if problems:
        raise InvalidRequest("An SSH key is unknown.", details={"fields": problems})
    return list(wanted)

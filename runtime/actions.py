"""Stop, start, restart and update: the changes a customer (or auto-stop) asks of a unit that
exists (ARCHITECTURE §12). Each is an Operation recorded with the unit's new wishes in one
transaction under the unit's row lock, then carried out by a worker (provisioning.py) like a
create. A unit has one open operation at a time, deletions aside; the phase table below says
which phases each action starts from."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing import budgets
from controlplane.validation import fold_case
from runtime import lifecycle, orders, outbox, selectors, spec, stopafter, tenant_secrets
from runtime.errors import (
    InvalidRequest,
    InvalidState,
    NotFound,
    OperationInProgress,
    PreconditionFailed,
    PreconditionRequired,
)
from runtime.models import (
    GPUUnit,
    Operation,
    OperationKind,
    OperationStatus,
    RunPolicy,
    UnitPhase,
)
from tenancy import services as tenancy_services
from tenancy.models import Tenant

# The phases each action starts from (docs/api.md: "What you can do to a unit, by phase").
# Accepted units are still being created: their open create answers operation_in_progress.
ALLOWED_FROM: dict[str, frozenset[str]] = {
    OperationKind.STOP: frozenset(
        {UnitPhase.PROVISIONING, UnitPhase.PENDING, UnitPhase.RUNNING, UnitPhase.FAILED}
    ),
    OperationKind.START: UnitPhase.AT_REST,
    OperationKind.RESTART: frozenset(
        {UnitPhase.PROVISIONING, UnitPhase.PENDING, UnitPhase.RUNNING, UnitPhase.FAILED}
    ),
    OperationKind.UPDATE: frozenset(
        {
            UnitPhase.PROVISIONING,
            UnitPhase.PENDING,
            UnitPhase.RUNNING,
            UnitPhase.FAILED,
            *UnitPhase.AT_REST,
        }
    ),
}
_VERB: dict[str, str] = {
    OperationKind.STOP: "stop",
    OperationKind.START: "start",
    OperationKind.RESTART: "restart",
    OperationKind.UPDATE: "update",
}
# Fields of the unit an update may change (the rest is the package contract).
UPDATABLE = ("image", "template", "access", "ssh", "storageMounts", "stopAfter")
# Changes the pod shows: they replace it. Access and stopAfter leave it running.
_POD_FIELDS = {"image", "template", "ssh", "storageMounts"}


@dataclass(frozen=True)
class ActionResult:
    operation: Operation
    unit: GPUUnit
    replayed: bool = False
    changed: bool = True  # False: an update that changed nothing (no new generation)


# ---------------------------------------------------------------------------------- actions


# `open_op` not looked up yet (None: looked up, and there is none).
_UNKNOWN: Any = object()


def _check_actionable(unit: GPUUnit, kind: str, open_op: Operation | None = _UNKNOWN) -> None:
    verb = _VERB[kind]
    if unit.phase in UnitPhase.ENDING:
        raise InvalidState(
            f"cannot {verb} gpu unit {unit.name}: it is {unit.phase}.",
            details={"phase": unit.phase, "allowedFrom": sorted(ALLOWED_FROM[kind])},
        )
    if open_op is _UNKNOWN:
        open_op = outbox.open_operation(unit)
    if open_op is not None:
        raise OperationInProgress(
            f"gpu unit {unit.name} has an open {open_op.kind} operation "
            f"({open_op.operation_id}); retry once it has finished.",
            details={"operationID": open_op.operation_id, "kind": open_op.kind},
        )
    if unit.phase not in ALLOWED_FROM[kind]:
        raise InvalidState(
            f"cannot {verb} gpu unit {unit.name}: it is {unit.phase}.",
            details={"phase": unit.phase, "allowedFrom": sorted(ALLOWED_FROM[kind])},
        )
    if not unit.unit_k8s_uid or unit.reason == "ObjectDeleted":
        raise InvalidState(
            f"cannot {verb} gpu unit {unit.name}: it has no objects in the cluster "
            f"({unit.reason or unit.phase}); delete it and order a new one.",
            details={"phase": unit.phase, "reason": unit.reason},
        )


def refusal(unit: GPUUnit, kind: str, *, open_op: Operation | None = _UNKNOWN) -> str | None:
    """Why `kind` would be refused for the unit now (None when it would be accepted): the
    same rules as the API, for pages that offer the action. `open_op`: the unit's open
    operation (None for none) when the caller has looked it up already."""
    try:
        _check_actionable(unit, kind, open_op)
    except (InvalidState, OperationInProgress) as exc:
        return exc.message
    return None


def _record(
    unit: GPUUnit, *, tenant: Tenant, kind: str, operation_id: str, request_hash: str
) -> Operation:
    operation = Operation.objects.create(
        tenant=tenant,
        operation_id=operation_id,
        kind=kind,
        request_hash=request_hash,
        unit=unit,
    )
    transaction.on_commit(lambda: outbox.enqueue(operation))
    return operation


def _replay(
    tenant: Tenant, operation_id: str, *, kind: str, request_hash: str
) -> ActionResult | None:
    earlier = selectors.get_operation(tenant=tenant, operation_id=operation_id)
    if earlier is None:
        return None
    outbox.check_replay(earlier, kind=kind, request_hash=request_hash)
    return ActionResult(operation=earlier, unit=earlier.unit, replayed=True)


def action_request_hash(kind: str, name: str, patch: dict | None = None) -> str:
    return outbox.request_hash({"kind": kind, "name": name, **({"patch": patch} if patch else {})})


def request_action(
    *,
    tenant: Tenant,
    name: str,
    kind: str,
    operation_id: str,
    reason: str = "",
    message: str = "",
    uid: str | None = None,
) -> ActionResult:
    """Stop, start or restart the tenant's unit `name` (with `uid`, only that one),
    idempotent by operationID."""
    request_hash = action_request_hash(kind, name)
    if (
        replayed := _replay(tenant, operation_id, kind=kind, request_hash=request_hash)
    ) is not None:
        return replayed
    try:
        with transaction.atomic():
            if kind == OperationKind.START:  # the tenant lock first, as orders take it
                tenancy_services.check_budget(tenant)
                usage = tenancy_services.lock_tenant(tenant.pk)
            unit = selectors.lock_unit(tenant=tenant, name=name, uid=uid)
            _check_actionable(unit, kind)
            operation = _record(
                unit, tenant=tenant, kind=kind, operation_id=operation_id, request_hash=request_hash
            )
            said = message or f"{_VERB[kind].capitalize()} requested (operation {operation_id})."
            if kind == OperationKind.STOP:
                lifecycle.transition_unit(
                    unit,
                    to=UnitPhase.STOPPING,
                    reason=reason or "StopRequested",
                    message=f"{said} Releasing its devices: billed until they are released.",
                    run_policy=RunPolicy.STOPPED,
                    generation=unit.generation + 1,
                    stops_at=None,
                )
            elif kind == OperationKind.START:
                if problem := tenancy_services.quota_problem(
                    tenant,
                    usage,
                    cpu_millicores=unit.cpu_millicores,
                    memory_bytes=unit.memory_bytes,
                    claims=0,  # a stopped unit still holds its claim
                    starting=unit.name,
                ):
                    raise problem
                tenancy_services.charge(
                    tenant_pk=tenant.pk,
                    cpu_millicores=unit.cpu_millicores,
                    memory_bytes=unit.memory_bytes,
                )
                unit.started_at = timezone.now()
                lifecycle.transition_unit(
                    unit,
                    to=UnitPhase.PROVISIONING,
                    reason="StartRequested",
                    message=f"{said} The pod is created again and devices allocated afresh.",
                    run_policy=RunPolicy.RUNNING,
                    generation=unit.generation + 1,
                    compute_charged=True,
                    started_at=unit.started_at,
                    stops_at=stopafter.stops_at(unit),
                    preemption={},
                )
            else:
                lifecycle.transition_unit(
                    unit,
                    to=UnitPhase.PROVISIONING,
                    reason="Restarting",
                    message=f"{said} The pod is replaced.",
                    generation=unit.generation + 1,
                    restarted_at=timezone.now(),
                )
    except IntegrityError:
        # The same operationID committed first by a concurrent request: a replay, or a conflict.
        replayed = _replay(tenant, operation_id, kind=kind, request_hash=request_hash)
        if replayed is None:
            raise
        return replayed
    return ActionResult(operation=operation, unit=unit)


# ---------------------------------------------------------------------------------- updates


def current_spec(unit: GPUUnit) -> dict:
    """What an update patches: the unit's changeable fields as the API shows them."""
    return {
        "image": unit.image,
        "template": unit.template or {},
        "access": unit.access or {},
        "ssh": unit.ssh or {},
        "storageMounts": unit.storage_mounts or [],
        "stopAfter": unit.stop_after,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON merge patch: objects merge key by key, null removes, the rest replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def changed_fields(before: dict, after: dict) -> list[str]:
    """The updatable fields that differ, by the paths the timeline names."""
    changed = []
    for key in UPDATABLE:
        old, new = before.get(key), after.get(key)
        if key == "template" and isinstance(old, dict) and isinstance(new, dict):
            changed += [
                f"template.{part}"
                for part in ("command", "args", "env", "ports")
                if old.get(part) != new.get(part)
            ]
        elif (old or None) != (new or None):
            changed.append(key)
    return changed


def check_update(*, unit: GPUUnit, patch: dict) -> dict:
    """The unit's changeable fields after `patch` (RFC 7396 merge), checked as an order checks
    them (runtime/spec.py), SSH key names resolved and stopAfter held to its maximums; raises
    InvalidRequest naming each problem by its API field path. What the patch leaves alone
    stays as it is, even where today's rules would refuse it (an SSH key list a removed key
    emptied is no reason to refuse a new image); image, template and access are checked
    together (access depends on the ports). Reads the tenant's keys and maximums, writes
    nothing."""
    current = current_spec(unit)
    merged = merge_patch(current, patch)
    kept = {key: current[key] for key in ("ssh", "storageMounts") if key not in patch}
    checker = spec.UnitSpecSerializer(data={k: v for k, v in merged.items() if k not in kept})
    valid = checker.is_valid()
    problems = {} if valid else {p: [str(m) for m in ms] for p, ms in checker.errors.items()}
    stop_after = ""
    if "stopAfter" not in problems:  # its maximums, judged with everything else
        try:
            stop_after = stopafter.effective_stop_after(
                unit.tenant,
                unit.package_id,
                checker.validated_data.get("stopAfter") if valid else merged.get("stopAfter"),
            )
        except InvalidRequest as error:
            if not problems:
                raise  # its own message and details (the maximum, who set it)
            problems |= error.details.get("fields") or {"stopAfter": [error.message]}
    if problems:
        raise InvalidRequest("The request is invalid.", details={"fields": problems})
    checked = {**checker.validated_data, **kept}
    if checked.get("ssh") and "ssh" in patch:
        checked["ssh"] = {
            "enabled": True,
            "keys": orders.ssh_key_names(unit.tenant, checked["ssh"].get("keys")),
        }
    return {
        "image": checked["image"],
        "template": checked.get("template") or {},
        "access": checked.get("access") or {},
        "ssh": checked.get("ssh") or {},
        "storageMounts": checked.get("storageMounts") or [],
        "stopAfter": stop_after,
    }


def _check_etag(unit: GPUUnit, if_match: str) -> None:
    if not if_match:
        raise PreconditionRequired(
            "An update needs If-Match with the unit's etag (GET the unit: its etag field "
            "and ETag header).",
            details={"etag": unit.etag},
        )
    if if_match not in ("*", unit.etag):
        raise PreconditionFailed(
            f"gpu unit {unit.name} has changed since {if_match} (now {unit.etag}); read it "
            "again and send its etag in If-Match.",
            details={"etag": unit.etag, "generation": unit.generation},
        )


def update_unit(
    *,
    tenant: Tenant,
    name: str,
    operation_id: str,
    patch: dict,
    if_match: str,
    uid: str | None = None,
) -> ActionResult:
    """The one update, for the API's PATCH and the dashboard's edit form alike. `patch` is a
    JSON merge patch of the unit's changeable fields as its sender wrote it (nulls clear).
    In order: an earlier same request under `operation_id` is a replay (before If-Match is
    even asked for; a different one is a conflict); `if_match` must name the unit's current
    etag (PreconditionRequired without one, PreconditionFailed when it moved on); the
    patched unit must pass `check_update`; then, under the tenant's and the unit's locks,
    the etag is checked again, the new generation recorded and its operation queued. An
    update that changes nothing succeeds at once with no new generation. One racing this
    call under the same operationID ends in the operationID's unique constraint and is
    answered as a replay."""
    if uid is not None:
        unit = GPUUnit.objects.filter(tenant=tenant, uid=uid).first()
    else:
        unit = selectors.get_unit(tenant=tenant, name=name)
    if unit is None:
        raise NotFound(f"gpu unit {fold_case(name.strip())} not found.")
    unit.tenant = tenant
    request_hash = action_request_hash(OperationKind.UPDATE, unit.name, patch)
    if replayed := _replay(
        tenant, operation_id, kind=OperationKind.UPDATE, request_hash=request_hash
    ):
        return replayed
    _check_etag(unit, if_match)
    wanted = check_update(unit=unit, patch=patch)
    try:
        with transaction.atomic():
            # Tenant lock first: storage mounts are checked against the other units under it.
            tenancy_services.lock_tenant(tenant.pk)
            if "template" in patch:  # under the lock a secret's deletion takes
                tenant_secrets.check_references(tenant=tenant, template=wanted.get("template"))
                tenant_secrets.check_cluster(template=wanted.get("template"), cluster=unit.cluster)
            locked = selectors.lock_unit(tenant=tenant, name=unit.name, uid=str(unit.uid))
            # The version the patch was merged on: a change committed since refuses it.
            _check_etag(locked, unit.etag)
            _check_actionable(locked, OperationKind.UPDATE)
            return _record_update(locked, wanted, operation_id, request_hash)
    except IntegrityError:
        replayed = _replay(
            tenant, operation_id, kind=OperationKind.UPDATE, request_hash=request_hash
        )
        if replayed is None:
            raise
        return replayed


def _record_update(
    unit: GPUUnit, wanted: dict, operation_id: str, request_hash: str
) -> ActionResult:
    changes = changed_fields(current_spec(unit), wanted)
    operation = Operation(
        tenant=unit.tenant,
        operation_id=operation_id,
        kind=OperationKind.UPDATE,
        request_hash=request_hash,
        unit=unit,
    )
    if not changes:
        operation.status = OperationStatus.SUCCEEDED
        operation.finished_at = timezone.now()
        operation.save()
        return ActionResult(operation=operation, unit=unit, changed=False)
    if "storageMounts" in changes and wanted["storageMounts"]:
        orders.check_storage_mounts(
            unit.tenant, wanted["storageMounts"], cluster=unit.cluster, exclude=unit
        )
    orders.check_exposure(unit.tenant, wanted, before=unit)
    fields: dict[str, Any] = {
        "image": wanted["image"],
        "template": wanted["template"],
        "access": wanted["access"],
        "storage_mounts": wanted["storageMounts"],
        "ssh": wanted["ssh"],
        "stop_after": wanted["stopAfter"],
        "generation": unit.generation + 1,
    }
    for field, value in fields.items():
        setattr(unit, field, value)
    unit.stops_at = stopafter.stops_at(unit) if unit.run_policy == RunPolicy.RUNNING else None
    fields["stops_at"] = unit.stops_at
    GPUUnit.objects.filter(pk=unit.pk).update(**fields, updated_at=timezone.now())
    operation.save()
    transaction.on_commit(lambda: outbox.enqueue(operation))
    replaces_pod = unit.run_policy == RunPolicy.RUNNING and bool(
        _POD_FIELDS & {change.split(".")[0] for change in changes}
    )
    message = (
        f"Update {operation_id} to generation {unit.generation} changes {', '.join(changes)}"
        + ("; the pod is replaced, the claim kept." if replaces_pod else ".")
    )
    if replaces_pod:
        lifecycle.transition_unit(
            unit, to=UnitPhase.PROVISIONING, reason="Updating", message=message
        )
    else:
        lifecycle.record_event(unit, reason="UpdateRequested", message=message)
    return ActionResult(operation=operation, unit=unit)


# ---------------------------------------------------------------------------------- auto-stop


def stop_expired_units(*, limit: int = 500) -> int:
    """Stop the units whose stopAfter has run out (beat); returns how many stops it asked
    for. A unit with another operation open is stopped on a later pass."""
    now = timezone.now()
    stopped = 0
    for unit in selectors.list_units_past_stop(now=now, limit=limit):
        try:
            request_action(
                tenant=unit.tenant,
                name=unit.name,
                kind=OperationKind.STOP,
                operation_id=outbox.auto_stop_operation_id(unit),
                reason="AutoStop",
                message=f"Stopped by the control plane: stopAfter {unit.stop_after} ran out at "
                f"{unit.stops_at:%Y-%m-%d %H:%M:%S} UTC.",
            )
        except (InvalidState, OperationInProgress):
            continue
        stopped += 1
    return stopped + stop_idle_units(now=now, limit=limit)


def stop_idle_units(*, now: datetime, limit: int = 500) -> int:
    """Stop the units whose pods have held their devices START_DEADLINE_SECONDS without a
    container started (beat, with the auto-stops): the devices go back to the pool, and as no
    container started nothing was billed. The timeline says what the cluster said."""
    deadline = timedelta(seconds=settings.START_DEADLINE_SECONDS)
    stopped = 0
    for unit in selectors.list_units_idle_since(before=now - deadline, limit=limit):
        assert unit.idle_hold_since is not None
        try:
            request_action(
                tenant=unit.tenant,
                name=unit.name,
                uid=str(unit.uid),
                kind=OperationKind.STOP,
                operation_id=outbox.start_deadline_operation_id(unit),
                reason=lifecycle.START_DEADLINE_EXCEEDED,
                message=f"Stopped by the control plane: its pod has held its devices since "
                f"{unit.idle_hold_since:%Y-%m-%d %H:%M:%S} UTC ({_duration(deadline)}) without "
                f"starting a container ({unit.reason}: {unit.message}). Nothing was billed.",
            )
        except (InvalidState, OperationInProgress):
            continue
        stopped += 1
    return stopped


def _duration(delta: timedelta) -> str:
    minutes, seconds = divmod(int(delta.total_seconds()), 60)
    return f"{minutes}m{seconds}s" if minutes else f"{seconds}s"


# ---------------------------------------------------------------------------------- budgets


def enforce_budgets() -> int:
    """Beat's budget pass (billing.budgets.check_budgets records alerts and marks spent
    budgets): a tenant whose enforced budget is spent has its running units told when they
    stop, and stopped once its grace has passed; returns how many stops it asked for."""
    now = timezone.now()
    stopped = 0
    for budget in budgets.check_budgets(now=now):
        stops_at = budget.stops_at
        if stops_at is None:
            continue
        units = (
            GPUUnit.objects.live()
            .filter(tenant=budget.tenant, run_policy=RunPolicy.RUNNING)
            .exclude(phase=UnitPhase.TERMINATING)
        )
        for unit in units.select_related("tenant"):
            said = (
                f"The monthly budget of {budget.limit} {budget.currency} is spent: the unit "
                f"stops at {stops_at:%Y-%m-%d %H:%M:%S} UTC unless the budget is raised."
            )
            if now < stops_at:
                lifecycle.record_event(unit, reason="BudgetExceeded", message=said)
                continue
            try:
                request_action(
                    tenant=unit.tenant,
                    name=unit.name,
                    uid=str(unit.uid),
                    kind=OperationKind.STOP,
                    operation_id=f"budget-stop-{unit.uid}-{budget.start:%Y%m}",
                    reason="BudgetExceeded",
                    message=f"Stopped by the control plane: the monthly budget of "
                    f"{budget.limit} {budget.currency} is spent.",
                )
            except (InvalidState, OperationInProgress):
                continue
            stopped += 1
    return stopped

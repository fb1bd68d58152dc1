"""The operation outbox: every change a customer asks for is an Operation row, written in the
request's transaction and handed to a worker after commit. A row stays open (pending, running)
until a worker finishes it, so a lost message or a broker outage only delays it: the sweeper
sends open rows nobody touched for a while again. Workers claim a row by compare-and-set."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from controlplane import locks, queues
from runtime import selectors, validation
from runtime.errors import OperationConflict
from runtime.models import GPUUnit, Operation, OperationKind, OperationStatus

logger = logging.getLogger(__name__)

# The task that carries out each kind of operation, sent by name: runtime/tasks.py sits above
# this module and registers them under these names.
PROVISION_TASK = "runtime.provision_unit"
DELETE_TASK = "runtime.delete_unit"
STOP_TASK = "runtime.stop_unit"
# Start, restart and update all bring the unit's objects to its spec (a new pod when it runs).
ROLL_OUT_TASK = "runtime.roll_out_unit"
TASK_FOR_KIND: dict[str, str] = {
    OperationKind.CREATE: PROVISION_TASK,
    OperationKind.DELETE: DELETE_TASK,
    OperationKind.STOP: STOP_TASK,
    OperationKind.START: ROLL_OUT_TASK,
    OperationKind.RESTART: ROLL_OUT_TASK,
    OperationKind.UPDATE: ROLL_OUT_TASK,
}
SWEEP_BATCH = 500


def request_hash(payload: dict) -> str:
    """SHA-256 over canonical JSON: key order and whitespace never change the hash."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_replay(operation: Operation, *, kind: str, request_hash: str) -> None:
    """An earlier operation under the same operationID is a replay only if it is the same
    request; anything else is a conflict."""
    if operation.kind != kind or operation.request_hash != request_hash:
        raise OperationConflict(
            f"operation {operation.operation_id} already exists with a different request payload.",
            details={"operationID": operation.operation_id},
        )


def delete_operation_id(unit: GPUUnit) -> str:
    """The operationID the service gives a unit's deletion (clients cannot use '@')."""
    return f"{validation.DELETE_OPERATION_PREFIX}{unit.uid}"


def preempt_operation_id(unit: GPUUnit) -> str:
    """The operationID of the stop that carries out the unit's preemption (one per run)."""
    return f"{validation.PREEMPT_OPERATION_PREFIX}{unit.uid}-{unit.generation}"


def start_deadline_operation_id(unit: GPUUnit) -> str:
    """The operationID of the stop of a unit whose pod never started a container in time (one
    per idle hold)."""
    since = int(unit.idle_hold_since.timestamp()) if unit.idle_hold_since else 0
    return f"{validation.START_DEADLINE_OPERATION_PREFIX}{unit.uid}-{since}"


def resume_operation_id(unit: GPUUnit) -> str:
    """The operationID of the start that resumes a preempted unit with autoResume."""
    return f"{validation.RESUME_OPERATION_PREFIX}{unit.uid}-{unit.generation}"


def handover_operation_id(unit: GPUUnit) -> str:
    """The operationID of the restart that makes the unit's claim again for a hand-over."""
    return f"{validation.HANDOVER_OPERATION_PREFIX}{unit.uid}-{unit.generation}"


def reservation_end_operation_id(unit: GPUUnit) -> str:
    """The operationID of the stop of a unit at the end of its reservation."""
    return f"{validation.RESERVATION_END_OPERATION_PREFIX}{unit.uid}-{unit.generation}"


def auto_stop_operation_id(unit: GPUUnit) -> str:
    """The operationID of the auto-stop of this run of the unit (one per generation)."""
    return f"{validation.AUTO_STOP_OPERATION_PREFIX}{unit.uid}-{unit.generation}"


def roll_out_change(unit: GPUUnit, *, generation: int) -> Operation | None:
    """A change the control plane made to the unit's spec (generation `generation`), rolled
    out by an update operation of its own, sent once the caller's transaction commits; the
    sweeper sends it again if that message is lost. None when one exists already. The caller
    holds the unit's row lock and has seen no other operation open on it, or has just
    finished the one that was (whose roll-out carried out an older generation)."""
    operation_id = f"{validation.ROLL_OUT_OPERATION_PREFIX}{unit.uid}-{generation}"
    operation, created = Operation.objects.get_or_create(
        tenant_id=unit.tenant_id,
        operation_id=operation_id,
        defaults={
            "kind": OperationKind.UPDATE,
            "request_hash": request_hash({"rollOut": str(unit.uid), "generation": generation}),
            "unit": unit,
        },
    )
    if not created:
        return None
    transaction.on_commit(lambda: enqueue(operation))
    return operation


def send(task: str, pk: int, *, cluster: str = "") -> bool:
    """Send a task by name for one row, on the queue of the cluster it works on (the default
    queue for the process's own); False (logged) when the broker is unreachable, which must not
    fail the request that recorded the work: each caller's backstop sends it later."""
    try:
        current_app.send_task(task, args=[pk], queue=queues.queue_for(cluster), retry=False)
    except Exception:
        logger.warning("could not send %s for %s; its backstop will", task, pk, exc_info=True)
        return False
    return True


def enqueue(operation: Operation) -> None:
    """Hand the operation to a worker. If the broker is down the operation stays pending in
    the database and the sweeper sends it later, so the caller's request still succeeds."""
    send(TASK_FOR_KIND[operation.kind], operation.pk, cluster=operation.unit.cluster)


def send_again(unit: GPUUnit) -> None:
    """The unit's open create operation pending again, sent once the caller's transaction
    commits to the queue of the cluster the unit is in now (placed again: orders.place_again)."""
    operation = Operation.objects.filter(
        unit=unit, kind=OperationKind.CREATE, status__in=OperationStatus.OPEN
    ).first()
    if operation is None:
        return
    Operation.objects.filter(pk=operation.pk).update(
        status=OperationStatus.PENDING, updated_at=timezone.now()
    )
    operation.unit = unit
    transaction.on_commit(lambda: enqueue(operation))


# locks.held(OPERATION_LOCK, pk): the worker carrying out an operation right now.
OPERATION_LOCK = 0x0B7A_5C00


@contextlib.contextmanager
def claimed(operation_pk: int) -> Iterator[Operation | None]:
    """The open operation, claimed for this worker while the block runs; None when it is
    finished, gone, or being carried out by another worker right now. A message can arrive
    twice (the sweeper sends again an operation that looks stale while a worker still runs
    it): the second delivery then leaves it to the first instead of counting an attempt and
    racing it. A worker that dies loses the lock with its connection, so the sweeper's next
    message is carried out."""
    with locks.held(OPERATION_LOCK, str(operation_pk)) as ours:
        yield claim_operation(operation_pk) if ours else None


def claim_operation(operation_pk: int) -> Operation | None:
    """Compare-and-set an open operation to running, counting the attempt; None when it is
    finished (or gone)."""
    now = timezone.now()
    claimed = Operation.objects.filter(pk=operation_pk, status__in=OperationStatus.OPEN).update(
        status=OperationStatus.RUNNING, attempts=F("attempts") + 1, updated_at=now
    )
    if not claimed:
        return None
    return Operation.objects.select_related("unit", "unit__tenant", "tenant").get(pk=operation_pk)


CANCELLED = "cancelled"
CANCELLED_MESSAGE = "The unit was deleted before it was provisioned."
CANCELLED_BY_DELETE = "The unit was deleted before the operation finished."


def cancel_open_operations(unit: GPUUnit) -> int:
    """Fail the unit's open operations (its create, stop, start, restart or update) with
    `cancelled`, in one statement: its deletion supersedes them."""
    now = timezone.now()
    return (
        Operation.objects.filter(unit=unit, status__in=OperationStatus.OPEN)
        .exclude(kind=OperationKind.DELETE)
        .update(
            status=OperationStatus.FAILED,
            error_code=CANCELLED,
            error_message=Case(
                When(kind=OperationKind.CREATE, then=Value(CANCELLED_MESSAGE)),
                default=Value(CANCELLED_BY_DELETE),
            ),
            finished_at=now,
            updated_at=now,
        )
    )


def open_operation(unit: GPUUnit) -> Operation | None:
    """The unit's open operation, if any (at most one but for a deletion)."""
    return Operation.objects.filter(unit=unit, status__in=OperationStatus.OPEN).first()


def finish_open_delete(unit: GPUUnit) -> int:
    """Close the unit's open delete operation as succeeded (its objects are gone)."""
    now = timezone.now()
    return Operation.objects.filter(
        unit=unit, kind=OperationKind.DELETE, status__in=OperationStatus.OPEN
    ).update(status=OperationStatus.SUCCEEDED, finished_at=now, updated_at=now)


def finish_operation(
    operation: Operation, *, error_code: str = "", error_message: str = ""
) -> None:
    """Close the operation: failed with a code a customer can read, or succeeded. An
    operation closed meanwhile (a create cancelled by its unit's deletion) stays as it is."""
    status = OperationStatus.FAILED if error_code else OperationStatus.SUCCEEDED
    now = timezone.now()
    Operation.objects.filter(pk=operation.pk, status__in=OperationStatus.OPEN).update(
        status=status,
        error_code=error_code,
        error_message=error_message,
        finished_at=now,
        updated_at=now,
    )
    operation.status, operation.error_code, operation.error_message = (
        status,
        error_code,
        error_message,
    )


def note_operation_retry(*, operation_pk: int, message: str) -> None:
    """Say why the operation is waiting for its next attempt (shown by GET /operations)."""
    Operation.objects.filter(pk=operation_pk).update(
        error_message=message, updated_at=timezone.now()
    )


def sweep_operations() -> int:
    """Send again the open operations nobody has touched for OPERATION_STALE_SECONDS (a lost
    message, a broker outage, a worker killed mid-task); returns how many."""
    threshold = timezone.now() - timedelta(seconds=settings.OPERATION_STALE_SECONDS)
    stale = selectors.list_stale_operations(older_than=threshold, limit=SWEEP_BATCH)
    for operation in stale:
        # Touched first, so the next sweep leaves it alone while this message is on its way.
        Operation.objects.filter(pk=operation.pk).update(updated_at=timezone.now())
        enqueue(operation)
    return len(stale)

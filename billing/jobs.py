"""Usage exports as background jobs: `request_export` records one and queues it; a Celery
worker runs it (`run_export`): PostgreSQL renders the rows through COPY
(billing.exporting.copy_to) into a spooled file while a side thread writes the rows done so
far, then the bytes are stored gzip-compressed as parts any web process can stream
(`export_bytes`). No web thread renders anything; a download only moves stored bytes (and
decompresses them for a client that does not accept gzip)."""

from __future__ import annotations

import logging
import tempfile
import threading
import uuid
import zlib
from collections.abc import Iterator
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from billing import exporting
from billing.models import ExportState, UsageExport, UsageExportPart

logger = logging.getLogger(__name__)

PART_BYTES = 4 << 20
# zlib's fastest level: most of the size win for a fraction of the time; wbits 31 = gzip.
GZIP_LEVEL = 1
GZIP_WBITS = 31
PROGRESS_SECONDS = 1.0
RESEND_AFTER = timedelta(minutes=1)
STALE_MARGIN = timedelta(minutes=1)


def request_export(
    *, fmt: str, start: datetime, end: datetime, source: str, requested_by: str
) -> UsageExport:
    """Record an export of the rows starting in `[start, end)` and queue it once committed."""
    if fmt not in exporting.FORMATS:
        raise ValueError(f"unknown export format {fmt!r}")
    export = UsageExport.objects.create(
        format=fmt, start=start, end=end, source=source, requested_by=requested_by[:150]
    )
    # Sent by name: billing.tasks (which defines it) imports this module.
    transaction.on_commit(lambda: _enqueue(export.pk))
    return export


def _enqueue(export_id: uuid.UUID) -> bool:
    """Send the export to a worker; False (logged) when the broker is unreachable, which must
    not fail the request: `sweep_exports` sends it later."""
    try:
        current_app.send_task("billing.export_usage", args=[str(export_id)], retry=False)
    except Exception:
        logger.warning("could not send export %s; the sweep will", export_id, exc_info=True)
        return False
    return True


class _Progress:
    """Writes the rows done to the export's row about every PROGRESS_SECONDS, from a thread
    of its own (with its own database connection: the worker's is busy with the COPY)."""

    def __init__(self, export_id: uuid.UUID) -> None:
        self.export_id = export_id
        self.rows = 0
        self.written = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="export-progress", daemon=True)

    def __enter__(self) -> _Progress:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _run(self) -> None:
        try:
            while not self.done.wait(PROGRESS_SECONDS):
                if self.rows != self.written:
                    self.written = self.rows
                    UsageExport.objects.filter(pk=self.export_id).update(rows_done=self.written)
        finally:
            connection.close()


def _store(export: UsageExport, spool: tempfile.SpooledTemporaryFile) -> tuple[int, int]:
    """The spooled bytes as one gzip stream cut into the export's parts, in order; returns
    the bytes read and the bytes stored. Usage rows compress about tenfold, so storing them
    costs a tenth of the writes (and of the database's space)."""
    spool.seek(0)
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
    size = stored = index = 0
    pending = b""

    def put(data: bytes) -> None:
        nonlocal index, stored
        UsageExportPart.objects.create(export=export, index=index, data=data)
        index += 1
        stored += len(data)

    while chunk := spool.read(PART_BYTES):
        size += len(chunk)
        pending += compressor.compress(chunk)
        if len(pending) >= PART_BYTES:
            put(pending)
            pending = b""
    pending += compressor.flush()
    put(pending)
    return size, stored


def _stale(now: datetime) -> Q:
    """A running export no worker can still be on (past the task's hard time limit): its
    worker was lost."""
    limit = timedelta(seconds=settings.BILLING_EXPORT_TIME_LIMIT_SECONDS) + STALE_MARGIN
    return Q(state=ExportState.RUNNING, started_at__lt=now - limit)


def run_export(export_id: uuid.UUID | str) -> UsageExport | None:
    """Make the export: claim it (requested, or running on a worker since lost: it starts
    over), count its rows, render them, store the bytes, mark it ready (or failed, with the
    error). None when there is no such export, or it is finished or running elsewhere (a
    second delivery of the task)."""
    claimed = (
        UsageExport.objects.filter(pk=export_id)
        .filter(Q(state=ExportState.REQUESTED) | _stale(timezone.now()))
        .update(state=ExportState.RUNNING, started_at=Now(), rows_done=0, size=0, stored=0)
    )
    if not claimed:
        return None
    export = UsageExport.objects.get(pk=export_id)
    UsageExportPart.objects.filter(export=export).delete()
    try:
        rows = exporting.records_starting(export.start, export.end)
        if export.format == "stripe":
            rows = rows.filter(corrects__isnull=True)
        UsageExport.objects.filter(pk=export.pk).update(rows_total=rows.count())
        with tempfile.SpooledTemporaryFile(max_size=PART_BYTES) as spool:
            with _Progress(export.pk) as progress:

                def note(done: int) -> None:
                    progress.rows = done

                written = exporting.copy_to(
                    export.format,
                    export.start,
                    export.end,
                    spool,  # type: ignore[arg-type]
                    source=export.source,
                    on_progress=note,
                )
            with transaction.atomic():
                size, stored = _store(export, spool)
                UsageExport.objects.filter(pk=export.pk).update(
                    state=ExportState.READY,
                    rows_done=written,
                    size=size,
                    stored=stored,
                    finished_at=Now(),
                )
    except Exception as exc:  # any failure is the export's, said on it
        logger.exception("usage export %s failed", export.pk)
        UsageExport.objects.filter(pk=export.pk).update(
            state=ExportState.FAILED,
            error=str(exc)[:500] or type(exc).__name__,
            finished_at=Now(),
        )
    export.refresh_from_db()
    return export


def export_bytes(export: UsageExport, *, gzip: bool = False) -> Iterator[bytes]:
    """The export's bytes a part at a time (one query each): the stored gzip stream as it is
    (`gzip`: for a client that accepts it), else decompressed on the way."""
    pks = list(
        UsageExportPart.objects.filter(export=export).order_by("index").values_list("pk", flat=True)
    )
    decompressor = None if gzip else zlib.decompressobj(GZIP_WBITS)
    for pk in pks:
        data = bytes(UsageExportPart.objects.values_list("data", flat=True).get(pk=pk))
        if decompressor is None:
            yield data
        elif text := decompressor.decompress(data):
            yield text
    if decompressor is not None and (rest := decompressor.flush()):
        yield rest


def sweep_exports(*, now: datetime | None = None) -> tuple[int, int]:
    """Send again the exports requested over RESEND_AFTER ago that no worker started (the
    broker was down) and those whose worker was lost mid-way, and delete those finished (or
    never started) longer than BILLING_EXPORT_RETENTION_HOURS ago; returns (sent, deleted)."""
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.BILLING_EXPORT_RETENTION_HOURS)
    old = UsageExport.objects.filter(
        Q(finished_at__lt=cutoff) | Q(finished_at__isnull=True, created_at__lt=cutoff)
    )
    deleted = old.count()
    old.delete()
    waiting = UsageExport.objects.filter(
        Q(state=ExportState.REQUESTED, created_at__lt=now - RESEND_AFTER) | _stale(now)
    ).values_list("pk", flat=True)
    sent = sum(_enqueue(pk) for pk in waiting)
    return sent, deleted

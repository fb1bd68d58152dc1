"""Usage exports as background jobs, through the API and a real Celery worker: requested (202),
then running with rows done, then ready with a download of every row starting in the period,
byte for byte the same each time; a download before it is ready is a 409; tenants cannot
export; old exports are swept."""

from __future__ import annotations

import csv
import gzip
import io
import json
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import jobs
from billing.models import ExportState, UsageExport, UsageExportPart, UsageRecord
from billing.tests.helpers import hold, priced
from runtime.models import UnitPhase
from runtime.tests.factories import UnitFactory
from runtime.tests.helpers import wait_until
from tenancy.tests.factories import TenantFactory
from tests.endpoints import QUERY_COUNTS, EndpointTest, client_for, recording

pytestmark = pytest.mark.django_db

EXPORTS = "/api/v1/operator/usage/exports"
PERIOD = {"from": "2026-11-28", "to": "2026-11-29"}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def used(tenant):
    """Six ledger rows on 28 November (two of the tenant's unit, four of another tenant's)
    and one on the 29th, outside the period."""
    h100 = priced("h100-2x", "3.60")
    trainer = UnitFactory(tenant=tenant, name="trainer", package=h100, phase=UnitPhase.STOPPED)
    hold(trainer, at("2026-11-28 10:00"), at("2026-11-28 11:30"))
    other = UnitFactory(tenant=TenantFactory(), name="theirs", package=h100)
    hold(other, at("2026-11-28 11:00"), at("2026-11-28 14:00"))
    hold(other, at("2026-11-28 23:30"), at("2026-11-29 00:30"))
    return tenant


def download(client, body: dict) -> bytes:
    response = client.get(body["downloadUrl"])
    assert response.status_code == 200, response.content
    assert int(response["Content-Length"]) == body["bytes"]
    return b"".join(response.streaming_content)


def made(client, fmt: str) -> dict:
    """Request an export and wait until the worker has finished it."""
    response = client.post(EXPORTS, {**PERIOD, "format": fmt}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()["data"]
    assert body["state"] == "requested"
    assert body["downloadUrl"] is None
    assert response["Location"] == f"{EXPORTS}/{body['id']}"

    def finished() -> dict | None:
        now = client.get(response["Location"]).json()["data"]
        return now if now["state"] in ("ready", "failed") else None

    done = wait_until(finished, f"export {body['id']} finished")
    assert done["state"] == "ready", done
    return done


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("celery_worker")
@pytest.mark.planted_usage  # ledger rows written directly, without units' timelines
def test_a_worker_makes_each_format_and_the_download_holds_every_row_of_the_period(used):
    operator = client_for(TenantFactory(is_operator=True))
    ids = {
        str(pk)
        for pk in UsageRecord.objects.filter(
            start__gte=at("2026-11-28 00:00"), start__lt=at("2026-11-29 00:00")
        ).values_list("id", flat=True)
    }
    assert len(ids) == 6

    focus = made(operator, "focus-csv")
    assert focus["rowsTotal"] == focus["rowsDone"] == 6
    assert focus["startedAt"]
    assert focus["finishedAt"]
    assert focus["error"] == ""
    response = operator.get(focus["downloadUrl"])
    assert response["Content-Type"].startswith("text/csv")
    assert (
        'filename="usage-20261128T000000Z-20261129T000000Z.focus.csv"'
        in (response["Content-Disposition"])
    )
    rows = list(csv.DictReader(io.StringIO(download(operator, focus).decode())))
    assert {row["x_UsageId"] for row in rows} == ids
    assert sum(Decimal(row["BilledCost"]) for row in rows) == Decimal(18)  # 5 h at 3.60

    for fmt, key in (("cloudevents", "id"), ("stripe", "identifier")):
        first, again = download(operator, made(operator, fmt)), None
        again = download(operator, made(operator, fmt))
        assert first == again
        events = [json.loads(line) for line in first.decode().splitlines()]
        assert {event[key] for event in events} == ids

    listed = operator.get(EXPORTS).json()["data"]
    assert len(listed) == 5
    assert listed[0]["format"] == "stripe"  # newest first


@pytest.mark.django_db(transaction=True)
def test_the_rows_done_reach_the_export_while_it_runs(used, monkeypatch):
    # The worker's connection is busy with the COPY: a thread of its own writes them.
    monkeypatch.setattr(jobs, "PROGRESS_SECONDS", 0.01)
    export = UsageExport.objects.create(
        format="cloudevents", start=at("2026-11-01 00:00"), end=at("2026-12-01 00:00")
    )
    with jobs._Progress(export.pk) as progress:
        progress.rows = 3
        wait_until(
            lambda: UsageExport.objects.get(pk=export.pk).rows_done == 3, "3 rows done stored"
        )


@pytest.mark.django_db(transaction=True)
def test_a_run_counts_its_rows_and_stores_the_bytes_in_parts(used, monkeypatch):
    monkeypatch.setattr(jobs, "PART_BYTES", 1000)
    export = UsageExport.objects.create(
        format="cloudevents", start=at("2026-11-01 00:00"), end=at("2026-12-01 00:00")
    )
    done = jobs.run_export(export.pk)
    assert done is not None
    assert (done.state, done.rows_total, done.rows_done) == (ExportState.READY, 7, 7)
    parts = UsageExportPart.objects.filter(export=export).order_by("index")
    assert sum(len(part.data) for part in parts) == done.stored < done.size
    text = b"".join(jobs.export_bytes(done))
    assert len(text) == done.size
    assert text.count(b"\n") == 7
    assert gzip.decompress(b"".join(jobs.export_bytes(done, gzip=True))) == text
    assert jobs.run_export(export.pk) is None  # finished: a second delivery does nothing


@pytest.mark.django_db(transaction=True)
def test_the_stored_stream_spans_parts_and_reads_back_byte_for_byte(monkeypatch):
    monkeypatch.setattr(jobs, "PART_BYTES", 4096)
    text = b"".join(
        f"{n},{uuid.uuid5(uuid.NAMESPACE_URL, str(n))},gpu-{n % 8}\n".encode()
        for n in range(20_000)
    )
    export = UsageExport.objects.create(
        format="focus-csv", start=at("2026-11-28 00:00"), end=at("2026-11-29 00:00")
    )
    with tempfile.SpooledTemporaryFile() as spool:
        spool.write(text)
        size, stored = jobs._store(export, spool)
    assert size == len(text)
    assert UsageExportPart.objects.filter(export=export).count() > 2
    assert stored < size
    export.refresh_from_db()
    assert b"".join(jobs.export_bytes(export)) == text
    assert gzip.decompress(b"".join(jobs.export_bytes(export, gzip=True))) == text


class TestExportResource(EndpointTest):
    path = "/api/v1/operator/usage/exports/{id}"

    def test_a_download_before_the_export_is_ready_is_a_409(self, used):
        operator = client_for(TenantFactory(is_operator=True))
        export = UsageExport.objects.create(
            format="stripe", start=at("2026-11-28 00:00"), end=at("2026-11-29 00:00")
        )
        body = self.get_success_response(operator, id=str(export.pk)).json()["data"]
        assert (body["state"], body["rowsDone"], body["downloadUrl"]) == ("requested", 0, None)
        response = operator.get(f"{EXPORTS}/{export.pk}/download")
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "export_not_ready"
        UsageExport.objects.filter(pk=export.pk).update(
            state=ExportState.FAILED, error="the worker ran out of time"
        )
        error = operator.get(f"{EXPORTS}/{export.pk}/download").json()["error"]
        assert "ran out of time" in error["message"]

    def test_an_unknown_export_is_a_404(self, used):
        operator = client_for(TenantFactory(is_operator=True))
        self.get_error_response(
            operator, status=404, code="not_found", id="3d2b1f8e-0000-4000-8000-000000000001"
        )

    def test_tenant_keys_are_refused(self, auth_client):
        export = UsageExport.objects.create(
            format="stripe", start=at("2026-11-28 00:00"), end=at("2026-11-29 00:00")
        )
        self.get_error_response(auth_client, status=403, code="forbidden", id=str(export.pk))
        assert auth_client.post(EXPORTS, {**PERIOD, "format": "stripe"}).status_code == 403

    def test_statements_are_the_baseline(self, used):
        operator = client_for(TenantFactory(is_operator=True))
        operator.get("/api/v1/quota")
        export = UsageExport.objects.create(
            format="stripe", start=at("2026-11-28 00:00"), end=at("2026-11-29 00:00")
        )
        self.assert_statement_count(operator, id=str(export.pk))


class TestExportRequest(EndpointTest):
    method = "post"
    path = EXPORTS

    def test_a_bad_format_or_period_is_a_400_and_records_nothing(self, used):
        operator = client_for(TenantFactory(is_operator=True))
        error = self.get_error_response(
            operator, status=400, code="invalid_request", data={**PERIOD, "format": "xml"}
        )
        assert "format" in error["details"]["fields"]
        error = self.get_error_response(
            operator,
            status=400,
            code="invalid_request",
            data={"from": "2026-11-29", "to": "2026-11-28", "format": "stripe"},
        )
        assert "to" in error["details"]["fields"]
        assert not UsageExport.objects.exists()

    def test_statements_are_the_baseline(self, used):
        operator = client_for(TenantFactory(is_operator=True))
        operator.get("/api/v1/quota")
        self.assert_statement_count(operator, data={**PERIOD, "format": "stripe"})


def test_the_sweep_deletes_old_exports_with_their_parts_and_resends_waiting_ones(used):
    now = timezone.now()
    old = UsageExport.objects.create(
        format="stripe", start=now, end=now, state=ExportState.READY, finished_at=now
    )
    UsageExportPart.objects.create(export=old, index=0, data=b"x")
    waiting = UsageExport.objects.create(format="stripe", start=now, end=now)
    UsageExport.objects.filter(pk=waiting.pk).update(created_at=now - timedelta(minutes=5))
    sent, deleted = jobs.sweep_exports(now=now + timedelta(days=8))
    assert deleted == 2  # the finished one, and the one waiting since before the cutoff
    assert not UsageExportPart.objects.exists()
    fresh = UsageExport.objects.create(format="stripe", start=now, end=now)
    UsageExport.objects.filter(pk=fresh.pk).update(created_at=now - timedelta(minutes=5))
    sent, deleted = jobs.sweep_exports(now=now)
    assert (sent, deleted) == (1, 0)


def ready_export() -> UsageExport:
    stored = gzip.compress(b"{}\n{}\n")
    export = UsageExport.objects.create(
        format="stripe",
        start=at("2026-11-28 00:00"),
        end=at("2026-11-29 00:00"),
        state=ExportState.READY,
        size=6,
        stored=len(stored),
        finished_at=timezone.now(),
    )
    UsageExportPart.objects.create(export=export, index=0, data=stored)
    return export


class TestExportList(EndpointTest):
    path = EXPORTS

    def test_statements_are_the_baseline_whatever_the_exports(self, used):
        operator = client_for(TenantFactory(is_operator=True))
        operator.get("/api/v1/quota")
        ready_export()
        self.assert_statement_count(operator)
        ready_export()
        listed = self.get_success_response(operator).json()["data"]
        assert [body["state"] for body in listed] == ["ready", "ready"]
        assert all(body["downloadUrl"].endswith("/download") for body in listed)
        self.assert_statement_count(operator)


class TestExportDownload(EndpointTest):
    path = EXPORTS + "/{id}/download"

    def test_statements_are_the_baseline_for_an_export_of_one_part(self, used):
        operator = client_for(TenantFactory(is_operator=True))
        operator.get("/api/v1/quota")
        export = ready_export()
        # The parts are read as the response streams: count until it has been sent.
        with recording() as log:
            response = self.call(operator, id=str(export.pk))
            body = b"".join(response.streaming_content)
        assert body == b"{}\n{}\n"
        assert response["Content-Type"] == "application/x-ndjson"
        assert len(log.statements) == QUERY_COUNTS[self.endpoint], log.statements

    def test_a_client_that_accepts_gzip_gets_the_stored_bytes_as_they_are(self, used):
        operator = client_for(TenantFactory(is_operator=True))
        export = ready_export()
        response = self.call(operator, id=str(export.pk), headers={"Accept-Encoding": "gzip"})
        assert response.status_code == 200
        assert response["Content-Encoding"] == "gzip"
        assert "Accept-Encoding" in response["Vary"]
        body = b"".join(response.streaming_content)
        assert int(response["Content-Length"]) == len(body) == export.stored
        assert gzip.decompress(body) == b"{}\n{}\n"

    def test_a_malformed_id_is_a_404(self, used):
        operator = client_for(TenantFactory(is_operator=True))
        self.get_error_response(operator, status=404, code="not_found", id="not-an-id")


@pytest.mark.django_db(transaction=True)
# The sweep sends the export again: the session's worker (up after an earlier test) must not
# take it before the call below does.
@pytest.mark.usefixtures("session_worker_paused")
def test_a_second_delivery_leaves_a_running_export_alone_and_a_lost_one_starts_over(used):
    export = UsageExport.objects.create(
        format="stripe",
        start=at("2026-11-28 00:00"),
        end=at("2026-11-29 00:00"),
        state=ExportState.RUNNING,
        started_at=timezone.now(),
    )
    UsageExportPart.objects.create(export=export, index=0, data=b"half")
    assert jobs.run_export(export.pk) is None  # another worker is on it
    assert UsageExportPart.objects.filter(export=export).count() == 1
    assert jobs.sweep_exports() == (0, 0)

    lost = timezone.now() - timedelta(seconds=jobs.settings.BILLING_EXPORT_TIME_LIMIT_SECONDS)
    UsageExport.objects.filter(pk=export.pk).update(started_at=lost - jobs.STALE_MARGIN)
    assert jobs.sweep_exports() == (1, 0)  # sent again
    done = jobs.run_export(export.pk)
    assert done is not None
    assert (done.state, done.rows_done) == (ExportState.READY, 6)
    assert b"".join(jobs.export_bytes(done)).count(b"\n") == 6

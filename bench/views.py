"""Baseline views: the least work Django can do for the same request, to divide by."""

from __future__ import annotations

import json

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

BASELINE_TABLE = "bench_baseline"
CREATE_BASELINE_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {BASELINE_TABLE} "
    "(id bigserial PRIMARY KEY, payload text NOT NULL, created_at timestamptz NOT NULL)"
)
# The columns GET /gpu-units renders, straight from the table.
UNIT_COLUMNS = (
    "id, name, namespace, operation_id, package_id, spec_name, image, template, cpu, memory, "
    "gpu, device_class_name, claim_name, claim_request_name, count, phase, reason, message, "
    "dra, node_name, created_at, updated_at, last_sync_at"
)


@csrf_exempt
@require_POST
def insert(request: HttpRequest) -> HttpResponse:
    """One INSERT of the request body, no auth, no validation: the create API's floor."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {BASELINE_TABLE} (payload, created_at) VALUES (%s, now()) RETURNING id",
            [request.body.decode()],
        )
        row_id = cursor.fetchone()[0]
    return JsonResponse({"data": {"id": row_id}}, status=201)


@require_GET
def select_units(request: HttpRequest) -> HttpResponse:
    """One raw `SELECT ... LIMIT` of a tenant's newest units, rendered as JSON: the list
    API's floor (no auth, no serializer)."""
    tenant_id = int(request.GET["tenant"])
    limit = int(request.GET.get("limit", "20"))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {UNIT_COLUMNS} FROM runtime_gpuunit WHERE tenant_id = %s "
            "ORDER BY id DESC LIMIT %s",
            [tenant_id, limit],
        )
        names = [column.name for column in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return HttpResponse(json.dumps({"data": rows}, default=str), content_type="application/json")

"""Usage and cost for tenants (GET /usage, budgets, statements) and operators (GET
/operator/usage, and usage exports made in the background), from the ledger's rollups
(billing.selectors) and billing.jobs."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from billing import budgets, exporting, jobs, periods, selectors, statements
from billing.errors import ExportNotReady
from billing.models import ExportState, UsageExport
from controlplane.api.fields import Moment
from controlplane.api.schema import envelope, error_responses
from controlplane.api.views import ApiView, NotJsonBodyMixin
from controlplane.errors import NotFound
from tenancy.permissions import IsOperator
from tenancy.views import TenantView

MAX_PERIOD = timedelta(days=400)
EXPORTS_LISTED = 50
# As Django's GZipMiddleware reads Accept-Encoding.
ACCEPTS_GZIP = re.compile(r"\bgzip\b")


class PeriodQuerySerializer(serializers.Serializer):
    from_ = Moment(required=False, help_text="start, inclusive (default: this UTC month's start)")
    to = Moment(required=False, help_text="end, exclusive (default: now)")

    def get_fields(self) -> dict:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")  # a Python keyword
        return fields

    def validate(self, attrs: dict) -> dict:
        now = timezone.now()
        end = attrs.get("to") or now
        start = attrs.get("from") or periods.month_start(min(end, now))
        if start >= end:
            raise serializers.ValidationError({"to": ["to must be after from."]})
        if end - start > MAX_PERIOD:
            raise serializers.ValidationError({"to": ["A period is at most 400 days."]})
        # The one "now" of the request: a period that ends at it reaches now, so a reader
        # takes its month whole from the rollups (billing.periods.cover).
        return {**attrs, "from": start, "to": end, "now": now}


class UsageQuerySerializer(PeriodQuerySerializer):
    groupBy = serializers.ChoiceField(
        choices=["unit", "package", "day", "region"], default="package"
    )


class OperatorUsageQuerySerializer(PeriodQuerySerializer):
    groupBy = serializers.ChoiceField(
        choices=["tenant", "unit", "package", "day", "region"], default="tenant"
    )


_KEY_NAMES = {
    "unit": ("unitUid", "unit", "package"),
    "package": ("package",),
    "day": ("day",),
    "tenant": ("tenant",),
    "region": ("region",),
}
_totals_fields: dict[str, serializers.Field] = {
    "seconds": serializers.CharField(help_text="seconds a unit held its devices"),
    "deviceSeconds": serializers.CharField(help_text="devices x seconds (whole-GPU packages)"),
    "shareSeconds": serializers.CharField(help_text="shares x seconds (shared-GPU packages)"),
    "cost": serializers.CharField(help_text="in `currency`, to the micro-unit"),
}
_usage_item = inline_serializer(
    name="UsageItem",
    fields={
        **{
            name: serializers.CharField(required=False)
            for name in ("unitUid", "unit", "package", "day", "tenant", "region")
        },
        **_totals_fields,
    },
)
_usage = inline_serializer(
    name="Usage",
    fields={
        "from": serializers.DateTimeField(),
        "to": serializers.DateTimeField(),
        "currency": serializers.CharField(),
        "groupBy": serializers.CharField(),
        "items": serializers.ListField(child=_usage_item),
        "total": inline_serializer(name="UsageTotal", fields=_totals_fields),
    },
)


def amount(value: Decimal) -> str:
    return format(value.quantize(Decimal("0.001")), "f")


def totals_json(totals: selectors.Totals) -> dict:
    return {
        "seconds": amount(totals.seconds),
        "deviceSeconds": amount(totals.device_seconds),
        "shareSeconds": amount(totals.share_seconds),
        "cost": periods.cost_text(totals.cost),
    }


def usage_json(usage: selectors.Usage) -> dict:
    items = []
    for key, totals in sorted(usage.groups.items(), key=lambda item: tuple(map(str, item[0]))):
        labels = dict(zip(_KEY_NAMES[usage.group_by], (str(part) for part in key), strict=True))
        items.append({**labels, **totals_json(totals)})
    return {
        "from": usage.start.isoformat().replace("+00:00", "Z"),
        "to": usage.end.isoformat().replace("+00:00", "Z"),
        "currency": settings.BILLING_CURRENCY,
        "groupBy": usage.group_by,
        "items": items,
        "total": totals_json(usage.total),
    }


class UsageView(TenantView):
    """The tenant's usage and cost over a period, running units counted up to now."""

    query_serializer = UsageQuerySerializer

    @extend_schema(
        summary="The tenant's GPU usage and cost over a period",
        parameters=[UsageQuerySerializer],
        responses={200: envelope(_usage, name="UsageResponse"), **error_responses(400, 401)},
    )
    def get(self, request: Request) -> Response:
        params = self.validated_query(request)
        usage = selectors.usage(
            tenant=self.tenant,
            start=params["from"],
            end=params["to"],
            group_by=params["groupBy"],
            now=params["now"],
        )
        return Response(usage_json(usage))


class OperatorUsageView(ApiView):
    """Usage and cost of every tenant over a period (operator keys only)."""

    permission_classes = [IsOperator]

    query_serializer = OperatorUsageQuerySerializer

    @extend_schema(
        summary="GPU usage and cost across tenants (operator keys only)",
        parameters=[OperatorUsageQuerySerializer],
        responses={
            200: envelope(_usage, name="OperatorUsageResponse"),
            **error_responses(400, 401, 403),
        },
    )
    def get(self, request: Request) -> Response:
        params = self.validated_query(request)
        usage = selectors.usage(
            start=params["from"], end=params["to"], group_by=params["groupBy"], now=params["now"]
        )
        return Response(usage_json(usage))


class UsageExportSerializer(serializers.Serializer):
    """An export resource as the API shows it (read-only)."""

    id = serializers.UUIDField()
    format = serializers.ChoiceField(choices=sorted(exporting.FORMATS))
    from_ = serializers.DateTimeField(source="start")
    to = serializers.DateTimeField(source="end")
    state = serializers.ChoiceField(choices=ExportState.values)
    rowsTotal = serializers.IntegerField(
        source="rows_total",
        allow_null=True,
        help_text="the rows to write, once the export has started",
    )
    rowsDone = serializers.IntegerField(source="rows_done")
    bytes = serializers.IntegerField(source="size")
    error = serializers.CharField()
    requestedBy = serializers.CharField(source="requested_by")
    createdAt = serializers.DateTimeField(source="created_at")
    startedAt = serializers.DateTimeField(source="started_at", allow_null=True)
    finishedAt = serializers.DateTimeField(source="finished_at", allow_null=True)
    downloadUrl = serializers.SerializerMethodField(help_text="where the bytes are, once ready")

    def get_fields(self) -> dict:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")  # a Python keyword
        return fields

    @extend_schema_field(serializers.URLField(allow_null=True))
    def get_downloadUrl(self, export: UsageExport) -> str | None:
        if export.state != ExportState.READY:
            return None
        request = self.context["request"]
        return request.build_absolute_uri(
            reverse("v1:operator-usage-export-download", args=[export.pk])
        )


_export_response = envelope(UsageExportSerializer, name="UsageExportResponse")


def export_json(export: UsageExport, request: Request) -> dict:
    return dict(UsageExportSerializer(export, context={"request": request}).data)


class ExportRequestSerializer(PeriodQuerySerializer):
    format = serializers.ChoiceField(choices=sorted(exporting.FORMATS))


class OperatorUsageExportsView(ApiView):
    """Exports of the usage ledger, made in the background (operator keys only): FOCUS CSV,
    CloudEvents or Stripe meter events of the rows that start in a period."""

    permission_classes = [IsOperator]

    @extend_schema(
        summary="Request an export of the usage ledger (made by a worker; poll it, then download)",
        request=ExportRequestSerializer,
        responses={
            202: _export_response,
            **error_responses(400, 401, 403),
        },
    )
    def post(self, request: Request) -> Response:
        body = ExportRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        params = body.validated_data
        key = request.auth
        export = jobs.request_export(
            fmt=params["format"],
            start=params["from"],
            end=params["to"],
            source=f"//{request.get_host()}/billing",
            requested_by=getattr(key, "name", "") or str(getattr(key, "prefix", "")),
        )
        body_json = export_json(export, request)
        response = Response(body_json, status=202)
        response["Location"] = reverse("v1:operator-usage-export", args=[export.pk])
        return response

    @extend_schema(
        summary="The latest usage exports, newest first",
        responses={
            200: envelope(UsageExportSerializer, many=True, name="UsageExportListResponse"),
            **error_responses(401, 403),
        },
    )
    def get(self, request: Request) -> Response:
        exports = UsageExport.objects.all()[:EXPORTS_LISTED]
        return Response([export_json(export, request) for export in exports])


def _export_or_404(id: str) -> UsageExport:
    try:
        pk = uuid.UUID(id)
    except ValueError:
        pk = None
    export = UsageExport.objects.filter(pk=pk).first() if pk else None
    if export is None:
        raise NotFound(f"There is no usage export {id}.")
    return export


class OperatorUsageExportView(ApiView):
    """One usage export: its state, the rows done so far, and where to download it."""

    permission_classes = [IsOperator]

    @extend_schema(
        summary="A usage export's progress",
        responses={
            200: _export_response,
            **error_responses(401, 403, 404),
        },
    )
    def get(self, request: Request, id: str) -> Response:
        return Response(export_json(_export_or_404(id), request))


class OperatorUsageExportDownloadView(NotJsonBodyMixin, ApiView):
    """A ready export's bytes, streamed as stored (nothing is rendered here)."""

    permission_classes = [IsOperator]

    @extend_schema(
        summary="Download a ready usage export",
        responses={
            (200, "text/csv"): OpenApiResponse(
                response=OpenApiTypes.STR, description="FOCUS rows (format focus-csv)"
            ),
            (200, "application/x-ndjson"): OpenApiResponse(
                response=OpenApiTypes.STR,
                description="one CloudEvent or Stripe meter event per line",
            ),
            **error_responses(401, 403, 404, 409),
        },
    )
    def get(self, request: Request, id: str) -> StreamingHttpResponse:
        export = _export_or_404(id)
        if export.state != ExportState.READY:
            raise ExportNotReady(
                f"The export is {export.state}, not ready"
                + (f": {export.error}" if export.error else "."),
                details={"state": export.state},
            )
        chosen = exporting.FORMATS[export.format]
        # Stored as gzip: sent so to a client that accepts it, else decompressed on the way.
        gzip = bool(ACCEPTS_GZIP.search(request.headers.get("Accept-Encoding", "")))
        response = StreamingHttpResponse(
            jobs.export_bytes(export, gzip=gzip), content_type=chosen.content_type
        )
        stamp = f"{export.start:%Y%m%dT%H%M%SZ}-{export.end:%Y%m%dT%H%M%SZ}"
        response["Content-Disposition"] = (
            f'attachment; filename="usage-{stamp}{chosen.filename_suffix}"'
        )
        if gzip:
            response["Content-Encoding"] = "gzip"
        response["Content-Length"] = str(export.stored if gzip else export.size)
        patch_vary_headers(response, ["Accept-Encoding"])
        return response


def _stamp(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def budget_json(budget: budgets.Budget) -> dict:
    percent = budget.percent
    return {
        "month": f"{budget.start:%Y-%m}",
        "limit": None if budget.limit is None else format(budget.limit, "f"),
        "currency": budget.currency,
        "mode": budget.mode,
        "grace": budget.tenant.budget_grace,
        "spent": periods.cost_text(budget.spent),
        "committed": periods.cost_text(budget.committed),
        "forecast": periods.cost_text(budget.forecast),
        "percent": None if percent is None else format(percent, "f"),
        "exceededAt": _stamp(budget.exceeded_at),
        "stopsAt": _stamp(budget.stops_at),
        "alerts": [
            {"threshold": alert.threshold, "at": _stamp(alert.at), "spent": str(alert.spent)}
            for alert in budget.alerts
        ],
    }


_budget = inline_serializer(
    name="Budget",
    fields={
        "month": serializers.CharField(help_text="the UTC month, YYYY-MM"),
        "limit": serializers.CharField(
            allow_null=True, help_text="the monthly budget (null: none is set)"
        ),
        "currency": serializers.CharField(),
        "mode": serializers.ChoiceField(
            choices=["alert", "enforce"],
            help_text="at 100 %: alert only, or also refuse orders and starts and stop the "
            "running units at `stopsAt`",
        ),
        "grace": serializers.CharField(help_text="how long units run on once it is spent"),
        "spent": serializers.CharField(help_text="this month so far, running units included"),
        "committed": serializers.CharField(
            help_text="what the tenant's reservations commit it to for the rest of the month "
            "(every slot for its window, the most they can still cost); alerts count it"
        ),
        "forecast": serializers.CharField(
            help_text="this month's spend if what runs now runs to the month's end and every "
            "reservation holds all its slots to its end"
        ),
        "percent": serializers.CharField(allow_null=True, help_text="spent / limit x 100"),
        "exceededAt": serializers.DateTimeField(
            allow_null=True, help_text="when an enforced budget was found spent"
        ),
        "stopsAt": serializers.DateTimeField(
            allow_null=True, help_text="when the running units are stopped (enforce mode)"
        ),
        "alerts": serializers.ListField(
            child=inline_serializer(
                name="BudgetAlert",
                fields={
                    "threshold": serializers.IntegerField(help_text="50, 80 or 100 (%)"),
                    "at": serializers.DateTimeField(),
                    "spent": serializers.CharField(),
                },
            )
        ),
    },
)


class BudgetView(TenantView):
    """The tenant's monthly budget: limit, spend, forecast, alerts, and when units stop."""

    @extend_schema(
        summary="The tenant's monthly budget and where it stands",
        responses={200: envelope(_budget, name="BudgetResponse"), **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(budget_json(budgets.budget_of(self.tenant, now=timezone.now())))


class StatementQuerySerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=["json", "csv"], default="json")


_statement_line = inline_serializer(
    name="StatementLine",
    fields={
        name: serializers.CharField(help_text=help_text)
        for name, help_text in {
            "month": "YYYY-MM",
            "unit": "the unit's name",
            "unitUid": "the unit's uid",
            "package": "its package",
            "alternative": "the fallback alternative it got ('' for the package's own)",
            "priceVersion": "the id of the price version in force",
            "kind": "usage, or correction (negative)",
            "from": "the line's first row's start",
            "to": "its last row's end",
            "seconds": "seconds the devices were held",
            "quantity": "device-seconds or share-seconds",
            "quantityUnit": "device-seconds or share-seconds",
            "unitPrice": "the hourly price of the package (or alternative)",
            "cost": "in `currency`, to the micro-unit",
            "currency": "ISO 4217",
        }.items()
    },
)
_statement = inline_serializer(
    name="Statement",
    fields={
        "month": serializers.CharField(),
        "from": serializers.DateTimeField(),
        "to": serializers.DateTimeField(),
        "currency": serializers.CharField(),
        "final": serializers.BooleanField(
            help_text="false while a unit is still metered in the month (its unsealed time is "
            "not in the ledger yet)"
        ),
        "lines": serializers.ListField(child=_statement_line),
        "total": serializers.CharField(help_text="the sum of the lines' costs"),
        "running": serializers.CharField(
            help_text="what units still metered have cost since their last sealed hour, up to "
            "now: not in the lines yet"
        ),
        "totalSoFar": serializers.CharField(
            help_text="total + running: the month's cost so far, as GET /quota's costThisMonth"
        ),
        "committed": serializers.ListField(
            child=inline_serializer(
                name="StatementCommitment",
                fields={
                    "reservation": serializers.CharField(),
                    "package": serializers.CharField(),
                    "slots": serializers.IntegerField(),
                    "from": serializers.DateTimeField(),
                    "to": serializers.DateTimeField(),
                    "cost": serializers.CharField(
                        help_text="the most it can still cost in the month: every slot held "
                        "from `from` to `to` at the price in force now"
                    ),
                },
            ),
            help_text="what the tenant's reservations commit it to in the rest of the month, "
            "not in the lines (nor the total) yet: a slot is billed while it holds devices",
        ),
        "committedTotal": serializers.CharField(help_text="the sum of `committed`"),
    },
)


class StatementView(NotJsonBodyMixin, TenantView):
    """The tenant's statement for a UTC month: lines per unit, package and price, and the
    total, as JSON or CSV; the rows are those the FOCUS export of the month carries."""

    query_serializer = StatementQuerySerializer

    @extend_schema(
        summary="The tenant's monthly statement",
        parameters=[StatementQuerySerializer],
        responses={
            200: envelope(_statement, name="StatementResponse"),
            (200, "text/csv"): OpenApiResponse(
                response=OpenApiTypes.STR, description="the statement as CSV (format=csv)"
            ),
            **error_responses(400, 401),
        },
    )
    def get(self, request: Request, month: str) -> Response | HttpResponse:
        params = self.validated_query(request)
        start = statements.month_of(month)
        if start is None:
            raise exceptions.ValidationError({"month": ["A month is YYYY-MM, e.g. 2026-12."]})
        found = statements.statement(self.tenant, start, now=timezone.now())
        if params["format"] == "csv":
            response = HttpResponse(
                "".join(statements.render_csv(found)), content_type="text/csv; charset=utf-8"
            )
            response["Content-Disposition"] = (
                f'attachment; filename="statement-{self.tenant.slug}-{month}.csv"'
            )
            return response
        label = f"{found.start:%Y-%m}"
        return Response(
            {
                "month": label,
                "from": _stamp(found.start),
                "to": _stamp(found.end),
                "currency": found.currency,
                "final": found.final,
                "lines": [
                    statements.line_json(line, month=label, currency=found.currency)
                    for line in found.lines
                ],
                "total": periods.cost_text(found.total),
                "running": periods.cost_text(found.running),
                "totalSoFar": periods.cost_text(found.total_so_far),
                "committed": [
                    {
                        "reservation": c.commitment.name,
                        "package": c.commitment.package_id,
                        "slots": c.commitment.slots,
                        "from": _stamp(c.start),
                        "to": _stamp(c.end),
                        "cost": periods.cost_text(c.cost),
                    }
                    for c in found.committed
                ],
                "committedTotal": periods.cost_text(found.committed_total),
            }
        )

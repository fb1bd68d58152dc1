"""The tenant's account: quota and what is left, usage and cost, the monthly budget and
statements."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

import typer

from gpuctl.client import path
from gpuctl.commands.common import Output, client
from gpuctl.output import Column, Format, emit

LINE_COLUMNS = [
    Column("RESOURCE", "resource"),
    Column("HARD", "hard"),
    Column("USED", "used"),
    Column("FREE", "free"),
]


def quota_lines(quota: Mapping[str, Any]) -> list[dict[str, Any]]:
    """GET /quota's {hard, used, free} lines, one row each: cpu, memory and claims, then per
    device class, per region, and the platform's per-tenant limits."""
    rows = []
    for name in ("cpu", "memory", "claims"):
        if name in quota:
            rows.append({"resource": name, **quota[name]})
    for group, label in (("devices", "devices {}"), ("regions", "region {}")):
        for name, line in (quota.get(group) or {}).items():
            rows.append({"resource": label.format(name), **line})
    for name, line in (quota.get("limits") or {}).items():
        if isinstance(line, Mapping):
            rows.append({"resource": name, **line})
    return rows


def quota(ctx: typer.Context, output: Output = Format.TABLE) -> None:
    """Your quota, what your units hold of it, and what is left."""
    found = client(ctx).get("/quota")
    if output is not Format.TABLE:
        emit(found, output, columns=[])
        return
    classes = ", ".join((found.get("limits") or {}).get("storageClasses") or []) or "default"
    emit(
        quota_lines(found),
        output,
        columns=LINE_COLUMNS,
        caption=f"cost to date {found.get('costToDate')} {found.get('currency')}, this month "
        f"{found.get('costThisMonth')}; storage classes: {classes}",
    )


USAGE_TOTALS = [
    Column("SECONDS", "seconds"),
    Column("DEVICE-SECONDS", "deviceSeconds"),
    Column("SHARE-SECONDS", "shareSeconds"),
    Column("COST", "cost"),
]
USAGE_KEYS = {
    "unit": [Column("UNIT", "unit"), Column("PACKAGE", "package")],
    "package": [Column("PACKAGE", "package")],
    "day": [Column("DAY", "day")],
    "region": [Column("REGION", "region")],
}


class GroupBy(StrEnum):
    UNIT = "unit"
    PACKAGE = "package"
    DAY = "day"
    REGION = "region"


def usage(
    ctx: typer.Context,
    group_by: Annotated[GroupBy, typer.Option("--group-by", "-g", help="a row per what")] = (
        GroupBy.PACKAGE
    ),
    from_: Annotated[
        str | None, typer.Option("--from", help="start (RFC 3339; default: this UTC month's)")
    ] = None,
    to: Annotated[str | None, typer.Option("--to", help="end, exclusive (default: now)")] = None,
    output: Output = Format.TABLE,
) -> None:
    """Your GPU usage and cost over a period (running units counted up to now)."""
    params = {"groupBy": group_by.value, "from": from_, "to": to}
    found = client(ctx).get("/usage", params=params)
    if output is not Format.TABLE:
        emit(found, output, columns=[])
        return
    keys = USAGE_KEYS[found.get("groupBy", group_by.value)]
    items = found.get("items", [])
    total = {**found.get("total", {}), **{column.path: "total" for column in keys[:1]}}
    if len(items) > 1 and (
        len({item.get("package") for item in items}) > 1 or "package" not in keys[-1].path
    ):
        # A unit-second of one package is not one of another: only costs and device time add up.
        total["seconds"] = "-"
    emit(
        [*items, total],
        output,
        columns=[*keys, *USAGE_TOTALS],
        caption=f"{found.get('from')} to {found.get('to')}, in {found.get('currency')}",
    )


BUDGET_COLUMNS = [
    Column("month", "month"),
    Column("limit", "limit"),
    Column("currency", "currency"),
    Column("mode", "mode"),
    Column("grace", "grace"),
    Column("spent", "spent"),
    Column("forecast", "forecast"),
    Column("percent", "percent"),
    Column("exceeded at", "exceededAt"),
    Column("stops at", "stopsAt"),
    Column(
        "alerts",
        show=lambda b: [f"{a['threshold']}% at {a['at']}" for a in b.get("alerts") or []],
    ),
]


def budget(ctx: typer.Context, output: Output = Format.TABLE) -> None:
    """Your monthly budget: limit, spend, forecast, alerts."""
    emit(client(ctx).get("/budget"), output, columns=BUDGET_COLUMNS, single=True)


STATEMENT_COLUMNS = [
    Column("UNIT", "unit"),
    Column("PACKAGE", "package"),
    Column("KIND", "kind"),
    Column("FROM", "from"),
    Column("TO", "to"),
    Column("QUANTITY", show=lambda line: f"{line.get('quantity')} {line.get('quantityUnit')}"),
    Column("PRICE/H", "unitPrice"),
    Column("COST", "cost"),
]


def statement(
    ctx: typer.Context,
    month: Annotated[str, typer.Argument(help="the UTC month, YYYY-MM")],
    csv: Annotated[bool, typer.Option("--csv", help="the statement as CSV")] = False,
    output: Output = Format.TABLE,
) -> None:
    """Your statement for a month: a line per unit, package and price."""
    route = path("usage", "statements", month)
    if csv:
        for chunk in client(ctx).text(route, params={"format": "csv"}):
            sys.stdout.buffer.write(chunk)
        return
    found = client(ctx).get(route)
    if output is not Format.TABLE:
        emit(found, output, columns=[])
        return
    currency = found.get("currency")
    if found.get("final"):
        said = f"total {found.get('total')} {currency} (final)"
    else:
        said = (
            f"total so far {found.get('totalSoFar')} {currency}: {found.get('total')} in the "
            f"lines and {found.get('running')} running, not sealed yet"
        )
    emit(
        found.get("lines", []),
        output,
        columns=STATEMENT_COLUMNS,
        caption=f"{found.get('month')}: {said}",
    )

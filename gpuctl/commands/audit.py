"""`gpuctl audit`: who did what to the tenant's resources (every write through the API, the
dashboard and the admin), newest first."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

import typer

from gpuctl.commands.common import Output, client
from gpuctl.output import Column, Format, emit

app = typer.Typer(help="The audit log: every write to your resources.", no_args_is_help=True)


class Source(StrEnum):
    API = "api"
    DASHBOARD = "dashboard"
    ADMIN = "admin"


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"


def _target(event: Mapping[str, Any]) -> str:
    target = event.get("target") or {}
    return "/".join(part for part in (target.get("kind"), target.get("name")) if part)


def _outcome(event: Mapping[str, Any]) -> str:
    shown = f"{event.get('outcome')} {event.get('status')}"
    return f"{shown} {event['errorCode']}" if event.get("errorCode") else shown


COLUMNS = [
    Column("TIME", "occurredAt"),
    Column("SOURCE", "source"),
    Column("ACTOR", "actor.name"),
    Column("ACTION", "action"),
    Column("TARGET", show=_target),
    Column("OUTCOME", show=_outcome),
    Column("REQUEST ID", "requestId"),
]


@app.command("list")
def list_events(
    ctx: typer.Context,
    action: Annotated[str | None, typer.Option(help="e.g. units_create, units_stop")] = None,
    target: Annotated[
        str | None, typer.Option(help="a resource (units) or one (units/NAME)")
    ] = None,
    actor: Annotated[str | None, typer.Option(help="an API key's prefix, or a username")] = None,
    source: Annotated[Source | None, typer.Option(help="where the write came from")] = None,
    outcome: Annotated[Outcome | None, typer.Option(help="success or failure")] = None,
    request_id: Annotated[str | None, typer.Option("--request-id", help="an X-Request-ID")] = None,
    from_: Annotated[str | None, typer.Option("--from", help="at or after (RFC 3339)")] = None,
    to: Annotated[str | None, typer.Option("--to", help="before (RFC 3339)")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="at most this many events")] = 50,
    output: Output = Format.TABLE,
) -> None:
    """Your audit events, newest first."""
    params = {
        "action": action,
        "target": target,
        "actor": actor,
        "source": source.value if source else None,
        "outcome": outcome.value if outcome else None,
        "requestId": request_id,
        "from": from_,
        "to": to,
    }
    events = list(client(ctx).pages("/audit-events", params=params, most=limit))
    emit(events, output, columns=COLUMNS)

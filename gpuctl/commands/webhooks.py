"""`gpuctl webhooks`: where the control plane posts your events (signed per Standard
Webhooks, as CloudEvents), and what became of each delivery."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

import typer

from gpuctl.client import path
from gpuctl.commands.collection import Collection, add_commands
from gpuctl.commands.common import Output, client, note
from gpuctl.errors import ExitCode, GpuctlError
from gpuctl.output import Column, Format, age, emit

app = typer.Typer(
    help="Signed event deliveries to your URL (Standard Webhooks, CloudEvents) and their log.",
    no_args_is_help=True,
)
Id = Annotated[str, typer.Argument(help="the webhook's id (gpuctl webhooks list)")]
EVENTS_HELP = (
    "an event to send (repeatable): unit.phase_changed, unit.auto_stopped, "
    "unit.device_unhealthy, budget.threshold_reached, storage.phase_changed, or * for all"
)

COLUMNS = [
    Column("ID", "id"),
    Column("URL", "url"),
    Column("EVENTS", "events"),
    Column("ENABLED", "enabled"),
    Column("DESCRIPTION", "description"),
    Column("AGE", show=lambda w: age(w.get("createdAt"))),
]
WITH_SECRET = [*COLUMNS, Column("SECRET", "secret")]


class Status(StrEnum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


def _last_answer(delivery: Mapping[str, Any]) -> str:
    attempts = delivery.get("attemptLog") or []
    if not attempts:
        return ""
    last = attempts[-1]
    return str(last.get("status") or last.get("error") or "")


DELIVERY_COLUMNS = [
    Column("ID", "id"),
    Column("EVENT", "eventType"),
    Column("SUBJECT", "payload.subject"),
    Column("STATUS", "status"),
    Column("ATTEMPTS", "attempts"),
    Column("LAST ANSWER", show=_last_answer),
    Column("NEXT TRY", "nextAttemptAt"),
    Column("AGE", show=lambda d: age(d.get("createdAt"))),
]


add_commands(
    app,
    Collection(
        "webhooks",
        COLUMNS,
        listed="Your webhooks.",
        one="One webhook.",
        key="the webhook's id (gpuctl webhooks list)",
        delete=(
            "delete",
            "Remove a webhook and its delivery log.",
            lambda id: f"webhook {id} removed",
        ),
    ),
)


@app.command("create")
def create_webhook(
    ctx: typer.Context,
    url: Annotated[str, typer.Option("--url", help="where to post: an https:// URL")],
    event: Annotated[list[str], typer.Option("--event", "-e", help=EVENTS_HELP)],
    description: Annotated[str, typer.Option("--description", help="a note for you")] = "",
    output: Output = Format.TABLE,
) -> None:
    """Add a webhook; its signing secret is printed this once."""
    body = {"url": url, "events": event, "description": description}
    created = client(ctx).call("POST", "/webhooks", body=body).data
    note(f"webhook {created['id']} added: keep its secret, it is not shown again")
    emit(created, output, columns=WITH_SECRET, single=True)


@app.command("update")
def update_webhook(
    ctx: typer.Context,
    webhook: Id,
    url: Annotated[str | None, typer.Option("--url", help="a new URL")] = None,
    event: Annotated[
        list[str] | None, typer.Option("--event", "-e", help="replaces the events: " + EVENTS_HELP)
    ] = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    enabled: Annotated[
        bool | None,
        typer.Option(
            "--enable/--disable", help="turn sending on or off (while off, events are not kept)"
        ),
    ] = None,
    output: Output = Format.TABLE,
) -> None:
    """Change a webhook; what is not given stays."""
    body: dict[str, Any] = {
        name: value
        for name, value in (
            ("url", url),
            ("events", event),
            ("description", description),
            ("enabled", enabled),
        )
        if value is not None
    }
    if not body:
        raise GpuctlError(
            "nothing to change: give --url, --event, --description, --enable or --disable",
            exit_code=ExitCode.USAGE,
        )
    updated = client(ctx).call("PATCH", path("webhooks", webhook), body=body).data
    emit(updated, output, columns=COLUMNS, single=True)


@app.command("rotate-secret")
def rotate_secret(ctx: typer.Context, webhook: Id, output: Output = Format.TABLE) -> None:
    """A new signing secret (printed this once); the old one signs beside it for a while."""
    rotated = client(ctx).call("POST", path("webhooks", webhook, "rotate-secret")).data
    note(
        f"webhook {webhook}: new secret; the previous one also signs until "
        f"{rotated.get('previousSecretValidUntil')}"
    )
    emit(rotated, output, columns=WITH_SECRET, single=True)


@app.command("test")
def send_test(ctx: typer.Context, webhook: Id, output: Output = Format.TABLE) -> None:
    """Send a webhook.test event now (gpuctl webhooks deliveries ID shows how it went)."""
    delivery = client(ctx).call("POST", path("webhooks", webhook, "test")).data
    note(f"test delivery {delivery['id']} queued")
    emit(delivery, output, columns=DELIVERY_COLUMNS, single=True)


@app.command("deliveries")
def list_deliveries(
    ctx: typer.Context,
    webhook: Id,
    status: Annotated[Status | None, typer.Option(help="only these")] = None,
    event_type: Annotated[
        str | None, typer.Option("--event-type", help="only this event, e.g. unit.phase_changed")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="at most this many")] = 50,
    output: Output = Format.TABLE,
) -> None:
    """A webhook's deliveries, newest first, with each one's attempts (-o json shows them)."""
    params = {"status": status.value if status else None, "eventType": event_type}
    deliveries = list(
        client(ctx).pages(path("webhooks", webhook, "deliveries"), params=params, most=limit)
    )
    emit(deliveries, output, columns=DELIVERY_COLUMNS)

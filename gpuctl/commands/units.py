"""`gpuctl units`: order, read, change, stop, start, restart and delete GPU units, read their
timelines and logs, and ssh into them."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuctl import spec, wait
from gpuctl.client import Client, path
from gpuctl.commands.common import (
    DEFAULT_TIMEOUT,
    OperationID,
    Output,
    Timeout,
    Wait,
    client,
    note,
    operation_id,
)
from gpuctl.errors import GpuctlError
from gpuctl.output import Column, Format, age, emit

app = typer.Typer(
    help="GPU units: order, list, stop, start, delete, logs, ssh.", no_args_is_help=True
)

Name = Annotated[str, typer.Argument(help="the unit's name")]


def _devices(unit: Mapping[str, Any]) -> list[str]:
    return [
        f"{d.get('pool')}/{d.get('device')}"
        for d in (unit.get("draStatus") or {}).get("devices", [])
    ]


LIST_COLUMNS = [
    Column("NAME", "name"),
    Column("PHASE", "phase"),
    Column("REASON", "reason"),
    Column("PACKAGE", "packageID"),
    Column("REGION", "region"),
    Column("URL", "access.url"),
    Column("COST", "costToDate"),
    Column("AGE", show=lambda unit: age(unit.get("createdAt"))),
]
DETAIL_COLUMNS = [
    Column("name", "name"),
    Column("phase", "phase"),
    Column("reason", "reason"),
    Column("message", "message"),
    Column("package", "packageID"),
    Column("spec", "specName"),
    Column(
        "gpu / cpu / memory", show=lambda u: f"{u.get('gpu')} / {u.get('cpu')} / {u.get('memory')}"
    ),
    Column("region / cluster", show=lambda u: f"{u.get('region')} / {u.get('cluster')}"),
    Column("node", "nodeName"),
    Column("devices", show=_devices),
    Column("image", "image"),
    Column("command", show=lambda u: shlex.join((u.get("template") or {}).get("command") or [])),
    Column("url", "access.url"),
    Column("ssh", "ssh.command"),
    Column("stop after", "stopAfter"),
    Column("stops at", "stopsAt"),
    Column("cost to date", "costToDate"),
    Column("operationID", "operationID"),
    Column("generation", show=lambda u: f"{u.get('observedGeneration')}/{u.get('generation')}"),
    Column("created", "createdAt"),
]
OPERATION_COLUMNS = [
    Column("operationID", "operationID"),
    Column("kind", "kind"),
    Column("status", "status"),
    Column("unit", "unitName"),
    Column("attempts", "attempts"),
    Column("error", show=lambda o: (o.get("error") or {}).get("message")),
    Column("created", "createdAt"),
    Column("finished", "finishedAt"),
]
EVENT_COLUMNS = [
    Column("LAST SEEN", show=lambda event: age(event.get("lastSeen"))),
    Column("TYPE", "type"),
    Column("REASON", "reason"),
    Column("COUNT", "count"),
    Column("MESSAGE", "message"),
]


def _show_unit(unit: Any, output: Format) -> None:
    emit(unit, output, columns=DETAIL_COLUMNS, single=True)


def _wait(api: Client, name: str, goal: wait.Goal, timeout: float, operation: str | None) -> Any:
    note(f"waiting for {name} to be {goal} (at most {timeout:g} s)")
    return wait.until(api, name, goal, timeout=timeout, operation_id=operation, report=note)


@app.command("list")
def list_units(
    ctx: typer.Context,
    phase: Annotated[
        str | None, typer.Option(help="only units in this phase, e.g. Running")
    ] = None,
    package: Annotated[
        str | None, typer.Option("--package", "-p", help="only this package")
    ] = None,
    region: Annotated[str | None, typer.Option(help="only units in this region")] = None,
    all_: Annotated[bool, typer.Option("--all", "-A", help="Terminated units too")] = False,
    output: Output = Format.TABLE,
) -> None:
    """List your units (newest first)."""
    params = {
        "phase": phase,
        "packageID": package,
        "region": region,
        "include": "terminated" if all_ else None,
    }
    units = list(client(ctx).pages("/gpu-units", params=params))
    emit(units, output, columns=LIST_COLUMNS)


@app.command()
def get(ctx: typer.Context, name: Name, output: Output = Format.TABLE) -> None:
    """Show one unit (-o yaml shows every field)."""
    _show_unit(client(ctx).get(path("gpu-units", name)), output)


@app.command(
    epilog="Example: gpuctl units create web -p gpu-rtx3080-2x-cpu10-mem40g -i python:3.12 "
    "--port http:8080 --wait -- python -m http.server 8080"
)
def create(
    ctx: typer.Context,
    name: Name,
    command: Annotated[
        list[str] | None,
        typer.Argument(help="after --: the command that replaces the image's entrypoint"),
    ] = None,
    package: Annotated[
        str, typer.Option("--package", "-p", help="the package ID (gpuctl packages list)")
    ] = "",
    image: Annotated[str, typer.Option("--image", "-i", help="the container image")] = "",
    region: Annotated[str | None, typer.Option(help="the region (gpuctl regions list)")] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE (repeatable)")
    ] = None,
    secret_env: Annotated[
        list[str] | None,
        typer.Option("--secret-env", help="NAME=SECRET:KEY: a key of one of your secrets"),
    ] = None,
    port: Annotated[
        list[str] | None, typer.Option("--port", help="NAME:PORT\\[/PROTOCOL], e.g. http:8080")
    ] = None,
    scheme: Annotated[
        str | None, typer.Option(help="how the first port is reached: http, https or tcp")
    ] = None,
    ssh: Annotated[bool, typer.Option("--ssh", help="SSH in with all your keys")] = False,
    ssh_key: Annotated[
        list[str] | None, typer.Option("--ssh-key", help="SSH in with this key only (repeatable)")
    ] = None,
    mount: Annotated[
        list[str] | None, typer.Option("--mount", help="STORAGE:PATH[:ro] (repeatable)")
    ] = None,
    stop_after: Annotated[
        str | None, typer.Option("--stop-after", help="auto-stop after this long, e.g. 8h")
    ] = None,
    interruptible: Annotated[
        bool,
        typer.Option(
            "--interruptible",
            help="at the package's interruptible price; may be taken back with its notice",
        ),
    ] = False,
    auto_resume: Annotated[
        bool,
        typer.Option(
            "--auto-resume",
            help="with --interruptible: started again by the control plane once preempted "
            "and there is room",
        ),
    ] = False,
    reservation: Annotated[
        str | None,
        typer.Option(
            "--reservation",
            help="run on the devices of this reservation of yours (gpuctl reservations list)",
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="YAML or JSON of more order fields (flags win)"),
    ] = None,
    operation: OperationID = None,
    wait_: Wait = False,
    timeout: Timeout = DEFAULT_TIMEOUT,
    output: Output = Format.TABLE,
) -> None:
    """Order a unit of a package."""
    base = spec.document(file) if file else {}
    package = package or base.get("packageID", "")
    image = image or base.get("image", "")
    if not package or not image:
        raise spec.usage_error("a unit needs --package and --image (or them in --file)")
    body = spec.order(
        operation_id=operation_id(operation or base.get("operationID")),
        name=name,
        package=package,
        image=image,
        base=base,
        region=region,
        command=command or (),
        env=env or (),
        secret_env=secret_env or (),
        ports=port or (),
        scheme=scheme,
        ssh=ssh,
        ssh_keys=ssh_key or (),
        mounts=mount or (),
        stop_after=stop_after,
        interruptible=interruptible,
        auto_resume=auto_resume,
        reservation=reservation,
    )
    api = client(ctx)
    reply = api.call("POST", "/gpu-units", body=body)
    unit = reply.data
    verb = "already ordered" if reply.status == 200 else "ordered"
    note(f"{unit['name']} {verb}: operationID {body['operationID']}")
    if wait_:
        unit = _wait(api, unit["name"], wait.RUNNING, timeout, body["operationID"])
    _show_unit(unit, output)


def _action(kind: str, goal: wait.Goal, summary: str) -> None:
    """`gpuctl units KIND NAME`: POST /gpu-units/NAME/KIND with an operationID, then (--wait)
    the unit polled until it reaches `goal`; shows the operation."""

    def command(
        ctx: typer.Context,
        name: Name,
        operation: OperationID = None,
        wait_: Wait = False,
        timeout: Timeout = DEFAULT_TIMEOUT,
        output: Output = Format.TABLE,
    ) -> None:
        api = client(ctx)
        sent = operation_id(operation)
        reply = api.call("POST", path("gpu-units", name, kind), body={"operationID": sent})
        again = "already " if reply.status == 200 else ""
        note(f"{kind} of {name} {again}requested: operationID {sent}")
        found = reply.data
        if wait_:
            _wait(api, name, goal, timeout, sent)
            found = api.get(path("operations", sent))
        emit(found, output, columns=OPERATION_COLUMNS, single=True)

    command.__doc__ = summary
    app.command(kind)(command)


_action(
    "stop", wait.STOPPED, "Stop a unit: its devices go back; its name, storage and access stay."
)
_action("start", wait.RUNNING, "Start a stopped unit again.")
_action("restart", wait.RUNNING, "Restart a unit: a new pod, its devices allocated afresh.")


@app.command()
def update(
    ctx: typer.Context,
    name: Name,
    image: Annotated[str | None, typer.Option("--image", "-i", help="a new image")] = None,
    stop_after: Annotated[
        str | None, typer.Option("--stop-after", help="a new auto-stop, e.g. 4h; none clears it")
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="YAML or JSON merge patch of the unit (flags win)"),
    ] = None,
    if_match: Annotated[
        str | None,
        typer.Option("--if-match", help="the etag the unit must still have (default: as read now)"),
    ] = None,
    operation: OperationID = None,
    wait_: Wait = False,
    timeout: Timeout = DEFAULT_TIMEOUT,
    output: Output = Format.TABLE,
) -> None:
    """Change a unit's image, template, access, ssh, mounts or stopAfter (a merge patch)."""
    patch = spec.update(
        operation_id=operation_id(operation),
        base=spec.document(file) if file else None,
        image=image,
        stop_after=stop_after,
    )
    api = client(ctx)
    etag = if_match or api.get(path("gpu-units", name))["etag"]
    reply = api.call(
        "PATCH",
        path("gpu-units", name),
        body=patch,
        headers={"Content-Type": "application/merge-patch+json", "If-Match": etag},
    )
    unit = reply.data
    verb = "nothing changed" if reply.status == 200 else "update requested"
    note(f"{name}: {verb}: operationID {patch['operationID']}")
    if wait_:
        goal = wait.settled(int(unit.get("generation") or 0))
        unit = _wait(api, name, goal, timeout, patch["operationID"])
    _show_unit(unit, output)


@app.command()
def delete(
    ctx: typer.Context,
    name: Name,
    wait_: Wait = False,
    timeout: Timeout = DEFAULT_TIMEOUT,
    output: Output = Format.TABLE,
) -> None:
    """Delete a unit (repeatable): its pod, claim and devices go, and its name is free."""
    api = client(ctx)
    reply = api.call("DELETE", path("gpu-units", name))
    unit = reply.data
    note(f"deletion of {name} requested: operationID {reply.meta.get('operationID')}")
    if wait_:
        unit = _wait(api, name, wait.GONE, timeout, None) or unit
    _show_unit(unit, output)


@app.command()
def events(ctx: typer.Context, name: Name, output: Output = Format.TABLE) -> None:
    """A unit's timeline, oldest first."""
    found = list(client(ctx).pages(path("gpu-units", name, "events")))
    emit(found, output, columns=EVENT_COLUMNS)


@app.command()
def logs(
    ctx: typer.Context,
    name: Name,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="stream new lines")] = False,
    tail: Annotated[int | None, typer.Option("--tail", min=1, help="the last N lines")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="only lines newer than this, e.g. 10m")
    ] = None,
    timestamps: Annotated[
        bool, typer.Option("--timestamps", help="an RFC 3339 time per line")
    ] = False,
    container: Annotated[
        str | None, typer.Option("--container", "-c", help="a container of the unit's pod")
    ] = None,
) -> None:
    """A unit's log; -f streams it until the server ends the stream or Ctrl-C."""
    params = {
        "follow": follow or None,
        "tailLines": tail,
        "sinceSeconds": spec.seconds(since) if since else None,
        "timestamps": timestamps or None,
        "container": container,
    }
    out = sys.stdout.buffer
    for chunk in client(ctx).text(path("gpu-units", name, "logs"), params=params, follow=follow):
        out.write(chunk)
        out.flush()


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    epilog="Arguments after the name go to ssh: gpuctl units ssh NAME -- -L 8888:localhost:8888",
)
def ssh(
    ctx: typer.Context,
    name: Name,
    print_: Annotated[
        bool, typer.Option("--print", help="print the ssh command, do not run it")
    ] = False,
) -> None:
    """Run the unit's ssh command (the unit must have been ordered with --ssh)."""
    unit = client(ctx).get(path("gpu-units", name))
    found = unit.get("ssh") or {}
    if not found.get("enabled"):
        raise GpuctlError(f"{name} has no SSH: order it with --ssh (or update it with ssh.enabled)")
    if not found.get("command"):
        raise GpuctlError(f"{name}'s SSH port is not published yet ({wait.state(name, unit)})")
    argv = [*shlex.split(found["command"]), *ctx.args]
    if print_:
        print(shlex.join(argv))
        return
    try:
        os.execvp(argv[0], argv)
    except OSError as error:
        raise GpuctlError(f"cannot run {argv[0]}: {error}") from None


operations = typer.Typer(
    help="The status of a create, stop, start, restart, update or delete.", no_args_is_help=True
)


@operations.command("get")
def get_operation(
    ctx: typer.Context,
    operation_id: Annotated[str, typer.Argument(help="the operationID gpuctl printed")],
    output: Output = Format.TABLE,
) -> None:
    """One operation."""
    found = client(ctx).get(path("operations", operation_id))
    emit(found, output, columns=OPERATION_COLUMNS, single=True)

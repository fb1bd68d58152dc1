"""The tenant's resources besides units: packages and regions (what can be ordered, and
where), storages, SSH keys and secrets."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuctl import spec
from gpuctl.client import path
from gpuctl.commands.collection import Collection, add_commands
from gpuctl.commands.common import Output, client, note
from gpuctl.errors import ExitCode, GpuctlError
from gpuctl.output import Column, Format, age, emit

Name = Annotated[str, typer.Argument(help="its name")]


def _fits(package: Mapping[str, Any]) -> Any:
    return (package.get("availability") or {}).get("placeableNow")


def _price(package: Mapping[str, Any]) -> str:
    price = package.get("price") or {}
    return f"{price.get('hourly', '')} {price.get('currency', '')}".strip()


def _interruptible_price(package: Mapping[str, Any]) -> str:
    offer = package.get("interruptible")
    return f"{offer['hourly']} {offer['currency']}" if offer else "-"


packages = typer.Typer(
    help="What can be ordered, its price, and how many fit now.", no_args_is_help=True
)
PACKAGE_COLUMNS = [
    Column("ID", "id"),
    Column(
        "GPU",
        show=lambda p: f"{p.get('gpu')}x {(p.get('allocation') or {}).get('deviceClassName', '')}",
    ),
    Column("CPU", "cpu"),
    Column("MEMORY", "memory"),
    Column("PRICE/H", show=_price),
    Column("INTERRUPTIBLE/H", show=_interruptible_price),
    Column("FITS NOW", show=_fits),
]


@packages.command("list")
def list_packages(ctx: typer.Context, output: Output = Format.TABLE) -> None:
    """The packages on sale, with what fits now."""
    emit(client(ctx).get("/packages"), output, columns=PACKAGE_COLUMNS)


@packages.command("get")
def get_package(
    ctx: typer.Context,
    package_id: Annotated[str, typer.Argument(help="its ID")],
    output: Output = Format.TABLE,
) -> None:
    """One package."""
    emit(
        client(ctx).get(path("packages", package_id)), output, columns=PACKAGE_COLUMNS, single=True
    )


regions = typer.Typer(help="Where units run, and what fits in each region.", no_args_is_help=True)
REGION_COLUMNS = [
    Column("NAME", "name"),
    Column("TAKES UNITS", "takesUnits"),
    Column(
        "CLUSTERS", show=lambda r: [f"{c['name']} ({c['health']})" for c in r.get("clusters", [])]
    ),
    Column(
        "FITS NOW",
        show=lambda r: [f"{p['packageID']}={p['placeableNow']}" for p in r.get("packages", [])],
    ),
]


@regions.command("list")
def list_regions(ctx: typer.Context, output: Output = Format.TABLE) -> None:
    """The regions, their clusters' health, and what fits in each."""
    emit(client(ctx).get("/regions"), output, columns=REGION_COLUMNS)


storage = typer.Typer(help="Persistent volumes your units mount (--mount).", no_args_is_help=True)
STORAGE_COLUMNS = [
    Column("NAME", "name"),
    Column("SIZE", "size"),
    Column("CLASS", "storageClass"),
    Column("ACCESS", "accessMode"),
    Column("REGION", "region"),
    Column("PHASE", "phase"),
    Column("MOUNTED BY", "mountedBy"),
    Column("AGE", show=lambda s: age(s.get("createdAt"))),
]
add_commands(
    storage,
    Collection(
        "gpu-storages",
        STORAGE_COLUMNS,
        listed="Your storages.",
        one="One storage.",
        delete=(
            "delete",
            "Delete a storage (refused while a live unit mounts it).",
            lambda name: f"deletion of storage {name} requested",
        ),
        shows_deleted=True,
    ),
)


@storage.command("create")
def create_storage(
    ctx: typer.Context,
    name: Name,
    size: Annotated[str, typer.Option("--size", help='a quantity, e.g. "100Gi"')],
    storage_class: Annotated[
        str | None, typer.Option("--class", help="a StorageClass (gpuctl quota lists them)")
    ] = None,
    access_mode: Annotated[
        str | None,
        typer.Option("--access-mode", help="ReadWriteOnce (default), ReadWriteMany, ..."),
    ] = None,
    region: Annotated[
        str | None,
        typer.Option(help="the region it lives in (gpuctl regions list); its units run there"),
    ] = None,
    output: Output = Format.TABLE,
) -> None:
    """Create a storage."""
    body = {
        "name": name,
        "size": size,
        "storageClass": storage_class,
        "accessMode": access_mode,
        "region": region,
    }
    created = (
        client(ctx).call("POST", "/gpu-storages", body={k: v for k, v in body.items() if v}).data
    )
    note(f"storage {created['name']} created")
    emit(created, output, columns=STORAGE_COLUMNS, single=True)


reservations = typer.Typer(
    help="Devices held for you ahead of time (units create --reservation).", no_args_is_help=True
)
RESERVATION_COLUMNS = [
    Column("NAME", "name"),
    Column("PACKAGE", "packageID"),
    Column("COUNT", "count"),
    Column("START", "start"),
    Column("END", "end"),
    Column("REGION", "region"),
    Column("STATUS", "status"),
    Column("HELD", "held"),
    Column("IN USE", "inUse"),
    Column("FREE", "free"),
]
add_commands(
    reservations,
    Collection(
        "reservations",
        RESERVATION_COLUMNS,
        listed="Your reservations, with the slots each holds, uses and has free.",
        one="One reservation.",
        delete=(
            "cancel",
            "Cancel a reservation that has not started (one that started runs to its end).",
            lambda name: f"reservation {name} cancelled",
        ),
        shows_deleted=True,
    ),
)


@reservations.command("create")
def create_reservation(
    ctx: typer.Context,
    name: Name,
    package: Annotated[str, typer.Option("--package", help="a package ID (gpuctl packages list)")],
    start: Annotated[str, typer.Option(help='RFC 3339, e.g. "2026-12-05T09:00:00Z"; or "now"')],
    end: Annotated[str, typer.Option(help="RFC 3339, after --start")],
    count: Annotated[int, typer.Option(help="units' worth of the package to hold")] = 1,
    region: Annotated[
        str | None, typer.Option(help="the region to hold them in (gpuctl regions list)")
    ] = None,
    at_end: Annotated[
        str | None,
        typer.Option("--at-end", help="keep (default: its units run on, on demand) or stop"),
    ] = None,
    output: Output = Format.TABLE,
) -> None:
    """Reserve devices: COUNT units' worth of a package, START to END, billed while held."""
    if start == "now":
        start = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "name": name,
        "packageID": package,
        "count": count,
        "start": start,
        "end": end,
        "region": region,
        "atEnd": at_end,
    }
    made = (
        client(ctx)
        .call("POST", "/reservations", body={k: v for k, v in body.items() if v is not None})
        .data
    )
    note(f"reservation {made['name']} made ({made['status']})")
    emit(made, output, columns=RESERVATION_COLUMNS, single=True)


ssh_keys = typer.Typer(help="Public keys let into units with SSH (--ssh).", no_args_is_help=True)
KEY_COLUMNS = [
    Column("NAME", "name"),
    Column("KIND", "kind"),
    Column("BITS", "bits"),
    Column("FINGERPRINT", "fingerprint"),
    Column("COMMENT", "comment"),
    Column("AGE", show=lambda k: age(k.get("createdAt"))),
]
add_commands(
    ssh_keys,
    Collection(
        "ssh-keys",
        KEY_COLUMNS,
        listed="Your SSH keys.",
        one="One SSH key.",
        delete=(
            "delete",
            "Remove an SSH key (units using it lose it).",
            lambda name: f"SSH key {name} removed",
        ),
    ),
)


@ssh_keys.command("create")
def create_key(
    ctx: typer.Context,
    name: Name,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="a public key file, e.g. ~/.ssh/id_ed25519.pub"),
    ] = None,
    key: Annotated[str | None, typer.Option("--key", help="the public key line itself")] = None,
    output: Output = Format.TABLE,
) -> None:
    """Register an SSH public key."""
    if bool(file) == bool(key):
        raise GpuctlError("give --file PATH or --key TEXT", exit_code=ExitCode.USAGE)
    if file:
        try:
            key = file.read_text(encoding="utf-8").strip()
        except OSError as error:
            raise GpuctlError(f"cannot read {file}: {error}", exit_code=ExitCode.USAGE) from None
    created = client(ctx).call("POST", "/ssh-keys", body={"name": name, "publicKey": key}).data
    note(f"SSH key {created['name']} registered")
    emit(created, output, columns=KEY_COLUMNS, single=True)


secrets = typer.Typer(
    help="Values units read as environment variables (--secret-env); values never come back.",
    no_args_is_help=True,
)
SECRET_COLUMNS = [
    Column("NAME", "name"),
    Column("KEYS", "keys"),
    Column("UPDATED", show=lambda s: age(s.get("updatedAt"))),
]
add_commands(
    secrets,
    Collection(
        "secrets",
        SECRET_COLUMNS,
        listed="Your secrets (their keys, never their values).",
        one="One secret's keys.",
        delete=(
            "delete",
            "Delete a secret (refused while a live unit reads it).",
            lambda name: f"secret {name} deleted",
        ),
    ),
)


@secrets.command("set")
def set_secret(
    ctx: typer.Context,
    name: Name,
    literal: Annotated[
        list[str] | None, typer.Option("--from-literal", help="KEY=VALUE (repeatable)")
    ] = None,
    env_file: Annotated[
        Path | None, typer.Option("--from-env-file", help="a file of KEY=VALUE lines")
    ] = None,
    output: Output = Format.TABLE,
) -> None:
    """Create a secret, or replace all of an existing one's keys and values."""
    data = spec.secret_data(literal or (), env_file)
    reply = client(ctx).call("POST", "/secrets", body={"name": name, "data": data})
    note(f"secret {name} {'created' if reply.status == 201 else 'replaced'}")
    emit(reply.data, output, columns=SECRET_COLUMNS, single=True)

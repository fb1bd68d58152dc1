"""The commands every collection of the API has (the generic edge of the product's resource
declarations, seen from the client): `list` (every page), `get KEY` and a delete, made from one
`Collection`. A resource's own commands (a storage's create, a secret's set) stay beside it.

Annotations here are evaluated where the commands are made (no postponed annotations), so
each command's argument carries its collection's help text."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import typer

from gpuctl.client import path
from gpuctl.commands.common import Output, client, note
from gpuctl.output import Column, Format, emit


@dataclass(frozen=True)
class Collection:
    """A collection at /api/v1/<route>, its table's columns and the words of its commands:
    `listed` and `one` the help of list and get, `key` the argument's help, and the delete as
    (command, help, what it says once done, given the key)."""

    route: str
    columns: list[Column]
    listed: str
    one: str
    delete: tuple[str, str, Callable[[str], str]]
    key: str = "its name"
    shows_deleted: bool = False  # the delete answers the thing as it is now: print it


def add_commands(app: typer.Typer, of: Collection) -> None:
    """`list`, `get` and the delete of `of` on `app`."""
    Key = Annotated[str, typer.Argument(help=of.key)]

    def listed(ctx: typer.Context, output: Output = Format.TABLE) -> None:
        emit(list(client(ctx).pages(f"/{of.route}")), output, columns=of.columns)

    def one(ctx: typer.Context, name: Key, output: Output = Format.TABLE) -> None:
        emit(client(ctx).get(path(of.route, name)), output, columns=of.columns, single=True)

    def delete(ctx: typer.Context, name: Key) -> None:
        client(ctx).call("DELETE", path(of.route, name))
        note(said(name))

    def delete_and_show(ctx: typer.Context, name: Key, output: Output = Format.TABLE) -> None:
        gone = client(ctx).call("DELETE", path(of.route, name)).data
        note(said(name))
        emit(gone, output, columns=of.columns, single=True)

    command, about, said = of.delete
    app.command("list", help=of.listed)(listed)
    app.command("get", help=of.one)(one)
    app.command(command, help=about)(delete_and_show if of.shows_deleted else delete)

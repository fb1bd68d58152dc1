"""The `gpuctl` command: its groups, the root options, and the one place an error becomes a
message on standard error and an exit code."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpuctl import __version__
from gpuctl.commands import account, audit, profiles, resources, units, webhooks
from gpuctl.commands.common import State
from gpuctl.errors import EXIT_CODES_HELP, GpuctlError

app = typer.Typer(
    name="gpuctl",
    help="gpuctl: order and run GPU units of the GPU control plane's API. Set up a profile "
    "first: gpuctl config set-profile NAME --api-url URL --api-key KEY.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(units.app, name="units")
app.add_typer(resources.packages, name="packages")
app.add_typer(resources.regions, name="regions")
app.add_typer(resources.storage, name="storage")
app.add_typer(resources.reservations, name="reservations")
app.add_typer(resources.ssh_keys, name="ssh-keys")
app.add_typer(resources.secrets, name="secrets")
app.add_typer(units.operations, name="operations")
app.add_typer(webhooks.app, name="webhooks")
app.add_typer(audit.app, name="audit")
app.add_typer(profiles.app, name="config")
app.command()(account.quota)
app.command()(account.usage)
app.command()(account.budget)
app.command()(account.statement)


def _version(shown: bool) -> None:
    if shown:
        print(f"gpuctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", help="the profile to use (default: GPUCTL_PROFILE, then the current one)"
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version")
    ] = False,
) -> None:
    ctx.obj = State(profile=profile)


def main() -> None:
    """The console script: run the app; a GpuctlError is a message and its exit code (Ctrl-C
    and a closed pipe, as in `gpuctl units logs NAME | head`, click ends with exit 1)."""
    try:
        app()
    except GpuctlError as error:
        first, *more = error.lines()
        print(f"gpuctl: {first}", *more, sep="\n", file=sys.stderr)
        sys.exit(error.exit_code)

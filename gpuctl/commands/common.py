"""What every command shares: the client of the chosen profile, the `-o`, `--wait` and
`--operation-id` options, and notes on standard error (standard output is the data)."""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import urlsplit

import typer

from gpuctl import config
from gpuctl.client import Client
from gpuctl.output import Format


@dataclass
class State:
    """The root options, and the client made from them on first use."""

    profile: str | None = None
    _client: Client | None = field(default=None, repr=False)

    def settings(self) -> config.Settings:
        path = config.config_path(os.environ)
        return config.resolve(config.load(path), os.environ, profile=self.profile)

    def client(self) -> Client:
        if self._client is None:
            settings = self.settings().require()
            if warning := insecure_url(settings.api_url):
                note(warning)
            self._client = Client(settings.api_url, settings.api_key)
        return self._client


def insecure_url(url: str) -> str:
    """A warning for an API URL that sends the key in clear over a network ("" for https, or
    plain http to this machine)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or (parts.hostname or "") in ("localhost", "127.0.0.1", "::1"):
        return ""
    return (
        f"warning: {url} is plain http: the API key crosses the network unencrypted; "
        "use https:// for anything but this machine."
    )


def client(ctx: typer.Context) -> Client:
    return ctx.ensure_object(State).client()


def note(line: str) -> None:
    """A line for the person at the terminal, kept out of the data on standard output."""
    print(line, file=sys.stderr, flush=True)


def operation_id(given: str | None) -> str:
    """The operationID of a create or action: the one given to retry, else a new one."""
    return given or str(uuid.uuid4())


Output = Annotated[
    Format,
    typer.Option("--output", "-o", help="table, json or yaml", case_sensitive=False),
]
Wait = Annotated[bool, typer.Option("--wait", "-w", help="wait until the unit gets there")]
Timeout = Annotated[
    float, typer.Option("--timeout", min=1, help="seconds --wait waits at most (exit 8 after)")
]
OperationID = Annotated[
    str | None,
    typer.Option(
        "--operation-id",
        help="the operationID to send (default: a new UUID, printed); send a printed one "
        "again to retry safely",
    ),
]
DEFAULT_TIMEOUT = 600.0

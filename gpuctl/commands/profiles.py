"""`gpuctl config`: the profiles in config.toml (an API URL and key each) and which is used."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from gpuctl import config
from gpuctl.commands.common import Output, State, insecure_url, note
from gpuctl.errors import ExitCode, GpuctlError
from gpuctl.output import Column, Format, emit

app = typer.Typer(
    help="Profiles: which API and key gpuctl uses (config.toml under $XDG_CONFIG_HOME/gpuctl, "
    "~/.config/gpuctl by default).",
    no_args_is_help=True,
)
ProfileName = Annotated[str, typer.Argument(help="the profile's name")]


def _path() -> Path:
    return config.config_path(os.environ)


def masked(key: str) -> str:
    """Enough of an API key to tell keys apart, never the whole of it."""
    return f"{key[:8]}…" if len(key) > 12 else ("…" if key else "")


@app.command("set-profile")
def set_profile(
    name: ProfileName,
    api_url: Annotated[
        str | None, typer.Option("--api-url", help="e.g. http://127.0.0.1:8000")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key", help="an API key; - reads it from standard input (kept out of history)"
        ),
    ] = None,
    use: Annotated[
        bool | None,
        typer.Option("--use/--no-use", help="make it the current profile (default: if none is)"),
    ] = None,
) -> None:
    """Create a profile, or change the values given of an existing one."""
    config.check_profile_name(name)
    if api_key == "-":
        api_key = sys.stdin.readline().strip()
    elif api_key:
        note(
            "note: a key given on the command line stays in your shell's history (and shows in "
            "the process list while this runs); `--api-key -` reads it from standard input."
        )
    if api_url and (warning := insecure_url(api_url)):
        note(warning)
    path = _path()
    found = config.load(path)
    profile = found.profiles.get(name, config.Profile())
    profile = replace(
        profile,
        api_url=api_url.rstrip("/") if api_url else profile.api_url,
        api_key=api_key or profile.api_key,
    )
    if not profile.api_url:
        raise GpuctlError("a new profile needs --api-url", exit_code=ExitCode.USAGE)
    found.profiles[name] = profile
    if use or (use is None and not found.current):
        found.current = name
    config.save(found, path)
    current = " (current)" if found.current == name else ""
    note(f"profile {name}{current} saved in {path}")


@app.command()
def use(name: ProfileName) -> None:
    """Make a profile the current one."""
    path = _path()
    found = config.load(path)
    if name not in found.profiles:
        raise GpuctlError(
            f"no profile {name!r} in {path} (gpuctl config list)", exit_code=ExitCode.USAGE
        )
    found.current = name
    config.save(found, path)
    note(f"using profile {name}")


@app.command("delete-profile")
def delete_profile(name: ProfileName) -> None:
    """Remove a profile."""
    path = _path()
    found = config.load(path)
    if found.profiles.pop(name, None) is None:
        raise GpuctlError(f"no profile {name!r} in {path}", exit_code=ExitCode.USAGE)
    if found.current == name:
        found.current = ""
    config.save(found, path)
    note(f"profile {name} removed")


@app.command("list")
def list_profiles(output: Output = Format.TABLE) -> None:
    """The profiles (* the current one)."""
    found = config.load(_path())
    rows = [
        {
            "name": name,
            "current": name == found.current,
            "apiUrl": profile.api_url,
            "apiKey": masked(profile.api_key),
        }
        for name, profile in sorted(found.profiles.items())
    ]
    columns = [
        Column("", show=lambda row: "*" if row["current"] else ""),
        Column("NAME", "name"),
        Column("API URL", "apiUrl"),
        Column("API KEY", "apiKey"),
    ]
    emit(rows, output, columns=columns)


@app.command()
def show(ctx: typer.Context, output: Output = Format.TABLE) -> None:
    """What a command would use now (flags, GPUCTL_* variables and profile applied)."""
    settings = ctx.ensure_object(State).settings()
    shown = {
        "configFile": str(_path()),
        "profile": settings.profile,
        "apiUrl": settings.api_url,
        "apiKey": masked(settings.api_key),
        "from": {
            "profile": settings.sources["profile"],
            "apiUrl": settings.sources["api_url"],
            "apiKey": settings.sources["api_key"],
        },
    }
    columns = [
        Column("config file", "configFile"),
        Column("profile", show=lambda s: f"{s['profile']} (from {s['from']['profile']})"),
        Column("API URL", show=lambda s: f"{s['apiUrl']} (from {s['from']['apiUrl']})"),
        Column("API key", show=lambda s: f"{s['apiKey']} (from {s['from']['apiKey']})"),
    ]
    emit(shown, output, columns=columns, single=True)

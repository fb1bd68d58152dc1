"""Every `--help` page of gpuctl renders (issue 43: `units create --help`, the page the README
points to, crashed on its `--port` text, which Rich read as markup)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gpuctl.main import app


def command_paths(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command's words, the groups' too (typer carries a click of its own: a group is
    what has subcommands)."""
    yield path
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from command_paths(sub, (*path, name))


PATHS = list(command_paths(typer.main.get_command(app)))


def test_every_command_is_walked():
    assert ("units", "create") in PATHS
    assert len(PATHS) > 50


@pytest.mark.parametrize("path", PATHS, ids=lambda path: " ".join(path) or "gpuctl")
def test_the_help_page_renders(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "Usage:" in result.output
    assert "Traceback" not in result.output


def test_the_port_help_shows_its_brackets():
    result = CliRunner().invoke(app, ["units", "create", "--help"], env={"COLUMNS": "200"})
    assert "NAME:PORT[/PROTOCOL]" in result.output

"""`python -m devstack.settings_reference [--check]`: docs/settings.md, the reference of every
environment variable the product reads, generated from `controlplane/settings.py`: each
variable read there (`env.<type>("NAME", ...)`, or a local helper `_x("NAME", ...)`), its
default as written, and the comment above its statement (or above the statements it is
grouped with, no blank line between). `--check` fails when docs/settings.md differs, so the
reference cannot drift from the code (`make lint`)."""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "controlplane" / "settings.py"
TARGET = ROOT / "docs" / "settings.md"
NAME = re.compile(r"[A-Z][A-Z0-9_]+")
# django-environ's readers: without a default the variable is required (a local helper has
# a default of its own, empty).
ENV_KINDS = {"str", "int", "float", "bool", "list", "dict", "json", "url", "db_url", "cache_url"}
HEADER = """# Settings

Every setting comes from the environment (`k8s/control-plane/configmap.yaml` and the Secret on
a real cluster; `make run` and the tests set what they need). This page is generated from
`controlplane/settings.py` by `python -m devstack.settings_reference`, and `make lint` fails
when it differs: change the comment above a setting there, not here. Back to the
[README](../README.md).

| variable | type | default | meaning |
| --- | --- | --- | --- |
"""


@dataclass
class Setting:
    name: str
    kind: str
    defaults: list[str] = field(default_factory=list)
    meaning: str = ""


def _comment_above(lines: list[str], lineno: int) -> str:
    """The comment block above line `lineno` (1-based), climbing over the code lines of its
    group first (no blank line between)."""
    index = lineno - 2
    while index >= 0 and lines[index].strip() and not lines[index].lstrip().startswith("#"):
        index -= 1
    block: list[str] = []
    while index >= 0 and lines[index].lstrip().startswith("#"):
        block.append(lines[index].strip().lstrip("#").strip())
        index -= 1
    return " ".join(reversed(block))


def _default(call: ast.Call, source: str) -> str:
    """The default as written (whitespace folded), or "" when the variable is required."""
    node = next((k.value for k in call.keywords if k.arg == "default"), None)
    if node is None and len(call.args) > 1:
        node = call.args[1]
    if node is None:
        return ""
    return " ".join((ast.get_source_segment(source, node) or "").split())


def _kind(call: ast.Call) -> str | None:
    """env.<kind>(...), or a local helper's name; None for any other call."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr if func.value.id == "env" else None
    if isinstance(func, ast.Name) and func.id.startswith("_"):
        return func.id.lstrip("_")
    return None


def settings(source: str) -> list[Setting]:
    """Each variable read, in the order the file first reads it."""
    lines = source.splitlines()
    found: dict[str, Setting] = {}
    calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]
    for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
        first = call.args[0] if call.args else None
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            continue
        kind = _kind(call)
        if kind is None or not NAME.fullmatch(first.value):
            continue
        setting = found.setdefault(first.value, Setting(first.value, kind))
        default = _default(call, source) or ("required" if kind in ENV_KINDS else "empty")
        if default not in setting.defaults:
            setting.defaults.append(default)
        if not setting.meaning:
            setting.meaning = _comment_above(lines, call.lineno)
    for setting in found.values():
        if "required" in setting.defaults:
            # An empty default beside a required read is a check that it is set.
            setting.defaults = [d for d in setting.defaults if d != '""']
    return list(found.values())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _value(default: str) -> str:
    return default if default in {"required", "empty"} else f"`{_cell(default)}`"


def render(source: str) -> str:
    rows = [
        f"| `{s.name}` | {s.kind} | {' or '.join(_value(d) for d in s.defaults)} "
        f"| {_cell(s.meaning)} |"
        for s in settings(source)
    ]
    return HEADER + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.settings_reference")
    parser.add_argument("--check", action="store_true", help="fail when docs/settings.md differs")
    args = parser.parse_args(argv)
    wanted = render(SOURCE.read_text())
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != wanted:
            print(
                f"{TARGET.relative_to(ROOT)} is not what controlplane/settings.py says: run "
                "`python -m devstack.settings_reference` and commit it",
                file=sys.stderr,
            )
            return 1
        return 0
    TARGET.write_text(wanted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How gpuctl shows what the API answered: `-o table` (rich tables of chosen columns, or a
field/value table for one object), `-o json` and `-o yaml` (the API's `data` as it came)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import IO, Any

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


@dataclass(frozen=True)
class Column:
    """A column of a table: its header and the value of each record, by dotted path into the
    record (`access.url`) or computed (`show`)."""

    header: str
    path: str = ""
    show: Callable[[Mapping[str, Any]], Any] | None = None

    def value(self, record: Mapping[str, Any]) -> Any:
        return self.show(record) if self.show else dig(record, self.path)


def dig(record: Any, dotted: str) -> Any:
    """`record["a"]["b"]` for "a.b"; None where the path ends early."""
    for part in dotted.split("."):
        if not isinstance(record, Mapping):
            return None
        record = record.get(part)
    return record


PHASE_STYLES = {
    "Running": "green",
    "Failed": "red",
    "Pending": "yellow",
    "Stopped": "dim",
    "Preempted": "yellow",
    "Terminated": "dim",
}


def cell(value: Any) -> Text:
    """One value as table text: nothing for None, lists joined, objects as compact JSON."""
    if value is None or value == "":
        return Text("")
    if isinstance(value, Text):
        return value
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if isinstance(value, list | tuple):
        return Text(", ".join(cell(item).plain for item in value))
    if isinstance(value, Mapping):
        return Text(json.dumps(value, separators=(",", ":"), sort_keys=True))
    return Text(str(value), style=PHASE_STYLES.get(str(value), ""))


def age(stamp: str | None, *, now: datetime | None = None) -> str:
    """How long ago an RFC 3339 time was, as `kubectl get` says it: 45s, 12m, 3h, 5d."""
    if not stamp:
        return ""
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def table(records: Iterable[Mapping[str, Any]], columns: Sequence[Column]) -> Table:
    grid = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        grid.add_column(column.header, overflow="fold")
    for record in records:
        grid.add_row(*(cell(column.value(record)) for column in columns))
    return grid


def fields(record: Mapping[str, Any], columns: Sequence[Column]) -> Table:
    """One object as a field/value table of `columns` (rows without a value left out)."""
    grid = Table(box=None, show_header=False, pad_edge=False)
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for column in columns:
        value = cell(column.value(record))
        if value.plain:
            grid.add_row(column.header, value)
    return grid


def serialize(data: Any, format: Format) -> str:
    if format is Format.JSON:
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)


def console(file: IO[str] | None = None) -> Console:
    """A console for tables: as wide as the terminal, and never wrapping rows when piped."""
    out = file or sys.stdout
    return Console(file=out, width=None if out.isatty() else 4096, soft_wrap=False)


def emit(
    data: Any,
    format: Format,
    *,
    columns: Sequence[Column],
    single: bool = False,
    caption: str = "",
    file: IO[str] | None = None,
) -> None:
    """Print `data` (a list of records, or one record with `single`) in `format`; a table
    gets `caption` under it."""
    out = file or sys.stdout
    if format is not Format.TABLE:
        out.write(serialize(data, format))
        return
    printer = console(out)
    with printer.capture() as captured:
        printer.print(fields(data, columns) if single else table(data, columns))
    # Cells are padded to their column's width: no line ends in spaces for grep or diff.
    out.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    if caption:
        out.write(caption + "\n")

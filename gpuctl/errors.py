"""What can go wrong in gpuctl, and the exit code each kind of failure gives: the API's error
envelope (`{"error": {"code", "message", "details"}}`) becomes an ApiError whose class of HTTP
status picks the code, so scripts can tell a typo from a conflict from an outage."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # anything not below
    USAGE = 2  # bad arguments or configuration; the API's 400 (invalid_request, ...)
    NOT_FOUND = 3  # 404
    CONFLICT = 4  # 409 (name_conflict, invalid_state, quota_exceeded, ...), 412
    AUTH = 5  # 401, 403: no key, a wrong or revoked one, an operator-only route
    THROTTLED = 6  # 429: too many requests, or followed logs (see Retry-After)
    UNAVAILABLE = 7  # 5xx, or the API could not be reached: retrying later may work
    WAIT = 8  # --wait: the unit failed, its operation failed, or --timeout passed


EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 other error; 2 usage or invalid request (400); 3 not found (404); "
    "4 conflict (409, 412); 5 authentication or permission (401, 403); 6 throttled (429); "
    "7 server error or unreachable (5xx); 8 --wait gave up (the unit or its operation "
    "failed, or --timeout passed)."
)


def exit_code_for(status: int) -> ExitCode:
    """The exit code of an HTTP error status (0: no answer at all)."""
    if status == 0 or status >= 500:
        return ExitCode.UNAVAILABLE
    if status in (401, 403):
        return ExitCode.AUTH
    if status == 404:
        return ExitCode.NOT_FOUND
    if status in (409, 412):
        return ExitCode.CONFLICT
    if status == 429:
        return ExitCode.THROTTLED
    if 400 <= status < 500:
        return ExitCode.USAGE
    return ExitCode.ERROR


class GpuctlError(Exception):
    """A failure to report in a few lines and exit with `exit_code`, without a traceback."""

    def __init__(self, message: str, *, exit_code: ExitCode = ExitCode.ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def lines(self) -> list[str]:
        return [self.message]


class ApiError(GpuctlError):
    """An error answer of the API (or none: `status` 0 when it could not be reached)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Mapping[str, Any] | None = None,
        *,
        retry_after: str = "",
    ) -> None:
        super().__init__(message, exit_code=exit_code_for(status))
        self.status = status
        self.code = code
        self.details: Mapping[str, Any] = details or {}
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        """Worth asking again as it is: the API was busy, down or unreachable."""
        return self.exit_code in (ExitCode.THROTTLED, ExitCode.UNAVAILABLE)

    def lines(self) -> list[str]:
        status = f"{self.status} {self.code}" if self.status else self.code
        lines = [f"{self.message} ({status})"]
        lines += [
            f"  {path}: {text}" if path else f"  {text}" for path, text in problems(self.details)
        ]
        if self.retry_after:
            lines.append(f"  retry after {self.retry_after} s")
        return lines


def problems(details: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(field path, message) for each problem the envelope's `details` names: `fields` (by
    path, as nested as the request: `template.ports[0].port`), `errors`, then anything else
    (`limit`, `fields` of an immutable field) as `key: value`."""
    for key, value in details.items():
        if key in ("fields", "errors"):
            yield from _flatten(value, "")
        else:
            yield key, value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _flatten(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _flatten(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            if isinstance(inner, Mapping | list):
                yield from _flatten(inner, f"{path}[{index}]")
            else:
                yield path, str(inner)
    elif value is not None:
        yield path, str(value)

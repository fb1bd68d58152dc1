"""The client of the fault proxy (devstack/kube/faultproxy): what a test injects between the
control plane and a development cluster's API server, and the requests it saw."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RequestEntry:
    verb: str
    resource: str | None
    namespace: str | None
    name: str | None
    code: int
    subresource: str | None = None
    path: str = ""


class FaultProxy:
    """Rules by (verb, resource), None matching any; `resource` is a plural, or
    `plural.group` for a grouped kind ("resourceclaims" matches both)."""

    def __init__(self, control: str) -> None:
        self.control = control.rstrip("/")
        self._rules: dict[tuple[str | None, str | None], dict[str, Any]] = {}
        self.requests = RequestLog(self)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.control + path, data=data, method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
        return json.loads(text) if text else None

    def set(
        self,
        verb: str | None = None,
        resource: str | None = None,
        *,
        error_rate: float = 0.0,
        status: int = 500,
        latency: float = 0.0,
        timeout: bool = False,
        timeout_rate: float = 0.0,
    ) -> None:
        """Add or replace the rule for (verb, resource): `error_rate` of the requests fail with
        `status`, `timeout_rate` of them (all with `timeout`) hang until the client gives up
        and are then dropped unanswered, each waits `latency` seconds first."""
        self._rules[(verb, resource)] = {
            "verb": verb or "",
            "resource": resource or "",
            "errorRate": error_rate,
            "status": status,
            "latency": latency,
            "timeout": timeout,
            "timeoutRate": timeout_rate,
        }
        self._call("PUT", "/rules", list(self._rules.values()))

    def clear(self) -> None:
        """No rules, and reachable."""
        self._rules.clear()
        self._call("DELETE", "/rules")

    @property
    def unreachable(self) -> bool:
        return bool(self._call("GET", "/state")["unreachable"])

    @unreachable.setter
    def unreachable(self, value: bool) -> None:
        """Unreachable: connections are reset, open ones too, until it is set back."""
        self._call("PUT", "/unreachable", {"on": value})

    def drop_watches(self) -> None:
        """Cut every open watch stream as a failing network would."""
        self._call("POST", "/drop-watches")

    @property
    def watch_drops(self) -> int:
        return int(self._call("GET", "/state")["watchDrops"])


class RequestLog:
    """The requests the proxy forwarded (or failed), from the last `clear()`."""

    def __init__(self, proxy: FaultProxy) -> None:
        self._proxy = proxy
        self._after = 0

    def clear(self) -> None:
        self._after = int(self._proxy._call("GET", "/state")["seq"])

    def entries(self) -> list[RequestEntry]:
        found = self._proxy._call("GET", f"/requests?after={self._after}")
        return [
            RequestEntry(
                verb=e["verb"],
                resource=e["resource"] or None,
                namespace=e["namespace"] or None,
                name=e["name"] or None,
                code=e["code"],
                subresource=e["subresource"] or None,
                path=e["path"],
            )
            for e in found
        ]

    def count(self, verb: str | None = None, resource: str | None = None) -> int:
        return sum(
            1
            for entry in self.entries()
            if (verb is None or entry.verb == verb)
            and (
                resource is None
                or entry.resource == resource
                or (entry.resource or "").split(".")[0] == resource
            )
        )

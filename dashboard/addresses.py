"""How the unit page shows where a unit is reached: its URL and endpoints as runtime.access
derives them, each marked as a link a browser can open, text to copy, or not known yet; and
its ssh command."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from runtime import access
from runtime.models import GPUUnit

IN_CLUSTER = ".svc.cluster.local"


@dataclass(frozen=True)
class Address:
    url: str | None

    @property
    def kind(self) -> str:
        """ "link" for a public web address; "in-cluster" for one only other pods can open
        (a browser's link would go nowhere); "text" for tcp:// and udp:// addresses, which
        are copied into a client, not clicked; "unknown" until the cluster has assigned it."""
        if not self.url:
            return "unknown"
        parts = urlsplit(self.url)
        if (parts.hostname or "").endswith(IN_CLUSTER):
            return "in-cluster"
        return "link" if parts.scheme in ("http", "https") else "text"


@dataclass(frozen=True)
class Endpoint:
    name: str
    port: int
    protocol: str
    address: Address
    primary: bool


@dataclass(frozen=True)
class UnitAccess:
    scheme: str
    primary: Endpoint | None
    endpoints: list[Endpoint]


def unit_access(unit: GPUUnit) -> UnitAccess | None:
    """The unit's addresses, or None when its template has no ports (nothing to reach)."""
    shown = access.for_unit(unit)
    if not shown["endpoints"]:
        return None
    endpoints = [
        Endpoint(
            name=endpoint["name"],
            port=endpoint["port"],
            protocol=endpoint["protocol"],
            address=Address(endpoint["url"]),
            primary=endpoint["name"] == shown.get("primaryPort"),
        )
        for endpoint in shown["endpoints"]
    ]
    return UnitAccess(
        scheme=shown.get("scheme", ""),
        primary=next((endpoint for endpoint in endpoints if endpoint.primary), None),
        endpoints=endpoints,
    )


def unit_ssh(unit: GPUUnit) -> dict | None:
    """The unit's `ssh` as the API gives it ({keys, username, host, port, command}; the
    command None until the node port and the host are known), or None when SSH is off. Key
    names only: no key material reaches the page."""
    shown = access.ssh_for_unit(unit)
    return shown if shown["enabled"] else None

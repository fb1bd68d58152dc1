"""The address ranges of every registered cluster (pods, Services, nodes), for the checks that
keep a tenant's URL from reaching inside one (tenancy/webhook_http.py).

The inventory registers where the ranges come from (its `Cluster` rows) at start, as it does
for kube's resolver and the queues; until it has, the process's own cluster's ranges from the
settings are all there is."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

_registered: Callable[[], list[str]] | None = None


def register(ranges: Callable[[], list[str]]) -> None:
    global _registered
    _registered = ranges


def cluster_ranges() -> list[str]:
    """Every registered cluster's ranges and the process's own (CIDR strings)."""
    own = [
        *settings.CLUSTER_POD_CIDRS,
        *settings.CLUSTER_SERVICE_CIDRS,
        *settings.CLUSTER_NODE_CIDRS,
    ]
    return own + (_registered() if _registered is not None else [])

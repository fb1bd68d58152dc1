"""The cluster registry (ARCHITECTURE §20): which clusters units are placed in, how each is
reached, its region, and whether it is healthy.

The registry is never empty: with no `Cluster` row (a fresh database, or every row deleted), the
process's own cluster (KUBECONFIG, or the service account) stands in as CLUSTER_NAME in
CLUSTER_REGION, so one cluster configured by KUBECONFIG alone behaves as before the registry;
`migrate` records it as a row an operator can edit (apps.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings

from controlplane import kube
from controlplane.validation import file_name
from inventory.models import Cluster


class Health:
    REACHABLE = "reachable"
    UNREACHABLE = "unreachable"
    UNKNOWN = "unknown"  # not listed yet since it was registered


# cluster name -> how many live units it holds (registered by runtime: apps.py)
_live_units: Callable[[str], int] | None = None


def register_live_units(counter: Callable[[str], int]) -> None:
    global _live_units
    _live_units = counter


def live_units(name: str) -> int:
    """Live units placed in cluster `name`: while there are any, it stays enabled and
    registered (its units are observed and reconciled through it)."""
    return _live_units(name) if _live_units is not None else 0


def implicit() -> Cluster:
    """The cluster that stands in while no row is registered (not saved)."""
    return Cluster(
        name=settings.CLUSTER_NAME,
        region=settings.CLUSTER_REGION,
        display_name=settings.CLUSTER_NAME,
    )


def registered() -> list[Cluster]:
    """Every registered cluster, in placement order (the implicit one when there is none)."""
    return list(Cluster.objects.all()) or [implicit()]


def enabled(clusters: Iterable[Cluster] | None = None) -> list[Cluster]:
    return [c for c in (registered() if clusters is None else clusters) if c.enabled]


def enabled_names() -> list[str]:
    return [cluster.name for cluster in enabled()]


def named(name: str) -> Cluster | None:
    if (row := Cluster.objects.filter(name=name).first()) is not None:
        return row
    if name == settings.CLUSTER_NAME and not Cluster.objects.exists():
        return implicit()
    return None


def reach(name: str) -> kube.Reach | None:
    """kube's resolver: how to reach cluster `name`."""
    cluster = named(name)
    if cluster is None:
        return None
    if not cluster.kubeconfig:
        return kube.Reach(context=cluster.kube_context)
    if problem := file_name(cluster.kubeconfig):
        # A row written around the model's validator: never read a path it chose.
        raise kube.KubeError(f"cluster {name}: kubeconfig {problem}", reason="NotConfigured")
    path = Path(settings.CLUSTER_CREDENTIALS_DIR) / cluster.kubeconfig
    return kube.Reach(kubeconfig=str(path), context=cluster.kube_context)


def own_ranges(name: str) -> list[str]:
    """Cluster `name`'s own pod, service and node ranges, which no rule meaning "the internet"
    may reach: its row's, or, for the process's own cluster (kube.HOME) and a cluster that
    names none, CLUSTER_POD/SERVICE/NODE_CIDRS (no query for kube.HOME)."""
    cluster = None if name == kube.HOME else named(name)
    ranges = [*cluster.pod_cidrs, *cluster.service_cidrs, *cluster.node_cidrs] if cluster else []
    return ranges or [
        *settings.CLUSTER_POD_CIDRS,
        *settings.CLUSTER_SERVICE_CIDRS,
        *settings.CLUSTER_NODE_CIDRS,
    ]


def all_ranges() -> list[str]:
    """The pod, service and node ranges every registered cluster names (one query)."""
    ranges: list[str] = []
    for pods, services, nodes in Cluster.objects.values_list(
        "pod_cidrs", "service_cidrs", "node_cidrs"
    ):
        ranges += [*pods, *services, *nodes]
    return ranges


def health(as_of: datetime | None, *, failing: bool, now: datetime) -> str:
    """A cluster's health from its mirror: reachable while listed within
    CLUSTER_LOST_AFTER_SECONDS, or while its listings succeed; unreachable once they fail and
    the last success (`as_of`) is older than that; unknown before any listing."""
    if as_of is None:
        return Health.UNREACHABLE if failing else Health.UNKNOWN
    lost = now - as_of > timedelta(seconds=settings.CLUSTER_LOST_AFTER_SECONDS)
    return Health.UNREACHABLE if lost and failing else Health.REACHABLE


def ensure_registered() -> None:
    """With no row, record the implicit cluster as one (after `migrate`: apps.py)."""
    if not Cluster.objects.exists():
        stand_in = implicit()
        Cluster.objects.get_or_create(
            name=stand_in.name,
            defaults={"region": stand_in.region, "display_name": stand_in.display_name},
        )


@dataclass(frozen=True)
class Region:
    name: str
    clusters: list[Cluster]


def regions(clusters: Iterable[Cluster]) -> list[Region]:
    """The regions of `clusters`, each with its clusters, in the clusters' placement order."""
    by_region: dict[str, list[Cluster]] = {}
    for cluster in clusters:
        by_region.setdefault(cluster.region, []).append(cluster)
    return [Region(name, members) for name, members in by_region.items()]


def region_names() -> list[str]:
    return [r.name for r in regions(enabled())]

"""Which cluster a call goes to.

Every call of this package goes to the cluster named by `using(name)` around it (a context
variable, so each thread and each task carries its own); with none in effect, to the process's
own cluster (HOME): KUBECONFIG (and KUBE_CONTEXT), or the in-cluster service account.

Other names are resolved by the registry a higher layer registers at start (the inventory's
`Cluster` rows, ARCHITECTURE §20) into a `Reach`; a Reach without a kubeconfig, and every name
while no registry is registered, is the process's own cluster. HOME never asks the registry, so
a connection to it needs no database. Resolving is done once per process and cluster;
`client.reset()` forgets every connection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from controlplane.kube.errors import KubeError

HOME = ""  # the process's own cluster


@dataclass(frozen=True)
class Reach:
    """How to reach a cluster: a kubeconfig file (and context in it); with none, the process's
    own cluster."""

    kubeconfig: str = ""
    context: str = ""


# a cluster's name -> its Reach, or None when no cluster has that name
Resolver = Callable[[str], "Reach | None"]

_current: ContextVar[str] = ContextVar("kube_cluster", default=HOME)
_resolver: Resolver | None = None


def register(resolver: Resolver) -> None:
    """The registry's lookup: a cluster's name to its Reach (raises KubeError when unknown)."""
    global _resolver
    _resolver = resolver


def current_cluster() -> str:
    """The name calls go to now (HOME when no `using` is in effect)."""
    return _current.get()


@contextmanager
def using(name: str) -> Iterator[str]:
    """Send the calls made inside to cluster `name` (HOME: the process's own)."""
    token = _current.set(name)
    try:
        yield name
    finally:
        _current.reset(token)


def reach(name: str) -> Reach:
    """The Reach of cluster `name` (KubeError when the registry knows no such cluster)."""
    if name == HOME or _resolver is None:
        return Reach()
    found = _resolver(name)
    if found is None:
        raise KubeError(f"no cluster named {name!r} is registered", reason="NotConfigured")
    return found

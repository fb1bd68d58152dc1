"""SimCluster: the in-process entry point that wires store, HTTP server, controllers and seeding."""

from __future__ import annotations

import threading
from pathlib import Path

import yaml

from simcluster.faults import FaultInjector, RequestLog
from simcluster.persistence import Persister
from simcluster.quota import QuotaController
from simcluster.scheduler import Scheduler
from simcluster.server import SimServer
from simcluster.store import Store
from simcluster.topology import load_topology

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class SimCluster:
    """A simulated Kubernetes API server with DRA controllers, started on a thread."""

    def __init__(
        self,
        *,
        topology: str | Path | dict | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        persist_path: str | Path | None = None,
        scheduler: bool = True,
        seed: int = 0,
        bookmark_interval: float = 60.0,
    ) -> None:
        self.topology = topology
        self.host = host
        self.port = port
        self.store = Store(seed=seed)
        self.faults = FaultInjector(seed=seed)
        self.requests = RequestLog()
        self._persister = Persister(self.store, persist_path) if persist_path else None
        self._run_scheduler = scheduler
        self.bookmark_interval = bookmark_interval
        self.scheduler: Scheduler | None = None
        self.quota: QuotaController | None = None
        self._server: SimServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> SimCluster:
        if self._persister:
            self._persister.load()
        self._seed_namespaces()
        self._seed_topology()
        self.quota = QuotaController(self.store)
        self.quota.install()
        if self._persister:
            self._persister.start()
        self._server = SimServer((self.host, self.port), self.store, self.faults, self.requests)
        self._server.bookmark_interval = self.bookmark_interval
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="simcluster-http",
            daemon=True,
        )
        self._thread.start()
        if self._run_scheduler:
            self.scheduler = Scheduler(self.store)
            self.scheduler.start()
        return self

    def stop(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None
        if self._server is not None:
            self._server.stopping.set()
            self.store.close_watchers()
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._persister:
            self._persister.stop()

    def __enter__(self) -> SimCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: str | Path) -> Path:
        """A kubeconfig (plain HTTP, no credentials) pointing kubectl and clients at this server."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "simcluster", "cluster": {"server": self.url}}],
            "users": [{"name": "simcluster", "user": {}}],
            "contexts": [
                {
                    "name": "simcluster",
                    "context": {
                        "cluster": "simcluster",
                        "user": "simcluster",
                        "namespace": "default",
                    },
                }
            ],
            "current-context": "simcluster",
            "preferences": {},
        }
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        return target

    def _seed_namespaces(self) -> None:
        for name in SYSTEM_NAMESPACES:
            if self.store.get("namespaces", None, name) is None:
                self.store.create("namespaces", {"metadata": {"name": name}}, internal=True)

    def _seed_topology(self) -> None:
        for resource, obj in load_topology(self.topology):
            metadata = obj.get("metadata") or {}
            # A restored cluster keeps its objects (and their allocations); only fill gaps.
            if (
                self.store.get(resource, metadata.get("namespace"), metadata.get("name", ""))
                is None
            ):
                self.store.create(resource, obj, internal=True)

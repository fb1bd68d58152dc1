"""SimCluster: the in-process entry point that wires store, HTTP server, controllers and seeding."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from simcluster.faults import FaultInjector, RequestLog
from simcluster.features import DEFAULT_VERSION, FeatureGates
from simcluster.gateway import SimGateway
from simcluster.kubelet import ContainerLogs, Kubelet
from simcluster.network import NetworkAllocator
from simcluster.persistence import Persister
from simcluster.quota import QuotaController
from simcluster.scheduler import Scheduler
from simcluster.server import SimServer
from simcluster.store import Store
from simcluster.topology import load_topology
from simcluster.volumes import VolumeController

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# The Services every cluster has, at the addresses kubeadm gives them.
SYSTEM_SERVICES: tuple[dict[str, Any], ...] = (
    {
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"component": "apiserver", "provider": "kubernetes"},
        },
        "spec": {
            "clusterIP": "10.96.0.1",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
        },
    },
    {
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
        },
        "spec": {
            "clusterIP": "10.96.0.10",
            "selector": {"k8s-app": "kube-dns"},
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
            ],
        },
    },
)


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
        device_taint_rules: bool = True,
        emulated_version: str = DEFAULT_VERSION,
        feature_gates: Mapping[str, bool] | None = None,
        gateway_port: int | None = None,
    ) -> None:
        """`emulated_version` ("1.34", "1.35" or "1.36") is the Kubernetes version served:
        its /version, its nodes' kubelets and its feature gates' defaults, which
        `feature_gates` changes as a cluster's `--feature-gates` does (ValueError for a gate
        the version does not have). `device_taint_rules=False` serves no DeviceTaintRule kind
        whatever the gates say (list and watch answer 404); slice taints still apply.
        `gateway_port` (0: a free one) serves the simulated gateway's data plane there: port
        80 of the Gateways the simulated controller programs (simcluster.gateway)."""
        self.topology = topology
        self.host = host
        self.port = port
        self.features = FeatureGates(emulated_version, feature_gates)
        self.store = Store(seed=seed, features=self.features)
        if not device_taint_rules:
            self.store.registry.unregister("devicetaintrules")
        self.faults = FaultInjector(seed=seed)
        self.requests = RequestLog()
        self.logs = ContainerLogs()
        self.kubelet = Kubelet(self.store, self.logs)
        self._persister = (
            Persister(self.store, persist_path, logs=self.logs) if persist_path else None
        )
        self._run_scheduler = scheduler
        self.bookmark_interval = bookmark_interval
        self.scheduler: Scheduler | None = None
        self.quota: QuotaController | None = None
        self.volumes: VolumeController | None = None
        self._server: SimServer | None = None
        self._thread: threading.Thread | None = None
        self.gateway = (
            SimGateway(self.store, host=host, port=gateway_port)
            if gateway_port is not None
            else None
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> SimCluster:
        if self._persister:
            self._persister.load()
        NetworkAllocator(self.store).install()
        self.volumes = VolumeController(self.store)
        self.volumes.install()
        self._seed_namespaces()
        self._seed_topology()
        self.quota = QuotaController(self.store)
        self.quota.install()
        if self._persister:
            self._persister.start()
        self._server = SimServer(
            (self.host, self.port), self.store, self.faults, self.requests, self.logs
        )
        self._server.bookmark_interval = self.bookmark_interval
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="simcluster-http",
            daemon=True,
        )
        self._thread.start()
        if self.gateway is not None:
            self.gateway.start()
        self.volumes.start()
        if self._run_scheduler:
            self.scheduler = Scheduler(self.store, kubelet=self.kubelet)
            self.scheduler.start()
        return self

    def stop(self) -> None:
        if self.gateway is not None:
            self.gateway.stop()
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None
        if self.volumes is not None:
            self.volumes.stop()
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
        # Written aside and renamed into place: whoever waits for the file to appear (the
        # benches, make run) never reads it half-written.
        partial = target.with_name(f".{target.name}.partial")
        partial.write_text(yaml.safe_dump(config, sort_keys=False))
        partial.replace(target)
        return target

    # -- test hooks: what a container does --------------------------------------------------

    def append_log(
        self,
        namespace: str,
        pod: str,
        lines: Iterable[str] | str,
        *,
        container: str | None = None,
    ) -> None:
        """Append lines to a running container's log, as if it printed them; `container` may be
        left out for a pod with one container. ValueError if it is not running."""
        self.kubelet.append_log(namespace, pod, lines, container)

    def on_sigterm(
        self,
        namespace: str,
        pod: str,
        *,
        exit_after: float | None,
        container: str | None = None,
    ) -> None:
        """What a running container does when its pod is deleted: exit `exit_after` seconds
        after SIGTERM, or with None ignore it and be killed when the pod's grace period ends.
        By default a container exits at once."""
        self.kubelet.on_sigterm(namespace, pod, container, exit_after=exit_after)

    def fail_container(
        self,
        namespace: str,
        pod: str,
        *,
        container: str | None = None,
        exit_code: int = 1,
        reason: str = "Error",
        message: str | None = None,
        lines: Iterable[str] = (),
    ) -> dict[str, Any]:
        """Make a running container exit (after logging `lines`): restarted with restartCount
        + 1 and lastState.terminated under restartPolicy Always (OnFailure for a non-zero
        code), else left terminated with the pod Failed/Succeeded. Returns the pod."""
        return self.kubelet.fail_container(
            namespace,
            pod,
            container,
            exit_code=exit_code,
            reason=reason,
            message=message,
            lines=lines,
        )

    # -- test hooks: device health ----------------------------------------------------------

    def taint_device(
        self,
        driver: str,
        pool: str,
        device: str,
        *,
        effect: str = "NoExecute",
        key: str = "simcluster.lokiwager.io/unhealthy",
        value: str = "",
    ) -> str:
        """Taint one device as an admin would, with a DeviceTaintRule (validated like any API
        write) selecting it by driver, pool and name; returns the rule's name, which
        `untaint_device` takes. NoExecute evicts the pods using it."""
        name = f"sim-{hashlib.sha256(f'{driver}/{pool}/{device}/{key}'.encode()).hexdigest()[:12]}"
        taint = {"key": key, "effect": effect, **({"value": value} if value else {})}
        self.store.create(
            "devicetaintrules",
            {
                "metadata": {"name": name, "labels": {"simcluster.lokiwager.io/taint": "device"}},
                "spec": {
                    "deviceSelector": {"driver": driver, "pool": pool, "device": device},
                    "taint": taint,
                },
            },
        )
        return name

    def untaint_device(self, name: str) -> None:
        """Remove a taint `taint_device` made: the device is allocatable again."""
        self.store.delete("devicetaintrules", None, name)

    def apply_manifests(self, path: str | Path) -> list[str]:
        """Create or update every object of a YAML file, or of a kustomize directory's
        `resources` in order (CRDs first there, as kubectl needs): what `make run` uses to
        put its dev objects in. Returns `<resource>/<name>` of each object applied."""
        source = Path(path)
        if source.is_dir():
            kustomization = yaml.safe_load((source / "kustomization.yaml").read_text()) or {}
            files = [source / name for name in kustomization.get("resources") or []]
        else:
            files = [source]
        applied = []
        for file in files:
            for manifest in yaml.safe_load_all(file.read_text()):
                if manifest:
                    applied.append(self._apply(manifest))
        return applied

    def _apply(self, manifest: dict[str, Any]) -> str:
        rtype = next(
            (
                rt
                for rt in self.store.registry.all()
                if rt.api_version == manifest.get("apiVersion") and rt.kind == manifest.get("kind")
            ),
            None,
        )
        if rtype is None:
            raise ValueError(f"no served kind {manifest.get('kind')} {manifest.get('apiVersion')}")
        # A CRD kind is stored at its storage version, whichever served version the file names.
        storage = self.store.registry.get(rtype.key) or rtype
        manifest = {**manifest, "apiVersion": storage.api_version}
        metadata = manifest.get("metadata") or {}
        namespace = metadata.get("namespace") if rtype.namespaced else None
        if self.store.get(rtype.key, namespace, metadata.get("name", "")) is None:
            self.store.create(rtype.key, manifest)
        else:
            self.store.update(rtype.key, manifest)
        return f"{rtype.plural}/{metadata.get('name', '')}"

    def _seed_namespaces(self) -> None:
        for name in SYSTEM_NAMESPACES:
            if self.store.get("namespaces", None, name) is None:
                self.store.create("namespaces", {"metadata": {"name": name}}, internal=True)
        for service in SYSTEM_SERVICES:
            metadata = service["metadata"]
            if self.store.get("services", metadata["namespace"], metadata["name"]) is None:
                self.store.create("services", service, internal=True)

    def _seed_topology(self) -> None:
        seed = load_topology(self.topology, version=self.features.version)
        for resource, obj in seed:
            metadata = obj.get("metadata") or {}
            # A restored cluster keeps its objects (and their allocations); only fill gaps.
            if (
                self.store.get(resource, metadata.get("namespace"), metadata.get("name", ""))
                is None
            ):
                self.store.create(resource, obj, internal=True)

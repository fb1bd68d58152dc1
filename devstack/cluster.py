"""One development cluster: the real `etcd`, `kube-apiserver`, `kube-controller-manager`,
`kube-scheduler` and the `kwok` controller (devstack/binaries.py builds them from their Go
modules) on loopback, with KWOK nodes whose pods run no containers, the development DRA
driver's objects (devstack/driver.py), the node agent (the kubelet's final delete of a pod,
container output and the gateway: devstack/agent.py) and, for tests, the fault proxy in front
of the API server.

The components are started directly, the way controller-runtime's envtest starts etcd and
kube-apiserver, rather than through `kwokctl create cluster --runtime binary`: kwokctl starts
them detached and a cluster outlives a test run that was killed, while here every process
dies with its parent (PR_SET_PDEATHSIG) and is stopped in order; a cluster of ours also
needs flags kwokctl does not set (RBAC and admission on, DRA feature gates, the kubelet client
for logs) and the fault proxy in front.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import hashlib
import json
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from devstack import agent, binaries, driver, kubeapi, pki, services
from devstack.faults import FaultProxy

HERE = Path(__file__).resolve().parent
STAGES = HERE / "stages"
ADMIN_USER = "dev-admin"
# The DRA features the product uses (ARCHITECTURE §14, §22) and the gates that turn them on
# in 1.36 (reference: kube_features.go): DeviceTaintRules is beta but off by default; the rest
# are on by default in 1.36 and named so that a pin to 1.35 fails loudly instead of quietly
# serving less.
FEATURE_GATES = {
    "DRADeviceTaintRules": True,
    "DRADeviceTaints": True,
    "DRAPartitionableDevices": True,
    "DRAConsumableCapacity": True,
    "DRAResourceClaimDeviceStatus": True,
}
# DeviceTaintRules are served at resource.k8s.io/v1beta2 in 1.36, a version not on by default.
RUNTIME_CONFIG = {"resource.k8s.io/v1beta2": "true"}
SERVICE_RANGE = "10.96.0.0/16"
POD_RANGE = "10.244.0.0/16"  # the pods' addresses KWOK hands out (kind's default range)
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# Components started again when they exit while the cluster runs. kwok v0.8.0 can die of a data
# race when several of its workers first build their stages' CEL environments at once ("fatal
# error: concurrent map writes" in easycel's type cache, seen once in a fresh-clone run: every
# test of that process then failed). It keeps no state of its own, so a new one carries on from
# the API server. More restarts than this and the cluster counts it as exited.
RESTARTED = {"kwok"}
MAX_RESTARTS = 5
START_TIMEOUT = 90.0
# The label a test sets on a pod or node to make KWOK play a fault (devstack/stages).
CHAOS_LABEL = "devstack.lokiwager.io/chaos"
DEVICE_TAINT_RULE_API = "resource.k8s.io/v1beta2"
_VERSIONS = {"Pod": "v1", "ResourceClaim": "resource.k8s.io/v1"}


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it ends (Linux)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ClusterError(RuntimeError):
    """A development cluster that did not come up; the message names the component's log."""


class DevCluster:
    """A development cluster in `folder` (data, keys, logs, kubeconfigs). `start()` brings it
    up, `stop()` ends it; the etcd data stays in `folder` unless it is temporary. Its
    processes are killed when the thread that started them ends (PR_SET_PDEATHSIG, so a
    killed test run leaves none behind): start it from a thread that outlives it.

    `kubeconfig` is what the product is given: through the fault proxy when `proxy` (tests),
    straight to the API server otherwise. `admin_kubeconfig` always goes straight there.
    """

    def __init__(
        self,
        folder: Path,
        *,
        name: str = "default",
        topology: str | Path | Mapping[str, Any] | None = None,
        proxy: bool = False,
        feature_gates: Mapping[str, bool] | None = None,
        runtime_config: Mapping[str, str] | None = None,
        extra_objects: Sequence[Path] = (),
        gateway_port: int | None = None,
        host: str = "127.0.0.1",
        api_port: int | None = None,
        container_output: bool = True,
        node_monitor_grace: str = "20s",
    ) -> None:
        self.folder = folder
        self.name = name
        self.topology = topology
        self.proxy = proxy
        self.feature_gates = {**FEATURE_GATES, **(feature_gates or {})}
        # The API server's --runtime-config: the group versions it serves besides its defaults.
        self.runtime_config = {**RUNTIME_CONFIG, **(runtime_config or {})}
        self.extra_objects = list(extra_objects)
        self.gateway_port = gateway_port
        # The name and port clients reach the API server by: loopback and a free port, or
        # (docker-compose) the service's name and a fixed port, listened on every interface.
        self.host = host
        self.api_port = api_port
        # Whether the node agent writes the containers' output (a benchmark does without it).
        self.container_output = container_output
        # How long a node's silence lasts before the controller-manager marks it NotReady.
        self.node_monitor_grace = node_monitor_grace
        self.api: kubeapi.Api
        self.processes: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self.proxy_control: str | None = None
        self._lock = threading.Lock()
        # Set by stop(): the keepers of this run of the cluster (_keep) start nothing more.
        self._stopped = threading.Event()
        self._given_up: set[str] = set()  # RESTARTED components that exited too often
        self.restarts: dict[str, int] = {}
        self.faults: FaultProxy | None = None  # with `proxy`, once started

    # -- paths ----------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.folder / "kubeconfig"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.folder / "kubeconfig-direct"

    @property
    def logs(self) -> Path:
        return self.folder / "logs"

    @property
    def container_logs(self) -> Path:
        """The containers' output (devstack/agent.py), one folder a pod."""
        return self.folder / "containers"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    @property
    def token(self) -> str:
        path = self.folder / "token"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(32))
            path.chmod(0o600)
        return path.read_text().strip()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> DevCluster:
        bin_dir = binaries.ensure()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        keys = pki.ensure(self.folder / "pki", host=self.host)
        (self.folder / "tokens.csv").write_text(
            f'{self.token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'
        )
        for attempt in range(3):
            base = services.free_port_block(4)
            self.ports = {
                "etcd": base,
                "etcd-peer": base + 1,
                "kube-apiserver": self.api_port or base + 2,
                "kwok": base + 3,
            }
            with self._lock:
                self._stopped = threading.Event()  # a new run: its own keepers
                self._given_up.clear()
                self.restarts.clear()
            try:
                self._start_components(bin_dir, keys)
                break
            except ClusterError as error:
                self.stop()
                if attempt == 2 or "address already in use" not in str(error):
                    raise
        self._write_kubeconfig(
            self.admin_kubeconfig, f"https://{self.host}:{self.ports['kube-apiserver']}"
        )
        self.api = kubeapi.Api(self.server, self.token, keys.ca_cert)
        driver.publish(self.api, self.topology)
        for path in self.extra_objects:
            self.apply_manifests(path)
        self._start_agent()
        if self.proxy:
            self._start_proxy(binaries.faultproxy(), keys)
        else:
            shutil.copyfile(self.admin_kubeconfig, self.kubeconfig)
        self._wait_for_nodes()
        return self

    def stop(self) -> None:
        """Stop every process one after the other, the last started first (etcd last: the API
        server shuts down fast while it still answers), each with SIGTERM, then SIGKILL."""
        with self._lock:
            self._stopped.set()
            running = list(self.processes.items())
            self.processes = {}
        for _name, process in reversed(running):
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def write_kubeconfig(self, path: str | Path, *, direct: bool = False) -> Path:
        """A copy of the product's kubeconfig (through the fault proxy when there is one; with
        `direct`, straight to the API server) at `path`."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.admin_kubeconfig if direct else self.kubeconfig, target)
        target.chmod(0o600)
        return target

    def write_account_kubeconfig(
        self, path: str | Path, namespace: str, account: str, *, seconds: int = 86400
    ) -> Path:
        """A kubeconfig at `path` that authenticates as ServiceAccount `namespace/account` with a
        token of its own (a TokenRequest, valid `seconds`), to the server of `kubeconfig`: what
        the account's pod would hold, for a process that runs outside the cluster."""
        made = self.api.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        config = yaml.safe_load(self.kubeconfig.read_text())
        user = f"system:serviceaccount:{namespace}:{account}"
        config["users"] = [{"name": user, "user": {"token": made["status"]["token"]}}]
        for context in config["contexts"]:
            context["context"]["user"] = user
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        target.chmod(0o600)
        return target

    def running(self) -> bool:
        """Whether every process of the cluster is still up (a RESTARTED one counts while it is
        being started again)."""
        return bool(self.processes) and all(
            p.poll() is None or (name in RESTARTED and name not in self._given_up)
            for name, p in self.processes.items()
        )

    def exited(self) -> str:
        """The processes that exited, with their codes and logs (for a message)."""
        return ", ".join(
            f"{name} exited with {process.returncode}, see {self.logs / name}.log"
            for name, process in self.processes.items()
            if process.poll() is not None
        )

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- the components -------------------------------------------------------------------

    def _spawn(self, name: str, command: list[str], *, cwd: Path | None = None) -> subprocess.Popen:
        log = (self.logs / f"{name}.log").open("ab")
        process = subprocess.Popen(
            command,
            cwd=cwd or self.folder,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        log.close()
        with self._lock:
            self.processes[name] = process
        return process

    def _keep(
        self, name: str, command: list[str], first: threading.Event, stopped: threading.Event
    ) -> None:
        """Run `name` (a RESTARTED component) until the cluster stops (`stopped`, this run's),
        starting it again when it exits, at most MAX_RESTARTS times. Its process is this
        thread's child, so it ends with the thread (_die_with_parent), which lives as long as
        the cluster."""
        while True:
            if stopped.is_set():
                return
            process = self._spawn(name, command)
            if stopped.is_set():  # stop() came while it was being started: it missed this one
                process.kill()
                return
            first.set()
            code = process.wait()
            with self._lock:
                if stopped.is_set():
                    return
                count = self.restarts[name] = self.restarts.get(name, 0) + 1
                if count > MAX_RESTARTS:
                    self._given_up.add(name)
            with (self.logs / f"{name}.log").open("a") as log:
                note = "given up" if name in self._given_up else f"restart {count}"
                log.write(f"--- devstack: {name} exited with {code}; {note}\n")
            if name in self._given_up:
                return

    def _spawn_kept(self, name: str, command: list[str]) -> None:
        """Start `name` under a keeper thread (_keep) and wait for its first process."""
        first = threading.Event()
        threading.Thread(
            target=self._keep,
            args=(name, command, first, self._stopped),
            name=f"{self.name}-{name}",
            daemon=True,
        ).start()
        if not first.wait(30):
            raise ClusterError(f"{name} of cluster {self.name} did not start")

    def _started(self, name: str) -> None:
        """Raise if `name` exited (a RESTARTED one: once its keeper gave up), with the end of
        its log."""
        process = self.processes.get(name)
        if name in RESTARTED and name not in self._given_up:
            return
        if process is not None and process.poll() is not None:
            tail = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
            raise ClusterError(
                f"{name} of cluster {self.name} exited with {process.returncode} "
                f"({self.logs / name}.log):\n" + "\n".join(tail)
            )

    def _start_components(self, bin_dir: Path, keys: pki.Pki) -> None:
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(self.feature_gates.items()))
        etcd_url = f"http://127.0.0.1:{self.ports['etcd']}"
        self._spawn(
            "etcd",
            [
                str(bin_dir / "etcd"),
                "--name=dev",
                f"--data-dir={self.folder / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{self.ports['etcd-peer']}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.ports['etcd-peer']}",
                f"--initial-cluster=dev=http://127.0.0.1:{self.ports['etcd-peer']}",
                # A development cluster's data is disposable: no fsync per write.
                "--unsafe-no-fsync",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        )
        self._wait(f"{etcd_url}/health", "etcd", verify=False)
        self._spawn(
            "kube-apiserver",
            [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={'127.0.0.1' if self.host == '127.0.0.1' else '0.0.0.0'}",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['kube-apiserver']}",
                f"--tls-cert-file={keys.server_cert}",
                f"--tls-private-key-file={keys.server_key}",
                f"--client-ca-file={keys.ca_cert}",
                f"--token-auth-file={self.folder / 'tokens.csv'}",
                f"--service-account-key-file={keys.service_account_pub}",
                f"--service-account-signing-key-file={keys.service_account_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--authorization-mode=RBAC",
                # Logs: the API server reads them from the KWOK "kubelet", showing this pair.
                f"--kubelet-client-certificate={keys.client_cert}",
                f"--kubelet-client-key={keys.client_key}",
                "--kubelet-preferred-address-types=InternalIP",
                # No kubernetes Service endpoints to keep: nothing runs in the cluster.
                "--endpoint-reconciler-type=none",
                f"--feature-gates={gates}",
                "--runtime-config=" + ",".join(f"{k}={v}" for k, v in self.runtime_config.items()),
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait(f"{self.server}/readyz", "kube-apiserver", keys=keys)
        kubeconfig = self.folder / "components.kubeconfig"
        self._write_kubeconfig(kubeconfig, self.server)
        self._install_kwok_crds(bin_dir)
        common = [f"--kubeconfig={kubeconfig}", f"--feature-gates={gates}", "--v=1"]
        self._spawn(
            "kube-controller-manager",
            [
                str(bin_dir / "kube-controller-manager"),
                *common,
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                f"--root-ca-file={keys.ca_cert}",
                f"--service-account-private-key-file={keys.service_account_key}",
                "--controllers=*",
                # A node whose kubelet went silent is NotReady after 20 s, not 50: the Lease
                # above is renewed every few seconds. A benchmark's fleet of KWOK nodes keeps
                # the default's slack (the API server is busy with its pods).
                f"--node-monitor-grace-period={self.node_monitor_grace}",
                "--node-monitor-period=2s",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--secure-port=0",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(bin_dir / "kube-scheduler"),
                *common,
                "--leader-elect=false",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--secure-port=0",
            ],
        )
        kwok_config = self.folder / "kwok.yaml"
        kwok_config.write_text(_kwok_configuration())
        self._spawn_kept(
            "kwok",
            [
                str(bin_dir / "kwok"),
                f"--kubeconfig={kubeconfig}",
                f"--config={kwok_config}",
                # A node labelled chaos=not-ready is dropped, as if its kubelet stopped: no
                # status, no Lease, its pods left as they are (devstack/stages/nodes.yaml).
                f"--manage-nodes-with-label-selector={CHAOS_LABEL}!=not-ready",
                "--node-ip=127.0.0.1",
                f"--node-port={self.ports['kwok']}",
                f"--server-address=127.0.0.1:{self.ports['kwok']}",
                f"--tls-cert-file={keys.client_cert}",
                f"--tls-private-key-file={keys.client_key}",
                "--node-lease-duration-seconds=10",
            ],
        )
        for name in COMPONENTS:
            self._started(name)

    def _install_kwok_crds(self, bin_dir: Path) -> None:
        api = kubeapi.Api(self.server, self.token, self.folder / "pki" / "ca.crt")
        for path in sorted((bin_dir / binaries.KWOK_CRDS).glob("*.yaml")):
            if path.name == "kwok.x-k8s.io_logs.yaml":
                api.apply(yaml.safe_load(path.read_text()))
        api.wait_for_crd("logs.kwok.x-k8s.io")

    def _start_proxy(self, binary: Path, keys: pki.Pki) -> None:
        process = self._spawn(
            "faultproxy",
            [
                str(binary),
                "--listen=127.0.0.1:0",
                "--control=127.0.0.1:0",
                f"--upstream={self.server}",
                f"--upstream-ca={keys.ca_cert}",
                f"--tls-cert-file={keys.server_cert}",
                f"--tls-private-key-file={keys.server_key}",
            ],
        )
        deadline = time.monotonic() + 30
        log = self.logs / "faultproxy.log"
        while True:
            found = [line for line in log.read_text().splitlines() if "serving api=" in line]
            if found:
                fields = dict(part.split("=", 1) for part in found[-1].split() if "=" in part)
                break
            self._started("faultproxy")
            if time.monotonic() > deadline or process.poll() is not None:
                raise ClusterError(f"the fault proxy of {self.name} did not start ({log})")
            time.sleep(0.05)
        self.proxy_control = f"http://{fields['control']}"
        self._write_kubeconfig(self.kubeconfig, f"https://{fields['api']}")
        self.faults = FaultProxy(self.proxy_control)

    def _start_agent(self) -> None:
        command = [
            sys.executable,
            "-m",
            "devstack.agent",
            f"--kubeconfig={self.admin_kubeconfig}",
            f"--logs={self.container_logs}",
        ]
        if not self.container_output:
            command.append("--no-output")
        if self.gateway_port is not None:
            command.append(f"--gateway-port={self.gateway_port}")
        self._spawn("agent", command, cwd=HERE.parent)
        log = self.logs / "agent.log"
        deadline = time.monotonic() + 30
        while "agent: ready" not in log.read_text(errors="replace"):
            self._started("agent")
            if time.monotonic() > deadline:
                raise ClusterError(f"the node agent of {self.name} did not start ({log})")
            time.sleep(0.05)

    def _wait_for_nodes(self) -> None:
        """Until KWOK reports every node Ready and the controller-manager has made the default
        namespace's ServiceAccount (pods are admitted only once their namespace has one)."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            for name in COMPONENTS:
                self._started(name)
            nodes = self.api.list("v1", "Node")
            ready = all(
                any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (n.get("status") or {}).get("conditions") or []
                )
                for n in nodes
            )
            if ready and self.api.get("v1", "ServiceAccount", "default", "default"):
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"the nodes of cluster {self.name} are not Ready")
            time.sleep(0.1)

    # -- what a test (or a person trying the product) does to the cluster -----------------

    def apply_manifests(self, path: str | Path) -> list[str]:
        """Server-side apply every object of a YAML file, or of a kustomize directory's
        `resources` in order (CRDs first there). Returns `<kind>/<name>` of each."""
        source = Path(path)
        if source.is_dir():
            kustomization = yaml.safe_load((source / "kustomization.yaml").read_text()) or {}
            files = [source / name for name in kustomization.get("resources") or []]
        else:
            files = [source]
        applied = []
        for file in files:
            for manifest in yaml.safe_load_all(file.read_text()):
                if not manifest:
                    continue
                self.api.apply(manifest)
                if manifest["kind"] == "CustomResourceDefinition":
                    self.api.wait_for_crd(manifest["metadata"]["name"])
                applied.append(f"{manifest['kind']}/{manifest['metadata']['name']}")
        return applied

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.api.get("v1", "Pod", name, namespace)

    def append_log(
        self,
        namespace: str,
        pod: str,
        lines: Iterable[str] | str,
        *,
        container: str | None = None,
    ) -> None:
        """Append lines to a running container's log, as if it printed them (`container` may
        be left out for a pod's first container). ValueError if it is not running."""
        found = self.pod(namespace, pod)
        if found is None:
            raise ValueError(f"no pod {namespace}/{pod}")
        statuses = (found.get("status") or {}).get("containerStatuses") or []
        name = container or found["spec"]["containers"][0]["name"]
        entry = next((s for s in statuses if s["name"] == name), None)
        if entry is None or "running" not in (entry.get("state") or {}):
            raise ValueError(f"container {name} of pod {namespace}/{pod} is not running")
        path = agent.log_file(
            self.container_logs,
            namespace,
            pod,
            found["metadata"]["uid"],
            name,
            int(entry.get("restartCount") or 0),
        )
        deadline = time.monotonic() + 10
        while not path.exists():  # the agent writes its first lines as it sees it start
            if time.monotonic() > deadline:
                raise ValueError(f"no log of {namespace}/{pod} {name} at {path}")
            time.sleep(0.02)
        with path.open("a") as handle:
            handle.write(agent.cri_lines([lines] if isinstance(lines, str) else lines))

    def fail_container(
        self,
        namespace: str,
        pod: str,
        *,
        container: str | None = None,
        exit_code: int = 1,
        oom: bool = False,
        timeout: float = 30,
    ) -> dict[str, Any]:
        """Make a running container exit (`oom`: killed for memory) through the chaos stage:
        the kubelet restarts it in the same pod, restartCount + 1. Returns the pod once KWOK
        reported the restart."""
        found = self.pod(namespace, pod)
        if found is None:
            raise ValueError(f"no pod {namespace}/{pod}")
        name = container or found["spec"]["containers"][0]["name"]
        before = next(
            (
                int(s.get("restartCount") or 0)
                for s in (found.get("status") or {}).get("containerStatuses") or []
                if s["name"] == name
            ),
            0,
        )
        self.api.patch(
            "v1",
            "Pod",
            pod,
            {
                "metadata": {
                    "labels": {CHAOS_LABEL: "oom-kill" if oom else "exit"},
                    "annotations": {
                        "devstack.lokiwager.io/container": name,
                        "devstack.lokiwager.io/exit-code": str(exit_code),
                    },
                }
            },
            namespace,
        )
        deadline = time.monotonic() + timeout
        while True:
            current = self.pod(namespace, pod) or {}
            for entry in (current.get("status") or {}).get("containerStatuses") or []:
                if entry["name"] == name and int(entry.get("restartCount") or 0) > before:
                    return current
            if time.monotonic() > deadline:
                raise TimeoutError(f"container {name} of {namespace}/{pod} did not restart")
            time.sleep(0.05)

    def on_sigterm(self, namespace: str, pod: str, *, ignore: bool) -> None:
        """What the pod's containers do when it is deleted: exit at once (the default), or
        with `ignore` ignore SIGTERM and be killed when its termination grace runs out."""
        value = "ignore" if ignore else None
        self.api.patch(
            "v1",
            "Pod",
            pod,
            {"metadata": {"annotations": {"devstack.lokiwager.io/on-sigterm": value}}},
            namespace,
        )

    def chaos(self, kind: str, name: str, value: str | None, namespace: str | None = None) -> None:
        """Set (or with None remove) the chaos label of a Pod or Node (devstack/stages)."""
        self.api.patch("v1", kind, name, {"metadata": {"labels": {CHAOS_LABEL: value}}}, namespace)

    def taint_device(
        self,
        driver_name: str,
        pool: str,
        device: str,
        *,
        effect: str = "NoExecute",
        key: str = "devstack.lokiwager.io/unhealthy",
        value: str = "",
    ) -> str:
        """Taint one device as an admin would, with a DeviceTaintRule selecting it by driver,
        pool and name; returns the rule's name, which `untaint_device` takes. NoExecute:
        the controller-manager evicts the pods using it."""
        digest = hashlib.sha256(f"{driver_name}/{pool}/{device}/{key}".encode()).hexdigest()
        name = f"dev-{digest[:12]}"
        taint = {"key": key, "effect": effect, **({"value": value} if value else {})}
        self.api.apply(
            {
                "apiVersion": DEVICE_TAINT_RULE_API,
                "kind": "DeviceTaintRule",
                "metadata": {"name": name, "labels": {"devstack.lokiwager.io/taint": "device"}},
                "spec": {
                    "deviceSelector": {"driver": driver_name, "pool": pool, "device": device},
                    "taint": taint,
                },
            }
        )
        return name

    def untaint_device(self, name: str) -> None:
        self.api.delete(DEVICE_TAINT_RULE_API, "DeviceTaintRule", name)

    def remove(self, kind: str, namespace: str, name: str) -> None:
        """Delete a Pod or ResourceClaim at once: no grace, no finalizers (the leak guard)."""
        version = _VERSIONS[kind]
        with contextlib.suppress(kubeapi.ApiError):
            self.api.patch(version, kind, name, {"metadata": {"finalizers": None}}, namespace)
        self.api.delete(version, kind, name, namespace, gracePeriodSeconds="0")

    @property
    def requests(self) -> Any:
        """The requests the fault proxy forwarded (devstack.faults.RequestLog)."""
        if self.faults is None:
            raise RuntimeError(f"cluster {self.name} was started without its fault proxy")
        return self.faults.requests

    def objects(self, kinds: Iterable[str] = ("Pod", "ResourceClaim")) -> list[dict[str, Any]]:
        """Every object of these kinds (v1 Pods, resource.k8s.io/v1 claims) in the cluster."""
        found: list[dict[str, Any]] = []
        for kind in kinds:
            for item in self.api.list(_VERSIONS[kind], kind):
                item.setdefault("kind", kind)
                found.append(item)
        return found

    def _wait(
        self, url: str, name: str, *, keys: pki.Pki | None = None, verify: bool = True
    ) -> None:
        context = ssl.create_default_context(cafile=str(keys.ca_cert)) if keys else None
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            self._started(name)
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(request, timeout=2, context=context) as response,
            ):
                if response.status == 200:
                    return
            if time.monotonic() > deadline:
                raise ClusterError(f"{name} of cluster {self.name} not ready in {START_TIMEOUT}s")
            time.sleep(0.1)

    def _write_kubeconfig(self, path: Path, server: str) -> None:
        ca = (self.folder / "pki" / "ca.crt").read_text()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": self.name,
                    "cluster": {
                        "server": server,
                        "certificate-authority-data": base64.b64encode(ca.encode()).decode(),
                    },
                }
            ],
            "users": [{"name": ADMIN_USER, "user": {"token": self.token}}],
            "contexts": [
                {"name": self.name, "context": {"cluster": self.name, "user": ADMIN_USER}}
            ],
            "current-context": self.name,
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)


def _kwok_configuration() -> str:
    """kwok's --config: its options and our stages (devstack/stages/*.yaml)."""
    documents = [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            # Given here, every option needs its value (kwok applies no defaults then).
            "options": {
                "enableCRDs": ["Logs"],
                "cidr": POD_RANGE,
                "podPlayStageParallelism": 8,
                "nodePlayStageParallelism": 4,
                "nodeLeaseParallelism": 4,
                "podsOnNodeSyncParallelism": 2,
                "enableDebuggingHandlers": True,
                "enableProfilingHandler": False,
                "enablePodsOnNodeSyncListPager": True,
                "enablePodsOnNodeSyncStreamWatch": False,
            },
        }
    ]
    parts = [yaml.safe_dump(d, sort_keys=False) for d in documents]
    parts += [path.read_text() for path in sorted(STAGES.glob("*.yaml"))]
    return "\n---\n".join(parts)


def describe(cluster: DevCluster) -> dict[str, Any]:
    return {"name": cluster.name, "server": cluster.server, "ports": cluster.ports}


def main(argv: list[str] | None = None) -> int:
    """`python -m devstack.cluster FOLDER`: one development cluster until SIGTERM or Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m devstack.cluster")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--name", default="default")
    parser.add_argument("--topology", help="a topology YAML (default: the sample's)")
    parser.add_argument("--host", default="127.0.0.1", help="the name clients reach it by")
    parser.add_argument("--port", type=int, help="the API server's port (default: a free one)")
    parser.add_argument("--kubeconfig-out", type=Path, help="also write the kubeconfig here")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with DevCluster(
        args.folder.resolve(),
        name=args.name,
        topology=args.topology,
        host=args.host,
        api_port=args.port,
    ) as cluster:
        if args.kubeconfig_out:
            cluster.write_kubeconfig(args.kubeconfig_out)
        print(json.dumps(describe(cluster)), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())

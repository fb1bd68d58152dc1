"""The development cluster's node agent (one process a cluster, started by
devstack/cluster.py): what stands in for the containers KWOK does not run, and for the
kubelet's last word on a pod.

- **The final delete.** Once a pod being deleted has no container running (KWOK's stages end
  them), the agent deletes it for good, as the kubelet does: grace 0, on the condition that it
  is still the same pod (its UID). KWOK's own delete goes by name only, so a late or repeated
  one could take a new pod made under the same name (a unit restarted).
- **Container output.** Each container start KWOK reports (devstack/stages) gets a log file
  in the CRI format a kubelet keeps, beginning with what the container would have printed
  here (its image, its command, `started`), and the pod a KWOK `Logs` object naming the
  current and the previous instance's file, so `kubectl logs` (and `--previous`, `-f`) is
  served by the KWOK kubelet through the real API server. Tests append lines to the same
  files (DevCluster.append_log), as if the container printed them.
- **The gateway** (with --gateway-port): devstack/gateway.py, answering the units' URLs.

Run by hand: python -m devstack.agent --kubeconfig K --logs DIR [--gateway-port P] [--no-output]
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devstack.gateway import Gateway
from devstack.kubeapi import Api, ApiError

LOGS_API = "kwok.x-k8s.io/v1alpha1"


def log_folder(logs: Path, namespace: str, pod: str, uid: str) -> Path:
    """A pod's log folder, named as the kubelet names it."""
    return logs / f"{namespace}_{pod}_{uid}"


def log_file(logs: Path, namespace: str, pod: str, uid: str, container: str, restarts: int) -> Path:
    """The file of one container instance (`restarts`: its restartCount)."""
    return log_folder(logs, namespace, pod, uid) / container / f"{restarts}.log"


def cri_lines(lines: Iterable[str], *, stream: str = "stdout") -> str:
    """Lines in the CRI log format: `<RFC 3339 nano time> <stream> F <text>`."""
    out = []
    for line in lines:
        for part in str(line).splitlines() or [""]:
            moment = datetime.now(UTC)
            stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond * 1000:09d}Z"
            out.append(f"{stamp} {stream} F {part}\n")
    return "".join(out)


def startup_lines(container: Mapping[str, Any]) -> list[str]:
    """What a started container prints here: its image, its command and `started`."""
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    lines = [f"devstack: image {container.get('image', '')}"]
    if command:
        lines.append(f"devstack: command {shlex.join(str(part) for part in command)}")
    lines.append("devstack: started")
    return lines


class NodeAgent:
    """Follows the cluster's pods: deletes those done terminating, and (with `output`) writes
    their containers' output and Logs objects."""

    def __init__(self, api: Api, logs: Path, *, output: bool = True) -> None:
        self.api = api
        self.logs = logs
        self.output = output
        self._deleted: set[str] = set()  # uids whose final delete was sent
        # (pod uid, container) -> restartCount whose file exists.
        self._written: dict[tuple[str, str], int] = {}
        self._pods: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name)

    def run(self) -> None:
        while True:
            try:
                listing = self.api.request("GET", "/api/v1/pods")
                version = listing["metadata"]["resourceVersion"]
                seen = set()
                for pod in listing["items"]:
                    seen.add(pod["metadata"]["uid"])
                    self.saw(pod)
                for uid in set(self._pods) - seen:
                    self.gone(uid)
                for event in self.api.watch("v1", "Pod", resource_version=version):
                    kind = event["type"]
                    pod = event["object"]
                    if kind == "BOOKMARK":
                        continue
                    if kind == "ERROR":
                        break
                    if kind == "DELETED":
                        self.gone(pod["metadata"]["uid"])
                    else:
                        self.saw(pod)
            except (ApiError, OSError, ValueError) as error:
                print(f"agent: pod watch: {error}", file=sys.stderr, flush=True)
                time.sleep(1)

    def saw(self, pod: Mapping[str, Any]) -> None:
        metadata = pod["metadata"]
        uid, namespace, name = metadata["uid"], metadata["namespace"], metadata["name"]
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        statuses = [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]
        running = any("running" in (entry.get("state") or {}) for entry in statuses)
        if metadata.get("deletionTimestamp") and spec.get("nodeName") and not running:
            self._finish(namespace, name, uid)
            return
        if self.output:
            self._write(pod, statuses)

    def _finish(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet's final delete of a pod whose containers all ended."""
        if uid in self._deleted:
            return
        self._deleted.add(uid)
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        try:
            self.api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)
        except ApiError as error:
            if error.status not in (404, 409):  # gone already, or another pod by now
                self._deleted.discard(uid)
                print(f"agent: deleting pod {namespace}/{name}: {error}", file=sys.stderr)

    def _write(self, pod: Mapping[str, Any], statuses: list[Mapping[str, Any]]) -> None:
        """A log file for each container start not written yet, and the pod's Logs object."""
        metadata = pod["metadata"]
        uid, namespace, name = metadata["uid"], metadata["namespace"], metadata["name"]
        spec = pod.get("spec") or {}
        containers = {
            c["name"]: c for c in [*spec.get("initContainers", []), *spec.get("containers", [])]
        }
        changed = False
        for entry in statuses:
            if "running" not in (entry.get("state") or {}):
                continue
            key = (uid, entry["name"])
            restarts = int(entry.get("restartCount") or 0)
            if self._written.get(key, -1) >= restarts:
                continue
            path = log_file(self.logs, namespace, name, uid, entry["name"], restarts)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as handle:
                handle.write(cri_lines(startup_lines(containers.get(entry["name"], {}))))
            self._written[key] = restarts
            changed = True
        if changed:
            self._pods[uid] = (namespace, name)
            self._publish(pod, statuses)

    def _publish(self, pod: Mapping[str, Any], statuses: list[Mapping[str, Any]]) -> None:
        metadata = pod["metadata"]
        uid, namespace, name = metadata["uid"], metadata["namespace"], metadata["name"]
        entries = []
        for entry in statuses:
            restarts = self._written.get((uid, entry["name"]))
            if restarts is None:
                continue
            log: dict[str, Any] = {
                "containers": [entry["name"]],
                "logsFile": str(log_file(self.logs, namespace, name, uid, entry["name"], restarts)),
                "follow": True,
            }
            previous = log_file(self.logs, namespace, name, uid, entry["name"], restarts - 1)
            if restarts > 0 and previous.exists():
                log["previousLogsFile"] = str(previous)
            entries.append(log)
        obj = {
            "apiVersion": LOGS_API,
            "kind": "Logs",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}],
            },
            "spec": {"logs": entries},
        }
        with contextlib.suppress(ApiError):  # the pod (and its namespace) may be gone already
            self.api.apply(obj)

    def gone(self, uid: str) -> None:
        self._deleted.discard(uid)
        where = self._pods.pop(uid, None)
        for key in [key for key in self._written if key[0] == uid]:
            del self._written[key]
        if where is not None:
            shutil.rmtree(log_folder(self.logs, where[0], where[1], uid), ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.agent")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--logs", type=Path, required=True, help="containers' log folder")
    parser.add_argument("--gateway-port", type=int, default=None)
    parser.add_argument("--no-output", action="store_true", help="write no container output")
    args = parser.parse_args(argv)
    api = Api.from_kubeconfig(args.kubeconfig)
    args.logs.mkdir(parents=True, exist_ok=True)
    agent = NodeAgent(api, args.logs, output=not args.no_output)
    threads = [threading.Thread(target=agent.run, daemon=True)]
    for thread in threads:
        thread.start()
    if args.gateway_port is not None:
        gateway = Gateway(Api.from_kubeconfig(args.kubeconfig), port=args.gateway_port).start()
        assert gateway._thread is not None
        threads.append(gateway._thread)
    print("agent: ready", flush=True)
    while all(thread.is_alive() for thread in threads):
        time.sleep(1)
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""The simulated kubelet: a bound pod's containers start once the Secrets, ConfigMaps and
claims they need exist; each start writes a few log lines; tests append lines and make
containers fail. Container logs are kept per container instance, so `previous` works."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shlex
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from simcluster.errors import ApiError
from simcluster.store import clone, now_rfc3339
from simcluster.volumes import is_bound, pod_claim_names

if TYPE_CHECKING:
    from simcluster.store import Store

# Container logs longer than this many lines keep only the newest (the kubelet rotates files).
MAX_LOG_LINES = 10_000
# Reasons a container waits with before it first starts.
WAITING_REASONS = ("ContainerCreating", "CreateContainerConfigError")


def _stamp(moment: datetime) -> str:
    """RFC 3339 to the second, as the API's timestamps are."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def log_timestamp(nanos: int) -> str:
    """The kubelet's fixed-width RFC 3339 with nanoseconds (`2025-01-02T03:04:05.000000006Z`)."""
    seconds, fraction = divmod(nanos, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{fraction:09d}Z"


@dataclass
class LogStream:
    """One container instance's output: (unix nanos, line) pairs, closed once it exited."""

    lines: list[tuple[int, str]] = field(default_factory=list)
    closed: bool = False
    # Lines dropped from the front by rotation: followers index from the stream's start.
    dropped: int = 0


class ContainerLogs:
    """Log streams by (pod uid, container); the last of each list is the running instance."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self._streams: dict[tuple[str, str], list[LogStream]] = {}

    def start(self, uid: str, container: str, lines: Iterable[str]) -> None:
        with self.changed:
            instances = self._streams.setdefault((uid, container), [])
            for instance in instances:
                instance.closed = True
            # The kubelet keeps the current and the previous instance's log.
            instances[:] = [*instances[-1:], LogStream()]
            self._write(instances[-1], lines)
            self.changed.notify_all()

    def append(self, uid: str, container: str, lines: Iterable[str]) -> bool:
        """Append to the running instance; False when there is none."""
        with self.changed:
            instances = self._streams.get((uid, container))
            if not instances or instances[-1].closed:
                return False
            self._write(instances[-1], lines)
            self.changed.notify_all()
            return True

    def stop(self, uid: str, container: str) -> None:
        with self.changed:
            for instance in self._streams.get((uid, container), []):
                instance.closed = True
            self.changed.notify_all()

    def stream(self, uid: str, container: str, *, previous: bool = False) -> LogStream | None:
        with self.changed:
            instances = self._streams.get((uid, container)) or []
            if previous:
                return instances[-2] if len(instances) > 1 else None
            return instances[-1] if instances else None

    def forget(self, live_uids: set[str]) -> None:
        """Drop the logs of pods that are gone (closing them ends their followers)."""
        with self.changed:
            for key in [key for key in self._streams if key[0] not in live_uids]:
                for instance in self._streams.pop(key):
                    instance.closed = True
            self.changed.notify_all()

    def dump(self) -> dict[str, Any]:
        with self.changed:
            return {
                f"{uid}/{container}": [
                    {"lines": instance.lines, "closed": instance.closed} for instance in instances
                ]
                for (uid, container), instances in self._streams.items()
            }

    def load(self, data: Mapping[str, Any]) -> None:
        with self.changed:
            for key, instances in data.items():
                uid, _, container = key.partition("/")
                self._streams[(uid, container)] = [
                    LogStream(
                        lines=[(int(at), str(text)) for at, text in entry.get("lines", [])],
                        closed=bool(entry.get("closed")),
                    )
                    for entry in instances
                ]

    @staticmethod
    def _write(stream: LogStream, lines: Iterable[str]) -> None:
        for line in lines:
            for part in str(line).splitlines() or [""]:
                stream.lines.append((time.time_ns(), part))
        if len(stream.lines) > MAX_LOG_LINES:
            extra = len(stream.lines) - MAX_LOG_LINES
            del stream.lines[:extra]
            stream.dropped += extra


def startup_lines(container: Mapping[str, Any]) -> list[str]:
    """What a started container logs here: its image, command and `started`."""
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    lines = [f"simcluster: image {container.get('image', '')}"]
    if command:
        lines.append(f"simcluster: command {shlex.join(str(part) for part in command)}")
    lines.append("simcluster: started")
    return lines


@dataclass(frozen=True)
class Blocker:
    """Why a bound pod's containers cannot start yet, and the event that says so."""

    reason: str  # the containers' waiting reason
    message: str  # the waiting message (empty for volume mounts, as the kubelet leaves it)
    event_reason: str
    event_message: str


def _missing(store: Store, namespace: str, kind: str, name: str) -> bool:
    return store.get_shared(kind, namespace, name) is None


def start_blocker(store: Store, pod: Mapping[str, Any]) -> Blocker | None:
    """Volumes first (the pod sandbox waits for its mounts), then each container's config."""
    namespace = pod["metadata"]["namespace"]
    spec = pod.get("spec") or {}
    for volume in spec.get("volumes") or []:
        sources: list[tuple[str, Mapping[str, Any]]] = []
        if volume.get("secret") is not None:
            sources.append(
                ("secret", {"name": volume["secret"].get("secretName"), **volume["secret"]})
            )
        if volume.get("configMap") is not None:
            sources.append(("configMap", volume["configMap"]))
        for projected in (volume.get("projected") or {}).get("sources") or []:
            for key in ("secret", "configMap"):
                if projected.get(key) is not None:
                    sources.append((key, projected[key]))
        for key, source in sources:
            kind = "secrets" if key == "secret" else "configmaps"
            singular = "secret" if key == "secret" else "configmap"
            if not source.get("optional") and _missing(
                store, namespace, kind, source.get("name") or ""
            ):
                return Blocker(
                    "ContainerCreating",
                    "",
                    "FailedMount",
                    f'MountVolume.SetUp failed for volume "{volume.get("name", "")}" : '
                    f'{singular} "{source.get("name") or ""}" not found',
                )
    for name in pod_claim_names(pod):
        claim = store.get_shared("persistentvolumeclaims", namespace, name)
        if claim is None or not is_bound(claim):
            return Blocker(
                "ContainerCreating",
                "",
                "FailedMount",
                f"Unable to attach or mount volumes: unmounted volumes=[{name}]: timed out "
                "waiting for the condition",
            )
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        problem = _config_problem(store, namespace, container)
        if problem:
            return Blocker("CreateContainerConfigError", problem, "Failed", f"Error: {problem}")
    return None


def _config_problem(store: Store, namespace: str, container: Mapping[str, Any]) -> str | None:
    for env in container.get("env") or []:
        source = env.get("valueFrom") or {}
        for key, kind, label in (
            ("secretKeyRef", "secrets", "secret"),
            ("configMapKeyRef", "configmaps", "configmap"),
        ):
            ref = source.get(key)
            if not ref or ref.get("optional"):
                continue
            obj = store.get_shared(kind, namespace, ref.get("name") or "")
            if obj is None:
                return f'{label} "{ref.get("name") or ""}" not found'
            data = {**(obj.get("data") or {}), **(obj.get("binaryData") or {})}
            if ref.get("key") not in data:
                kind_name = "Secret" if kind == "secrets" else "ConfigMap"
                where = f"{namespace}/{ref.get('name')}"
                return f"couldn't find key {ref.get('key')} in {kind_name} {where}"
    for env_from in container.get("envFrom") or []:
        for key, kind, label in (
            ("secretRef", "secrets", "secret"),
            ("configMapRef", "configmaps", "configmap"),
        ):
            ref = env_from.get(key)
            if (
                ref
                and not ref.get("optional")
                and _missing(store, namespace, kind, ref.get("name") or "")
            ):
                return f'{label} "{ref.get("name") or ""}" not found'
    return None


def _host_ip(node: Mapping[str, Any]) -> str:
    return next(
        (
            a.get("address")
            for a in (node.get("status") or {}).get("addresses") or []
            if a.get("type") == "InternalIP"
        ),
        "10.0.0.1",
    )


def _pod_ip(uid: str) -> str:
    digest = hashlib.sha256(uid.encode()).digest()
    return f"10.244.{digest[0]}.{digest[1] % 254 + 1}"


def _condition(kind: str, ok: bool, now: str, **extra: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now,
        **extra,
    }


def running_status(pod: Mapping[str, Any], node: Mapping[str, Any], now: str) -> dict[str, Any]:
    """What the kubelet reports once the containers started."""
    host_ip = _host_ip(node)
    uid = pod["metadata"]["uid"]
    pod_ip = _pod_ip(uid)
    spec = pod.get("spec") or {}
    condition_types = (
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    )
    status = {
        **(pod.get("status") or {}),
        "phase": "Running",
        "conditions": [_condition(t, True, now) for t in condition_types],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": now,
        "containerStatuses": [
            container_status(c, uid, now, running=True) for c in spec.get("containers") or []
        ],
    }
    if spec.get("initContainers"):
        status["initContainerStatuses"] = [
            container_status(c, uid, now, running=False) for c in spec["initContainers"]
        ]
    return status


def waiting_status(
    pod: Mapping[str, Any], node: Mapping[str, Any], now: str, blocker: Blocker
) -> dict[str, Any]:
    """A bound pod whose containers cannot start: Pending, each container waiting."""
    spec = pod.get("spec") or {}
    names = [c.get("name", "") for c in spec.get("containers") or []]
    unready = f"containers with unready status: [{' '.join(names)}]"
    host_ip = _host_ip(node)
    sandbox = blocker.reason != "ContainerCreating"
    waiting: dict[str, Any] = {"reason": blocker.reason}
    if blocker.message:
        waiting["message"] = blocker.message
    status: dict[str, Any] = {
        **(pod.get("status") or {}),
        "phase": "Pending",
        "conditions": [
            _condition("PodReadyToStartContainers", sandbox, now),
            _condition("Initialized", True, now),
            _condition("Ready", False, now, reason="ContainersNotReady", message=unready),
            _condition("ContainersReady", False, now, reason="ContainersNotReady", message=unready),
            _condition("PodScheduled", True, now),
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": now,
        "containerStatuses": [
            {
                "name": c.get("name", ""),
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": dict(waiting)},
                "lastState": {},
            }
            for c in spec.get("containers") or []
        ],
    }
    if sandbox:
        pod_ip = _pod_ip(pod["metadata"]["uid"])
        status["podIP"], status["podIPs"] = pod_ip, [{"ip": pod_ip}]
    return status


def container_id(uid: str, name: str, restarts: int = 0) -> str:
    suffix = f"/{restarts}" if restarts else ""
    return "containerd://" + hashlib.sha256(f"{uid}/{name}{suffix}".encode()).hexdigest()


def container_status(
    container: Mapping[str, Any], uid: str, now: str, *, running: bool
) -> dict[str, Any]:
    name = container.get("name", "")
    image = container.get("image", "")
    state: dict[str, Any] = (
        {"running": {"startedAt": now}}
        if running
        else {
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": now,
                "finishedAt": now,
                "containerID": container_id(uid, name),
            }
        }
    )
    return {
        "name": name,
        "image": image,
        "imageID": f"{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}",
        "containerID": container_id(uid, name),
        "ready": running,
        "started": running,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    }


class Kubelet:
    """Every node's kubelet at once; runs inside the scheduler's pass (under store.lock)."""

    def __init__(self, store: Store, logs: ContainerLogs | None = None) -> None:
        self.store = store
        self.logs = logs if logs is not None else ContainerLogs()
        # The FailedMount/Failed event each waiting pod got, by uid: one per cause.
        self._told: dict[str, str] = {}
        # What a container does on SIGTERM, by (pod uid, container): exit after this many
        # seconds, or IGNORES_SIGTERM (killed when the grace period runs out). Absent: it
        # exits at once.
        self._on_sigterm: dict[tuple[str, str], float | None] = {}
        # Each terminating pod's (SIGTERM time, kill time, grace period seconds), by uid.
        self._terminating: dict[str, tuple[datetime, datetime, int]] = {}

    def start(self, pod: dict[str, Any], node: Mapping[str, Any], now: str) -> dict[str, Any]:
        """The status of a pod just bound to `node`; starts its containers when it can."""
        blocker = start_blocker(self.store, pod)
        if blocker is not None:
            self._tell(pod, node, blocker, now)
            return waiting_status(pod, node, now, blocker)
        uid = pod["metadata"]["uid"]
        spec = pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            self.logs.start(uid, container.get("name", ""), startup_lines(container))
        for container in spec.get("initContainers") or []:
            self.logs.stop(uid, container.get("name", ""))
        self._told.pop(uid, None)
        return running_status(pod, node, now)

    def retry(
        self, pods: Iterable[dict[str, Any]], nodes: Mapping[str, Mapping[str, Any]], now: str
    ) -> int:
        """Start the containers of bound pods that were waiting and now can; returns how many
        pods started. Logs of pods that are gone are dropped."""
        started = 0
        live: set[str] = set()
        for pod in pods:
            live.add(pod["metadata"]["uid"])
            node = nodes.get((pod.get("spec") or {}).get("nodeName") or "")
            if node is None or not _waiting_to_start(pod):
                continue
            status = self.start(pod, node, now)
            if status.get("phase") != "Running":
                if _waiting(status) != _waiting(pod.get("status") or {}):
                    self.store.update("pods", {**pod, "status": status}, internal=True)
                continue
            if status.get("phase") == "Running":
                conditions = {
                    c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []
                }
                scheduled = conditions.get("PodScheduled")
                if scheduled:
                    status["conditions"] = [
                        scheduled if c["type"] == "PodScheduled" else c
                        for c in status["conditions"]
                    ]
                self.store.update("pods", {**pod, "status": status}, internal=True)
                started += 1
        self.logs.forget(live)
        self._told = {uid: told for uid, told in self._told.items() if uid in live}
        self._on_sigterm = {key: how for key, how in self._on_sigterm.items() if key[0] in live}
        return started

    def _tell(
        self, pod: Mapping[str, Any], node: Mapping[str, Any], blocker: Blocker, now: str
    ) -> None:
        metadata = pod["metadata"]
        if self._told.get(metadata["uid"]) == blocker.event_message:
            return
        self._told[metadata["uid"]] = blocker.event_message
        self._event(pod, node["metadata"]["name"], blocker.event_reason, blocker.event_message, now)

    def _event(
        self,
        pod: Mapping[str, Any],
        node_name: str,
        reason: str,
        message: str,
        now: str,
        type: str = "Warning",
    ) -> None:
        metadata = pod["metadata"]
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{metadata['name']}.{time.time_ns():x}",
                "namespace": metadata["namespace"],
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": metadata["namespace"],
                "name": metadata["name"],
                "uid": metadata["uid"],
            },
            "reason": reason,
            "message": message,
            "type": type,
            "source": {"component": "kubelet", "host": node_name},
            "reportingComponent": "kubelet",
            "reportingInstance": node_name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        with contextlib.suppress(ApiError):
            self.store.create("events", event, internal=True)

    def should_stop(self, pod: Mapping[str, Any]) -> bool:
        """A pod being deleted from a node whose containers have not been told to stop yet."""
        metadata = pod.get("metadata") or {}
        return bool(
            metadata.get("deletionTimestamp")
            and (pod.get("spec") or {}).get("nodeName")
            and metadata.get("uid") not in self._terminating
        )

    def terminate(
        self, pods: Iterable[dict[str, Any]], now: datetime
    ) -> tuple[bool, datetime | None]:
        """Stop the containers of pods being deleted, as their kubelet does: SIGTERM when the
        deletion is first seen (a "Killing" event per container), each container ends when
        it exits or when the grace period runs out (killed: exit code 137), and once none
        runs the pod is removed. Returns whether any pod is terminating, and when the next
        container is due to end (None: none is)."""
        stamp = _stamp(now)
        next_due: datetime | None = None
        deleting: set[str] = set()
        for pod in pods:
            metadata = pod["metadata"]
            node_name = (pod.get("spec") or {}).get("nodeName")
            if not metadata.get("deletionTimestamp") or not node_name:
                continue
            uid = metadata["uid"]
            deleting.add(uid)
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            running = [c for c in statuses if "running" in (c.get("state") or {})]
            grace = int(metadata.get("deletionGracePeriodSeconds") or 0)
            if uid not in self._terminating:
                self._terminating[uid] = (now, now + timedelta(seconds=grace), grace)
                for container in running:
                    self._event(
                        pod,
                        node_name,
                        "Killing",
                        f"Stopping container {container.get('name', '')}",
                        stamp,
                        type="Normal",
                    )
            sigterm_at, deadline, known_grace = self._terminating[uid]
            if grace != known_grace:  # a second deletion brought the end forward
                deadline = min(deadline, now + timedelta(seconds=grace))
                self._terminating[uid] = (sigterm_at, deadline, grace)
            ended: dict[str, tuple[datetime, bool]] = {}
            for container in running:
                name = container.get("name", "")
                exit_after = self._on_sigterm.get((uid, name), 0.0)
                own_exit = (
                    None if exit_after is None else sigterm_at + timedelta(seconds=exit_after)
                )
                killed = own_exit is None or own_exit > deadline
                exits = deadline if killed or own_exit is None else own_exit
                if exits <= now:
                    ended[name] = (exits, killed)
                elif next_due is None or exits < next_due:
                    next_due = exits
            if len(ended) < len(running):
                if ended:
                    self._end_containers(pod, ended, remove=False)
                continue
            self._end_containers(pod, ended, remove=True)
        self._terminating = {u: t for u, t in self._terminating.items() if u in deleting}
        return bool(deleting), next_due

    def _end_containers(
        self, pod: dict[str, Any], ended: Mapping[str, tuple[datetime, bool]], *, remove: bool
    ) -> None:
        """Record containers as ended (at their own moment; `killed` by the grace period's
        end), then, with `remove`, remove the pod: its last state says when each ended."""
        metadata = pod["metadata"]
        updated = clone(pod)
        status = updated.setdefault("status", {})
        statuses = status.get("containerStatuses") or []
        for entry in statuses:
            if entry.get("name") not in ended:
                continue
            moment, killed = ended[entry["name"]]
            started_at = ((entry.get("state") or {}).get("running") or {}).get("startedAt")
            entry["state"] = {
                "terminated": {
                    "exitCode": 137 if killed else 0,
                    "reason": "Error" if killed else "Completed",
                    "startedAt": started_at,
                    "finishedAt": _stamp(moment),
                    "containerID": entry.get("containerID", ""),
                }
            }
            entry["ready"] = entry["started"] = False
            self.logs.stop(metadata["uid"], entry["name"])
        if statuses and all("running" not in (c.get("state") or {}) for c in statuses):
            last = max((moment for moment, _ in ended.values()), default=None)
            self._settle(status, statuses, _stamp(last) if last else now_rfc3339())
        if updated != pod:
            self.store.update("pods", updated, internal=True)
        if remove:
            with contextlib.suppress(ApiError):
                self.store.delete_object(
                    "pods",
                    metadata["namespace"],
                    metadata["name"],
                    grace_period=0,
                    internal=True,
                    preconditions={"uid": metadata["uid"]},
                )

    # -- test hooks -------------------------------------------------------------------------

    def append_log(
        self, namespace: str, name: str, lines: Iterable[str] | str, container: str | None = None
    ) -> None:
        """Write lines to a running container's log (as if it printed them)."""
        pod, container_name = self._container(namespace, name, container)
        if isinstance(lines, str):
            lines = [lines]
        if not self.logs.append(pod["metadata"]["uid"], container_name, lines):
            raise ValueError(f'container "{container_name}" in pod "{name}" is not running')

    def on_sigterm(
        self,
        namespace: str,
        name: str,
        container: str | None = None,
        *,
        exit_after: float | None,
    ) -> None:
        """What the pod's running container does when its pod is deleted: exit `exit_after`
        seconds after SIGTERM, or (None) ignore it and be killed when the grace period ends."""
        with self.store.lock:
            pod, container_name = self._container(namespace, name, container)
            self._on_sigterm[(pod["metadata"]["uid"], container_name)] = exit_after

    def fail_container(
        self,
        namespace: str,
        name: str,
        container: str | None = None,
        *,
        exit_code: int = 1,
        reason: str = "Error",
        message: str | None = None,
        lines: Iterable[str] = (),
    ) -> dict[str, Any]:
        """The container exits with `exit_code` after logging `lines`. With restartPolicy
        Always (or OnFailure and a non-zero code) the kubelet restarts it: restartCount + 1,
        lastState.terminated, a fresh log; otherwise it stays terminated and the pod ends
        Failed (Succeeded for 0) once no container runs. Returns the pod as stored."""
        with self.store.lock:
            pod, container_name = self._container(namespace, name, container)
            uid = pod["metadata"]["uid"]
            self.logs.append(uid, container_name, lines)
            self.logs.stop(uid, container_name)
            now = now_rfc3339()
            updated = clone(pod)
            status = updated.setdefault("status", {})
            policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
            restart = not pod["metadata"].get("deletionTimestamp") and (
                policy == "Always" or (policy == "OnFailure" and exit_code != 0)
            )
            statuses = status.get("containerStatuses") or []
            entry = next((c for c in statuses if c.get("name") == container_name), None)
            if entry is None:
                raise ValueError(f'container "{container_name}" in pod "{name}" has not started')
            started_at = ((entry.get("state") or {}).get("running") or {}).get("startedAt", now)
            terminated: dict[str, Any] = {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": started_at,
                "finishedAt": now,
                "containerID": entry.get("containerID", ""),
            }
            if message:
                terminated["message"] = message
            if restart:
                restarts = int(entry.get("restartCount") or 0) + 1
                entry["lastState"] = {"terminated": terminated}
                entry["restartCount"] = restarts
                entry["containerID"] = container_id(uid, container_name, restarts)
                entry["state"] = {"running": {"startedAt": now}}
                entry["ready"] = entry["started"] = True
                spec_container = next(
                    c for c in pod["spec"]["containers"] if c.get("name") == container_name
                )
                self.logs.start(uid, container_name, startup_lines(spec_container))
            else:
                entry["state"] = {"terminated": terminated}
                entry["ready"] = entry["started"] = False
                self._settle(status, statuses, now)
            return self.store.update("pods", updated, internal=True)

    @staticmethod
    def _settle(status: dict[str, Any], statuses: list[dict[str, Any]], now: str) -> None:
        names = [c.get("name", "") for c in statuses if not c.get("ready")]
        unready = f"containers with unready status: [{' '.join(names)}]"
        conditions = []
        for condition in status.get("conditions") or []:
            if condition.get("type") in ("Ready", "ContainersReady"):
                condition = {
                    **condition,
                    "status": "False",
                    "reason": "PodCompleted"
                    if all(
                        (c.get("state") or {}).get("terminated", {}).get("exitCode") == 0
                        for c in statuses
                    )
                    else "ContainersNotReady",
                    "message": unready,
                    "lastTransitionTime": now,
                }
            conditions.append(condition)
        status["conditions"] = conditions
        if all("terminated" in (c.get("state") or {}) for c in statuses):
            failed = any(c["state"]["terminated"].get("exitCode") for c in statuses)
            status["phase"] = "Failed" if failed else "Succeeded"

    def _container(
        self, namespace: str, name: str, container: str | None
    ) -> tuple[dict[str, Any], str]:
        pod = self.store.get("pods", namespace, name)
        if pod is None:
            raise ApiError.not_found("pods", name)
        names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        if container is None:
            if len(names) != 1:
                raise ValueError(f"pod {name} has containers {json.dumps(names)}: name one")
            container = names[0]
        elif container not in names:
            raise ValueError(f"container {container} is not valid for pod {name}")
        return pod, container


def _waiting_to_start(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "", "Pending") or pod["metadata"].get("deletionTimestamp"):
        return False
    return any(
        ((c.get("state") or {}).get("waiting") or {}).get("reason") in WAITING_REASONS
        for c in status.get("containerStatuses") or []
    )


def _waiting(status: Mapping[str, Any]) -> list[Any]:
    return [(c.get("state") or {}).get("waiting") for c in status.get("containerStatuses") or []]

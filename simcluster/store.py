"""The in-memory object store: API semantics (versions, generation, finalizers, garbage
collection, namespaces, CRD registration), admission hooks, listeners and watch fan-out."""

from __future__ import annotations

import base64
import builtins
import datetime as dt
import json
import queue
import random
import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from simcluster import defaults, validation
from simcluster.errors import ApiError, cause
from simcluster.features import FeatureGates
from simcluster.resources import Registry, ResourceType
from simcluster.selectors import Predicate, parse_field_selector, parse_label_selector

FOREGROUND_FINALIZER = "foregroundDeletion"
HISTORY_SIZE = 50_000
# Paginated lists kept for their continue tokens (each holds references, not copies).
LIST_SNAPSHOTS = 1024
_CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter."
)
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

# Server-owned metadata a client cannot set or change.
_SYSTEM_METADATA = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
)


def clone(value: Any) -> Any:
    """Deep copy of JSON-shaped data; much faster than copy.deepcopy on large lists."""
    if isinstance(value, dict):
        return {key: clone(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clone(item) for item in value]
    return value


def now_rfc3339(after_seconds: int = 0) -> str:
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=after_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_grace_period(pod: dict[str, Any], requested: int | None) -> int:
    """The grace a pod's deletion gets, as the API server's pod strategy decides: the
    request's `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds` (30); none
    for a pod no node runs (unscheduled) or whose containers have all ended (terminal), and
    a negative request counts as 1."""
    spec = pod.get("spec") or {}
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in (
        "Succeeded",
        "Failed",
    ):
        return 0
    period = requested if requested is not None else spec.get("terminationGracePeriodSeconds", 30)
    return 1 if period < 0 else int(period)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.setdefault("metadata", {})


def _content(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """What generation tracks: all but metadata, and status when it has its own endpoint."""
    ignored = {"metadata", "apiVersion", "kind"}
    if rtype.status_subresource or rtype.crd is None:
        ignored.add("status")
    return {key: value for key, value in obj.items() if key not in ignored}


@dataclass
class AdmissionRequest:
    """What an admission hook sees of a non-internal write, before it is persisted."""

    operation: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str
    obj: dict | None
    old: dict | None


@dataclass
class WatchEvent:
    type: str
    object: dict[str, Any]
    resource_version: int


@dataclass
class _HistoryEntry:
    resource_version: int
    type: str
    resource: str
    namespace: str | None
    obj: dict[str, Any]
    old: dict[str, Any] | None


@dataclass(eq=False)
class Watcher:
    """One open watch; the HTTP layer drains `events` until it reads the closing None."""

    resource: str
    namespace: str | None
    predicate: Predicate | None
    events: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    # The newest version of an event delivered to the client (the HTTP layer keeps it).
    sent_version: int = 0

    def matches(self, obj: dict[str, Any] | None) -> bool:
        return obj is not None and (self.predicate is None or self.predicate(obj))

    def translate(
        self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> str | None:
        """What this watcher sees: objects entering or leaving its selector are ADDED/DELETED."""
        new_in = self.matches(obj)
        if event_type == "MODIFIED":
            old_in = self.matches(old)
            if new_in and not old_in:
                return "ADDED"
            if old_in and not new_in:
                return "DELETED"
            return "MODIFIED" if new_in else None
        return event_type if new_in else None


class Store:
    """Objects by resource key → namespace ("" for cluster-scoped) → name.

    Stored objects are never mutated in place: every write stores a fresh dict, so readers that
    take references under the lock (the HTTP layer) may serialise them after releasing it.
    """

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        seed: int | None = None,
        features: FeatureGates | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.registry = registry or Registry()
        # The emulated version's gates: what is served, and which fields a write keeps.
        self.features = features or FeatureGates()
        # The official schemas of that version, which built-in writes are validated against.
        self.schemas = validation.schemas_for(self.features.version)
        self.registry.serve_versions(
            "devicetaintrules",
            self.features.device_taint_rule_versions,
            status=self.features.device_taint_rule_status,
        )
        self._objects: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        self._by_uid: dict[str, tuple[str, str, str]] = {}
        self._dependents: dict[str, set[tuple[str, str, str]]] = {}
        self._resource_version = 0
        self._history: deque[_HistoryEntry] = deque(maxlen=HISTORY_SIZE)
        # Watches can resume from any version after this one (a restore starts a new history).
        self._history_start = 0
        self._watchers: set[Watcher] = set()
        self._admission: list[Callable[[AdmissionRequest], None]] = []
        self._mutations: list[Callable[[str, str, dict, dict | None], None]] = []
        self._listeners: list[Callable[[str, str, dict], None]] = []
        self._snapshots: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._gc_queue: deque[tuple[str, tuple[str, str, str]]] = deque()
        self._draining = False
        self._random = random.Random(seed)

    # ------------------------------------------------------------------ hooks

    def add_admission(self, fn: Callable[[AdmissionRequest], None]) -> None:
        """Register a hook run under the lock before each non-internal write; ApiError rejects."""
        self._admission.append(fn)

    def add_mutation(self, fn: Callable[[str, str, dict, dict | None], None]) -> None:
        """Register fn(operation, resource, new, old), run under the lock on every create and
        update (internal ones too) after validation and before admission: where the server
        fills in what it allocates (cluster IPs, node ports, a default storage class). It
        changes `new` in place; ApiError rejects the write."""
        self._mutations.append(fn)

    def add_listener(self, fn: Callable[[str, str, dict], None]) -> None:
        """Register fn(event_type, resource, obj), run under the lock after each committed write.
        `obj` is the stored object itself (stored objects are never changed in place): read
        it, never write it."""
        self._listeners.append(fn)

    # ------------------------------------------------------------------ reads

    @property
    def resource_version(self) -> str:
        return str(self._resource_version)

    def type_of(self, resource: str) -> ResourceType:
        rtype = self.registry.get(resource)
        if rtype is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return rtype

    def _bucket(self, resource: str, namespace: str | None) -> dict[str, dict[str, Any]]:
        return self._objects.get(resource, {}).get(namespace or "", {})

    def _get_ref(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self._bucket(resource, namespace).get(name)

    def get(self, resource: str, namespace: str | None, name: str) -> dict | None:
        """A deep copy of the object, or None."""
        with self.lock:
            obj = self._get_ref(resource, namespace, name)
            return clone(obj) if obj is not None else None

    def get_shared(self, resource: str, namespace: str | None, name: str) -> dict | None:
        """The stored object itself (read-only by contract), for serialising without a copy."""
        with self.lock:
            return self._get_ref(resource, namespace, name)

    def _iter(self, resource: str, namespace: str | None) -> Iterator[dict[str, Any]]:
        """Objects in the real server's (etcd key) order: by namespace, then name."""
        buckets = self._objects.get(resource, {})
        namespaces = sorted(buckets) if namespace is None else [namespace]
        for ns in namespaces:
            bucket = buckets.get(ns, {})
            yield from [bucket[name] for name in sorted(bucket)]

    def list_shared(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict], str]:
        """Stored objects themselves (read-only by contract) and the list resourceVersion."""
        rtype = self.type_of(resource)
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, rtype)
        with self.lock:
            items = [
                obj
                for obj in self._iter(resource, namespace)
                if (labels is None or labels(obj)) and (fields is None or fields(obj))
            ]
            return items, self.resource_version

    def list_page(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> tuple[list[dict], str, str | None, int | None]:
        """One page of a list as the API server serves `limit` and `continue`: every page of a
        list comes from the snapshot its first page was taken from (stored objects are never
        mutated, so the snapshot holds references). Returns (items, resourceVersion, continue
        token or None, remainingItemCount or None). 410 Expired when the token's version has
        been compacted away; 400 when the token is not one of ours."""
        with self.lock:
            scope = _list_scope(resource, namespace, label_selector, field_selector)
            if continue_token:
                snapshot_id, version, start, token_scope = _decode_continue(continue_token)
                if token_scope != scope:  # a token of another list
                    raise ApiError.bad_request("continue key is not valid")
                if version < self._compacted_floor() or snapshot_id not in self._snapshots:
                    raise ApiError.gone(_CONTINUE_TOO_OLD)
                items = self._snapshots[snapshot_id]
                resource_version = str(version)
            else:
                items, resource_version = self.list_shared(
                    resource,
                    namespace,
                    label_selector=label_selector,
                    field_selector=field_selector,
                )
                snapshot_id, start = uuid.uuid4().hex, 0
            if limit <= 0 or start + limit >= len(items):
                self._snapshots.pop(snapshot_id, None)
                return items[start:], resource_version, None, None
            self._snapshots[snapshot_id] = items
            self._snapshots.move_to_end(snapshot_id)
            while len(self._snapshots) > LIST_SNAPSHOTS:
                self._snapshots.popitem(last=False)
            end = start + limit
            token = _encode_continue(snapshot_id, int(resource_version), end, scope)
            # Like the real server, the count of what is left is only given without selectors.
            remaining = None if label_selector or field_selector else len(items) - end
            return items[start:end], resource_version, token, remaining

    def compact(self, revision: int | None = None) -> None:
        """Forget the history up to `revision` (default: now), as etcd compaction does:
        watches and continue tokens from before it answer 410 Gone."""
        with self.lock:
            floor = self._resource_version if revision is None else revision
            while self._history and self._history[0].resource_version <= floor:
                self._history.popleft()
            self._history_start = max(self._history_start, floor)

    def _compacted_floor(self) -> int:
        """The newest version a watch can no longer start from."""
        floor = self._history_start
        if len(self._history) == self._history.maxlen:
            floor = max(floor, self._history[0].resource_version - 1)
        return floor

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict]:
        """Deep copies of matching objects; namespace None lists every namespace."""
        items, _ = self.list_shared(
            resource, namespace, label_selector=label_selector, field_selector=field_selector
        )
        return [clone(obj) for obj in items]

    # ------------------------------------------------------------------ writes

    def create(
        self,
        resource: str,
        obj: dict,
        *,
        internal: bool = False,
        dry_run: bool = False,
    ) -> dict:
        """Create an object; ApiError for a missing namespace, AlreadyExists, 422 or admission."""
        rtype = self.type_of(resource)
        new = clone(obj)
        self._check_type_meta(rtype, new)
        metadata = _meta(new)
        for key in _SYSTEM_METADATA:
            metadata.pop(key, None)
        if rtype.namespaced:
            if not metadata.get("namespace"):
                metadata["namespace"] = "default"
        else:
            metadata.pop("namespace", None)
        defaults.prepare_for_create(rtype, new, internal=internal)
        self.features.drop_disabled_fields(resource, new)
        with self.lock:
            if metadata.get("generateName") and not metadata.get("name"):
                metadata["name"] = self._generate_name(resource, metadata)
            if not internal:
                self._validate(rtype, new, None)
            namespace = metadata.get("namespace")
            if rtype.namespaced:
                self._check_namespace(namespace, internal=internal)
            if not internal and rtype.key in validation.ADMIN_ACCESS_KINDS:
                self._check_admin_access(rtype, new, namespace)
            name = metadata.get("name") or ""
            if self._get_ref(resource, namespace, name) is not None:
                raise ApiError.already_exists(rtype.plural, name, rtype.group)
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = now_rfc3339()
            metadata["generation"] = 1
            if resource == "customresourcedefinitions":
                new["status"] = defaults.crd_status(new)
            for mutate in self._mutations:
                mutate("CREATE", resource, new, None)
            if not internal:
                self._admit("CREATE", resource, None, namespace, name, new, None)
            if dry_run:
                return clone(new)
            self._commit("ADDED", resource, new, None)
            self._drain()
            return clone(new)

    def update(
        self,
        resource: str,
        obj: dict,
        *,
        subresource: str | None = None,
        internal: bool = False,
        dry_run: bool = False,
    ) -> dict:
        """Replace an object (or its status); 409 Conflict when metadata.resourceVersion is stale.

        Non-internal writes follow the status-subresource split (the main resource ignores status,
        /status ignores everything else); internal writes store the object as given, so a
        controller can bind a pod and set its status in one call.
        """
        rtype = self.type_of(resource)
        metadata = obj.get("metadata") or {}
        name = metadata.get("name") or ""
        namespace = (metadata.get("namespace") or "default") if rtype.namespaced else None
        with self.lock:
            current = self._get_ref(resource, namespace, name)
            if current is None:
                raise ApiError.not_found(rtype.plural, name, rtype.group)
            wanted_version = metadata.get("resourceVersion")
            if wanted_version and wanted_version != current["metadata"]["resourceVersion"]:
                raise ApiError.stale(rtype.plural, name, rtype.group)
            new = self._merge_update(rtype, current, obj, subresource, internal)
            if subresource is None:
                defaults.prepare_for_update(rtype, new, current)
            self.features.drop_disabled_fields(resource, new)
            if not internal:
                self._validate(rtype, new, current)
                self._check_finalizers(rtype, new, current)
            for mutate in self._mutations:
                mutate("UPDATE", resource, new, current)
            if _content(rtype, new) != _content(rtype, current):
                new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
            if resource == "customresourcedefinitions":
                new["status"] = {**defaults.crd_status(new), **(new.get("status") or {})}
                new["status"]["acceptedNames"] = defaults.crd_status(new)["acceptedNames"]
            unchanged = {**new, "metadata": {**new["metadata"], "resourceVersion": None}} == {
                **current,
                "metadata": {**current["metadata"], "resourceVersion": None},
            }
            if unchanged:
                return clone(current)
            if not internal:
                self._admit("UPDATE", resource, subresource, namespace, name, new, clone(current))
            if dry_run:
                return clone(new)
            # The last finalizer gone ends a deletion; a pod in its grace period waits for its
            # kubelet instead.
            if (
                new["metadata"].get("deletionTimestamp")
                and not new["metadata"].get("finalizers")
                and not new["metadata"].get("deletionGracePeriodSeconds")
            ):
                self._remove(resource, current, final=new)
                self._drain()
                return clone(new)
            self._commit("MODIFIED", resource, new, current)
            self._drain()
            return clone(new)

    def delete(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
        internal: bool = False,
        grace_period: int | None = None,
    ) -> dict | None:
        """Delete (or mark for deletion) an object; its last state, or None if it was absent."""
        try:
            obj, _ = self.delete_object(
                resource,
                namespace,
                name,
                propagation=propagation,
                internal=internal,
                grace_period=grace_period,
            )
        except ApiError as error:
            if error.code == 404:
                return None
            raise
        return obj

    def delete_object(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str | None = "Background",
        internal: bool = False,
        preconditions: dict | None = None,
        grace_period: int | None = None,
    ) -> tuple[dict, bool]:
        """Delete like the API does: (last state, removed now?); 404 ApiError when absent.
        A pod a node runs is removed only once its containers have stopped: it is marked
        (deletionTimestamp = now + its grace period) and the kubelet finishes the job;
        `grace_period` 0 (`kubectl delete --force --grace-period=0`) removes it at once."""
        rtype = self.type_of(resource)
        namespace = namespace if rtype.namespaced else None
        propagation = propagation or "Background"
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise ApiError.invalid(
                "DeleteOptions",
                "",
                [
                    cause(
                        "FieldValueNotSupported",
                        "propagationPolicy",
                        f'Unsupported value: "{propagation}": supported values: '
                        '"Foreground", "Background", "Orphan"',
                    )
                ],
            )
        with self.lock:
            current = self._get_ref(resource, namespace, name)
            if current is None:
                raise ApiError.not_found(rtype.plural, name, rtype.group)
            self._check_preconditions(rtype, current, preconditions or {})
            if not internal:
                self._admit("DELETE", resource, None, namespace, name, None, clone(current))
            self._delete(resource, current, propagation, grace_period)
            marked = self._get_ref(resource, namespace, name)
            self._drain()
            latest = self._get_ref(resource, namespace, name)
            # Cleanup triggered by this request (an emptied namespace) may finish the deletion.
            return clone(latest or marked or current), latest is None

    # `builtins.list` in annotations from here on: inside the class `list` is Store.list.
    def delete_collection(
        self,
        resource: str,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        propagation: str | None = "Background",
        grace_period: int | None = None,
    ) -> builtins.list[dict]:
        """Delete every matching object; returns their last states."""
        with self.lock:
            items, _ = self.list_shared(
                resource, namespace, label_selector=label_selector, field_selector=field_selector
            )
            deleted = []
            for obj in items:
                metadata = obj["metadata"]
                try:
                    state, _ = self.delete_object(
                        resource,
                        metadata.get("namespace"),
                        metadata["name"],
                        propagation=propagation,
                        grace_period=grace_period,
                    )
                except ApiError as error:
                    if error.code != 404:
                        raise
                    continue
                deleted.append(state)
            return deleted

    # ------------------------------------------------------------------ watch

    def watch(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        send_initial_events: bool = False,
    ) -> Watcher:
        """Open a watch from `resource_version` (410 if too old), else with initial ADDEDs.

        `send_initial_events` (the watch-list protocol) starts with the current state and
        marks its end with the BOOKMARK that clients wait for.
        """
        rtype = self.type_of(resource)
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, rtype)

        def predicate(obj: dict[str, Any]) -> bool:
            return (labels is None or labels(obj)) and (fields is None or fields(obj))

        watcher = Watcher(resource, namespace, predicate if labels or fields else None)
        with self.lock:
            since = int(resource_version) if resource_version and resource_version.isdigit() else 0
            if since and not send_initial_events:
                floor = self._compacted_floor()
                if since < floor:
                    raise ApiError.gone(f"too old resource version: {since} ({floor})")
                for entry in self._history:
                    if entry.resource_version > since and self._watches(
                        watcher, entry.resource, entry.namespace
                    ):
                        event_type = watcher.translate(entry.type, entry.obj, entry.old)
                        if event_type:
                            watcher.events.put(
                                WatchEvent(event_type, entry.obj, entry.resource_version)
                            )
            else:
                for obj in self._iter(resource, namespace):
                    if watcher.matches(obj):
                        watcher.events.put(
                            WatchEvent("ADDED", obj, int(obj["metadata"]["resourceVersion"]))
                        )
            if send_initial_events:
                bookmark = {
                    "kind": rtype.kind,
                    "apiVersion": rtype.api_version,
                    "metadata": {
                        "resourceVersion": self.resource_version,
                        "annotations": {"k8s.io/initial-events-end": "true"},
                    },
                }
                watcher.events.put(WatchEvent("BOOKMARK", bookmark, self._resource_version))
            self._watchers.add(watcher)
        return watcher

    def bookmark_version(self, watcher: Watcher) -> int:
        """The version a BOOKMARK may carry for `watcher`: the store's, unless events are still
        queued for it (then the one before the oldest of them)."""
        with self.lock:
            if watcher.events.empty():
                return self._resource_version
            return watcher.sent_version

    def stop_watch(self, watcher: Watcher) -> None:
        with self.lock:
            self._watchers.discard(watcher)
        watcher.events.put(None)

    def close_watchers(self) -> None:
        with self.lock:
            watchers = list(self._watchers)
        for watcher in watchers:
            self.stop_watch(watcher)

    @staticmethod
    def _watches(watcher: Watcher, resource: str, namespace: str | None) -> bool:
        return watcher.resource == resource and (
            watcher.namespace is None or watcher.namespace == (namespace or "")
        )

    # ------------------------------------------------------------------ persistence

    def dump(self) -> dict[str, Any]:
        """Every object and the version counter, for saving to disk."""
        with self.lock:
            return {
                "resourceVersion": self._resource_version,
                "objects": {
                    resource: [obj for bucket in buckets.values() for obj in bucket.values()]
                    for resource, buckets in self._objects.items()
                },
            }

    def load(self, data: dict[str, Any]) -> None:
        """Restore a dump (CRDs first so their kinds are served), without events or hooks.
        Objects are read as this version's writes: what its disabled gates would have dropped
        (a dump of a newer emulated version) never reaches its allocator."""
        with self.lock:
            objects = data.get("objects", {})
            order = ["customresourcedefinitions", "namespaces"] + [
                key for key in objects if key not in ("customresourcedefinitions", "namespaces")
            ]
            for resource in order:
                for obj in objects.get(resource, []):
                    if resource == "customresourcedefinitions":
                        self.registry.register_crd(obj)
                    if self.registry.get(resource) is None:
                        continue
                    restored = clone(obj)
                    self.features.drop_disabled_fields(resource, restored)
                    self._insert(resource, restored)
            self._resource_version = max(
                self._resource_version, int(data.get("resourceVersion", 0))
            )
            self._history.clear()
            self._history_start = self._resource_version

    # ------------------------------------------------------------------ internals

    def _check_type_meta(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        api_version = obj.setdefault("apiVersion", rtype.api_version)
        kind = obj.setdefault("kind", rtype.kind)
        if api_version != rtype.api_version:
            raise ApiError.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rtype.api_version})"
            )
        if kind != rtype.kind:
            raise ApiError.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rtype.kind})"
            )

    def _generate_name(self, resource: str, metadata: dict[str, Any]) -> str:
        base = metadata["generateName"][:58]
        for _ in range(10):
            suffix = "".join(self._random.choice(_NAME_SUFFIX_ALPHABET) for _ in range(5))
            candidate = base + suffix
            if self._get_ref(resource, metadata.get("namespace"), candidate) is None:
                return candidate
        raise ApiError(
            500,
            "AlreadyExists",
            f"failed to generate a unique name from {metadata['generateName']!r}",
        )

    def _check_namespace(self, namespace: str | None, *, internal: bool) -> None:
        ns = self._get_ref("namespaces", None, namespace or "")
        if ns is None:
            raise ApiError.not_found("namespaces", namespace or "")
        if not internal and ns["metadata"].get("deletionTimestamp"):
            raise ApiError.forbidden(
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
                {"name": namespace, "kind": "namespaces"},
            )

    def _validate(self, rtype: ResourceType, obj: dict[str, Any], old: dict | None) -> None:
        """Schema and server-side rules; unknown fields are the HTTP layer's (fieldValidation)."""
        if rtype.crd is None:
            validation.validate_builtin(rtype, obj, old, self.schemas)
        else:
            validation.validate_custom(rtype, obj, creating=old is None, schemas=self.schemas)

    def _check_admin_access(
        self, rtype: ResourceType, obj: dict[str, Any], namespace: str | None
    ) -> None:
        """adminAccess only in a namespace labelled resource.kubernetes.io/admin-access=true
        (the claim and template strategies' Validate)."""
        ns = self._get_ref("namespaces", None, namespace or "")
        labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
        causes = validation.admin_access_causes(
            rtype, obj, allowed=labels.get(validation.ADMIN_ACCESS_LABEL) == "true"
        )
        if causes:
            name = (obj.get("metadata") or {}).get("name") or ""
            raise ApiError.invalid(rtype.kind, name, causes, rtype.group)

    def _check_finalizers(
        self, rtype: ResourceType, new: dict[str, Any], current: dict[str, Any]
    ) -> None:
        if not current["metadata"].get("deletionTimestamp"):
            return
        added = set(new["metadata"].get("finalizers") or []) - set(
            current["metadata"].get("finalizers") or []
        )
        if added:
            raise ApiError.invalid(
                rtype.kind,
                current["metadata"]["name"],
                [
                    cause(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        "Forbidden: no new finalizers can be added if the object is being "
                        f"deleted, found new finalizers {sorted(added)}",
                    )
                ],
                rtype.group,
            )

    @staticmethod
    def _check_preconditions(
        rtype: ResourceType, current: dict[str, Any], preconditions: dict[str, Any]
    ) -> None:
        metadata = current["metadata"]
        for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = preconditions.get(key)
            if wanted and wanted != metadata.get(key):
                raise ApiError.conflict(
                    rtype.plural,
                    metadata["name"],
                    f"Precondition failed: {label} in precondition: {wanted}, "
                    f"{label} in object meta: {metadata.get(key)}",
                    rtype.group,
                )

    def _merge_update(
        self,
        rtype: ResourceType,
        current: dict[str, Any],
        obj: dict[str, Any],
        subresource: str | None,
        internal: bool,
    ) -> dict[str, Any]:
        if subresource == "status":
            new = clone(current)
            if "status" in obj:
                new["status"] = clone(obj["status"])
            else:
                new.pop("status", None)
            return new
        if subresource is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        new = clone(obj)
        self._check_type_meta(rtype, new)
        metadata = _meta(new)
        for key in _SYSTEM_METADATA:
            if key in current["metadata"]:
                metadata[key] = current["metadata"][key]
            else:
                metadata.pop(key, None)
        if rtype.namespaced:
            metadata["namespace"] = current["metadata"]["namespace"]
        if rtype.status_subresource and not internal:
            if "status" in current:
                new["status"] = clone(current["status"])
            else:
                new.pop("status", None)
        if rtype.key == "namespaces":
            new["status"] = clone(current.get("status") or {"phase": "Active"})
        return new

    def _admit(
        self,
        operation: str,
        resource: str,
        subresource: str | None,
        namespace: str | None,
        name: str,
        obj: dict | None,
        old: dict | None,
    ) -> None:
        request = AdmissionRequest(operation, resource, subresource, namespace, name, obj, old)
        for hook in self._admission:
            hook(request)

    def _insert(self, resource: str, obj: dict[str, Any]) -> None:
        metadata = obj["metadata"]
        namespace = metadata.get("namespace") or ""
        self._objects.setdefault(resource, {}).setdefault(namespace, {})[metadata["name"]] = obj
        key = (resource, namespace, metadata["name"])
        self._by_uid[metadata["uid"]] = key
        for owner in metadata.get("ownerReferences") or []:
            self._dependents.setdefault(owner.get("uid", ""), set()).add(key)
        if int(metadata.get("resourceVersion") or 0) > self._resource_version:
            self._resource_version = int(metadata["resourceVersion"])

    def _unindex(self, resource: str, obj: dict[str, Any]) -> None:
        metadata = obj["metadata"]
        key = (resource, metadata.get("namespace") or "", metadata["name"])
        for owner in metadata.get("ownerReferences") or []:
            dependents = self._dependents.get(owner.get("uid", ""))
            if dependents is not None:
                dependents.discard(key)
                if not dependents:
                    del self._dependents[owner.get("uid", "")]

    def _commit(
        self, event_type: str, resource: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        """Persist a new version of an object (ADDED/MODIFIED) and fan the event out."""
        self._resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self._resource_version)
        if old is not None:
            self._unindex(resource, old)
        self._insert(resource, obj)
        # Kubernetes' garbage collector also collects a dependent written with an owner that is
        # already gone (a virtual owner node it then finds absent), not only the dependents of an
        # owner deleted later: a controller that raced its owner's deletion leaves no orphan.
        owners = obj["metadata"].get("ownerReferences") or []
        if any(ref.get("uid") not in self._by_uid for ref in owners):
            self._gc_queue.append(
                (
                    "collect",
                    (resource, obj["metadata"].get("namespace") or "", obj["metadata"]["name"]),
                )
            )
        if resource == "customresourcedefinitions":
            self.registry.register_crd(obj)
        self._publish(event_type, resource, obj, old)

    def _publish(
        self, event_type: str, resource: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        namespace = obj["metadata"].get("namespace")
        self._history.append(
            _HistoryEntry(self._resource_version, event_type, resource, namespace, obj, old)
        )
        for watcher in list(self._watchers):
            if self._watches(watcher, resource, namespace):
                translated = watcher.translate(event_type, obj, old)
                if translated:
                    watcher.events.put(WatchEvent(translated, obj, self._resource_version))
        for listener in self._listeners:
            listener(event_type, resource, obj)

    def _remove(
        self, resource: str, current: dict[str, Any], final: dict[str, Any] | None = None
    ) -> None:
        """Drop an object for good (its last state is `final`), then let GC and cleanups react."""
        metadata = current["metadata"]
        namespace = metadata.get("namespace") or ""
        bucket = self._objects.get(resource, {}).get(namespace, {})
        if bucket.get(metadata["name"]) is not current:
            return
        del bucket[metadata["name"]]
        self._unindex(resource, current)
        self._by_uid.pop(metadata["uid"], None)
        self._resource_version += 1
        last = final if final is not None else current
        last = {
            **last,
            "metadata": {**last["metadata"], "resourceVersion": str(self._resource_version)},
        }
        self._publish("DELETED", resource, last, None)
        self._gc_queue.append(("owner-gone", (resource, namespace, metadata["uid"])))
        for owner in metadata.get("ownerReferences") or []:
            self._gc_queue.append(("dependent-gone", ("", "", owner.get("uid", ""))))
        if namespace:
            self._gc_queue.append(("namespace-check", ("namespaces", "", namespace)))
        if resource == "customresourcedefinitions":
            self._gc_queue.append(("crd-gone", (resource, "", current["metadata"]["name"])))

    def _mark_deleting(
        self, resource: str, current: dict[str, Any], extra_finalizers: Sequence[str]
    ) -> dict[str, Any]:
        new = clone(current)
        metadata = new["metadata"]
        metadata.setdefault("deletionTimestamp", now_rfc3339())
        metadata.setdefault("deletionGracePeriodSeconds", 0)
        finalizers = metadata.get("finalizers") or []
        metadata["finalizers"] = finalizers + [f for f in extra_finalizers if f not in finalizers]
        if resource == "namespaces":
            new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
        if new != current:
            self._commit("MODIFIED", resource, new, current)
        return new

    def _mark_terminating(self, pod: dict[str, Any], grace: int) -> None:
        """A graceful pod deletion: deletionTimestamp is when the kubelet kills what still
        runs. A second request may bring it forward, never push it back."""
        metadata = pod["metadata"]
        deadline = now_rfc3339(grace)
        if metadata.get("deletionTimestamp") and metadata["deletionTimestamp"] <= deadline:
            return
        new = clone(pod)
        new["metadata"]["deletionTimestamp"] = deadline
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        self._commit("MODIFIED", "pods", new, pod)

    def _delete(
        self,
        resource: str,
        current: dict[str, Any],
        propagation: str,
        grace_period: int | None = None,
    ) -> None:
        """Apply one deletion request: remove now, or mark for deletion and let finalizers
        (or, for a running pod, the kubelet) finish it."""
        metadata = current["metadata"]
        uid = metadata["uid"]
        if propagation == "Orphan":
            self._orphan_dependents(uid)
        if resource == "pods" and (grace := pod_grace_period(current, grace_period)):
            self._mark_terminating(current, grace)
            return
        if resource == "namespaces":
            self._mark_deleting(resource, current, [])
            self._gc_queue.append(("namespace-purge", ("namespaces", "", metadata["name"])))
            self._gc_queue.append(("namespace-check", ("namespaces", "", metadata["name"])))
            return
        dependents = self._dependents.get(uid)
        if propagation == "Foreground" and dependents:
            self._mark_deleting(resource, current, [FOREGROUND_FINALIZER])
            for key in list(dependents):
                self._gc_queue.append(("collect", key))
            self._gc_queue.append(("dependent-gone", ("", "", uid)))
            return
        if metadata.get("finalizers"):
            self._mark_deleting(resource, current, [])
            return
        self._remove(resource, current)

    def _orphan_dependents(self, uid: str) -> None:
        for resource, namespace, name in list(self._dependents.get(uid, ())):
            dependent = self._get_ref(resource, namespace, name)
            if dependent is None:
                continue
            new = clone(dependent)
            new["metadata"]["ownerReferences"] = [
                ref for ref in new["metadata"].get("ownerReferences") or [] if ref.get("uid") != uid
            ]
            if not new["metadata"]["ownerReferences"]:
                del new["metadata"]["ownerReferences"]
            self._commit("MODIFIED", resource, new, dependent)

    def _drain(self) -> None:
        """Run the garbage collector and namespace/CRD cleanup triggered by this write."""
        if self._draining:
            return
        self._draining = True
        try:
            while self._gc_queue:
                task, (resource, namespace, ident) = self._gc_queue.popleft()
                if task == "owner-gone":
                    for key in list(self._dependents.get(ident, ())):
                        self._gc_queue.append(("collect", key))
                elif task == "collect":
                    self._collect(resource, namespace, ident)
                elif task == "dependent-gone":
                    self._finish_foreground(ident)
                elif task == "namespace-purge":
                    self._purge_namespace(ident)
                elif task == "namespace-check":
                    self._finish_namespace(ident)
                elif task == "crd-gone":
                    self._purge_crd_kind(ident)
        finally:
            self._draining = False

    def _owner_state(self, ref: dict[str, Any]) -> str:
        """'absent', 'foreground' (deleting, waiting for dependents) or 'solid'."""
        location = self._by_uid.get(ref.get("uid", ""))
        owner = self._get_ref(*location) if location else None
        if owner is None:
            return "absent"
        if FOREGROUND_FINALIZER in (owner["metadata"].get("finalizers") or []):
            return "foreground"
        return "solid"

    def _collect(self, resource: str, namespace: str, name: str) -> None:
        """The GC's decision for one dependent whose owner went away or is being deleted."""
        dependent = self._get_ref(resource, namespace or None, name)
        if dependent is None:
            return
        refs = dependent["metadata"].get("ownerReferences") or []
        states = {ref.get("uid"): self._owner_state(ref) for ref in refs}
        if "solid" in states.values():
            absent = {uid for uid, state in states.items() if state == "absent"}
            if absent:
                new = clone(dependent)
                new["metadata"]["ownerReferences"] = [
                    ref for ref in refs if ref.get("uid") not in absent
                ]
                self._commit("MODIFIED", resource, new, dependent)
            return
        policy = "Foreground" if "foreground" in states.values() else "Background"
        if dependent["metadata"].get("deletionTimestamp") and policy == "Background":
            return
        self._delete(resource, dependent, policy)

    def _finish_foreground(self, owner_uid: str) -> None:
        """Drop foregroundDeletion once no dependent blocking the owner remains."""
        location = self._by_uid.get(owner_uid)
        if location is None:
            return
        owner = self._get_ref(*location)
        if owner is None or FOREGROUND_FINALIZER not in (owner["metadata"].get("finalizers") or []):
            return
        for resource, namespace, name in self._dependents.get(owner_uid, ()):
            dependent = self._get_ref(resource, namespace or None, name)
            if dependent is None:
                continue
            for ref in dependent["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == owner_uid and ref.get("blockOwnerDeletion"):
                    return
        new = clone(owner)
        new["metadata"]["finalizers"] = [
            f for f in owner["metadata"]["finalizers"] if f != FOREGROUND_FINALIZER
        ]
        if new["metadata"]["finalizers"]:
            self._commit("MODIFIED", location[0], new, owner)
        else:
            self._remove(location[0], owner)

    def _purge_namespace(self, namespace: str) -> None:
        for resource in list(self._objects):
            rtype = self.registry.get(resource)
            if rtype is None or not rtype.namespaced:
                continue
            for obj in list(self._bucket(resource, namespace).values()):
                if not obj["metadata"].get("deletionTimestamp"):
                    self._delete(resource, obj, "Background")

    def _finish_namespace(self, namespace: str) -> None:
        ns = self._get_ref("namespaces", None, namespace)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        if any(
            self._objects.get(resource, {}).get(namespace)
            for resource in self._objects
            if resource != "namespaces"
        ):
            return
        if not ns["metadata"].get("finalizers"):
            self._remove("namespaces", ns)

    def _purge_crd_kind(self, crd_name: str) -> None:
        # Custom objects go with their CRD (the real server empties the kind before removing it).
        for bucket in list(self._objects.get(crd_name, {}).values()):
            for obj in list(bucket.values()):
                self._remove(crd_name, obj)
        self._objects.pop(crd_name, None)
        self.registry.unregister(crd_name)


def _list_scope(
    resource: str, namespace: str | None, label_selector: str | None, field_selector: str | None
) -> str:
    """What a continue token belongs to: like the real server's key prefix, it is valid only
    for the list (kind, namespace, selectors) that issued it."""
    return "\x00".join((resource, namespace or "", label_selector or "", field_selector or ""))


def _encode_continue(snapshot_id: str, resource_version: int, start: int, scope: str) -> str:
    """An opaque continue token, base64 JSON as the real server's are."""
    payload = {
        "v": "meta.k8s.io/v1",
        "rv": resource_version,
        "start": start,
        "id": snapshot_id,
        "scope": scope,
    }
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[str, int, int, str]:
    try:
        padded = token + "=" * (-len(token) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded))
        return str(payload["id"]), int(payload["rv"]), int(payload["start"]), str(payload["scope"])
    except (ValueError, KeyError, TypeError):
        raise ApiError.bad_request("continue key is not valid") from None

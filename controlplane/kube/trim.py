"""What the observer keeps of each watched object: per kind, a pure function (object in, object
out, the input left alone) that keeps only the fields its consumers read, as client-go's
informers are given a transform with `SetTransform` to drop managedFields and the like before
an object enters the cache. At 10,000 units the informers hold every GPUUnit, claim and pod;
the fields dropped here (managedFields, pod specs, most of pod statuses) were half of that. What
is kept is held once where it repeats: strings are interned, and a dict or list equal to one
kept a moment ago is that one (`_Shared`), which nearly halves what the informers hold at 10,000
units (91 MB to 50 MB of objects, bench/observer_cost.py's cluster).

What each kind's consumers read (runtime/control/observer.py, runtime/control/reconcile.py
with provisioning.recreate_pod, runtime/control/status.py, inventory/observe.py through
sync.apply_observed):

- every kind: metadata name and namespace (the informer's key), resourceVersion, uid,
  generation, creationTimestamp, deletionTimestamp and labels (the observer keys pods and
  claims to units by label).
- GPUUnit: the request-hash annotation (recreate_pod) and status whole (compared with what the
  unit's row says before a status patch).
- Pod: spec.nodeName, each container's and init container's resources.requests (a node's
  requested cpu and memory); status phase, reason and message, the Ready, PodScheduled and
  DisruptionTarget conditions (type, status, reason, message) and each container's state:
  waiting (image, reason and message), running (startedAt) or terminated (finishedAt), what
  runtime/control/metering.py bills by.
- ResourceClaim: status.allocation (devices.results whole, nodeSelector) and reservedFor.
- Node: status.allocatable and conditions (type, status).
- ResourceSlice: spec driver, nodeName, pool, sharedCounters and devices, each device whole:
  the inventory hashes a device's whole entry to tell whether it changed since the last sync,
  and the backstop sync hashes untrimmed slices.
- DeviceClass: spec.selectors. DeviceTaintRule: spec deviceSelector and taint. ResourceQuota:
  spec.hard and status hard and used.

A field a consumer starts to read must be added here: controlplane/tests/test_trim.py checks
that the consumers' results are the same on trimmed and whole objects."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from typing import Any

Object = dict[str, Any]

# runtime.manifests.ANNOTATION_REQUEST_HASH (controlplane does not import runtime).
REQUEST_HASH_ANNOTATION = "runtime.lokiwager.io/request-hash"
_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
)


def _picked(source: Any, keys: tuple[str, ...]) -> Object:
    """The entries of `source` (a dict, or nothing) under `keys` that are there."""
    if not isinstance(source, dict):
        return {}
    return {key: source[key] for key in keys if key in source}


def _metadata(obj: Object, *, annotations: tuple[str, ...] = ()) -> Object:
    metadata = obj.get("metadata") or {}
    kept = _picked(metadata, _METADATA)
    if metadata.get("labels"):
        kept["labels"] = metadata["labels"]
    if annotations and (found := _picked(metadata.get("annotations"), annotations)):
        kept["annotations"] = found
    return kept


def _token(value: Any) -> Any:
    """What tells an item of a kept dict or list apart: a kept container by identity (equal
    ones are already the same object), a string by value (interned), another scalar by type
    and value (True is not 1)."""
    if isinstance(value, dict | list):
        return id(value)
    if isinstance(value, str):
        return value
    return type(value), value


class _Shared:
    """Rebuilds a value bottom-up with its strings interned and each dict or list replaced by an
    equal one already kept, where there is one (equal: the same keys in the same order, the same
    items). Ten thousand pods request the same cpu and memory and are Ready the same way, the
    claims on a node select it the same way, a node's GPUs agree on most attribute values: each
    such value is held once, not once per object. What is kept shares nothing with the input,
    and the informers' objects are only ever read, never changed in place (their consumers
    build new values), so sharing changes nothing they see.

    It remembers the last `size` to `2 * size` values kept, in two generations (when the young
    one is full it becomes the old one and the old one is dropped; a value found in the old one
    moves back), so values that repeat across a list stay shared while the many that occur
    once (names, uids, versions) pass through. The informers' threads share it: a race between
    them can only keep a value twice."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self.young: dict[tuple, Any] = {}
        self.old: dict[tuple, Any] = {}

    def __call__(self, value: Any) -> Any:
        kept: dict | list
        if isinstance(value, str):
            return sys.intern(value)
        if isinstance(value, dict):
            kept = {key: self(item) for key, item in value.items()}
            identity = (
                dict,
                *itertools.chain.from_iterable((k, _token(v)) for k, v in kept.items()),
            )
        elif isinstance(value, list):
            kept = [self(item) for item in value]
            identity = (list, *map(_token, kept))
        else:
            return value
        found = self.young.get(identity)
        if found is None:
            found = self.old.get(identity, kept)
            if len(self.young) >= self.size:
                self.old, self.young = self.young, {}
            self.young[identity] = found
        return found


_compact = _Shared()


def _trimmed(obj: Object, *, annotations: tuple[str, ...] = (), **parts: Object | None) -> Object:
    """The object with its trimmed metadata and each non-empty part, compacted (the object
    itself is one of a kind: only its parts are looked up)."""
    kept: Object = {"metadata": _metadata(obj, annotations=annotations)}
    kept.update((name, part) for name, part in parts.items() if part)
    return {name: _compact(part) for name, part in kept.items()}


def trim_gpuunit(obj: Object) -> Object:
    return _trimmed(obj, annotations=(REQUEST_HASH_ANNOTATION,), status=obj.get("status"))


def _requests_only(containers: Any) -> list[Object]:
    return [
        {"resources": {"requests": requests}}
        if (requests := ((container or {}).get("resources") or {}).get("requests"))
        else {}
        for container in containers or []
    ]


# The pod conditions read: whether it is Ready, why it is not scheduled, whether the device
# taint eviction deleted it.
POD_CONDITIONS = ("Ready", "PodScheduled", "DisruptionTarget")


def _state(state: Any) -> Object:
    """One container state as the consumers read it: why it waits (and its message), when it
    started running, when it ran and ended (what metering bills by) and why."""
    state = state or {}
    if waiting := state.get("waiting"):
        return {"waiting": _picked(waiting, ("reason", "message"))}
    if "running" in state:
        return {"running": _picked(state["running"], ("startedAt",))}
    if "terminated" in state:
        fields = ("startedAt", "finishedAt", "reason", "exitCode")
        return {"terminated": _picked(state["terminated"], fields)}
    return {}


def _container_states(statuses: Any) -> list[Object]:
    """Each container's current and last state, its image while it waits, and its restart
    count: metering bills from the first start any of them shows (runtime/control/status.py)."""
    kept = []
    for entry in statuses or []:
        entry = entry or {}
        state = _state(entry.get("state"))
        if not state:
            continue
        kept_entry: Object = {"state": state}
        if "waiting" in state:
            kept_entry.update(_picked(entry, ("image",)))
        if last := _state(entry.get("lastState")):
            kept_entry["lastState"] = last
        if entry.get("restartCount"):
            kept_entry["restartCount"] = entry["restartCount"]
        kept.append(kept_entry)
    return kept


def trim_pod(obj: Object) -> Object:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    kept_spec = _picked(spec, ("nodeName",))
    if "containers" in spec:
        kept_spec["containers"] = _requests_only(spec["containers"])
    if "initContainers" in spec:
        kept_spec["initContainers"] = _requests_only(spec["initContainers"])
    kept_status = _picked(status, ("phase", "reason", "message"))
    conditions = [
        _picked(condition, ("type", "status", "reason", "message"))
        for condition in status.get("conditions") or []
        if condition.get("type") in POD_CONDITIONS
    ]
    if conditions:
        kept_status["conditions"] = conditions
    for key in ("initContainerStatuses", "containerStatuses"):
        if states := _container_states(status.get(key)):
            kept_status[key] = states
    return _trimmed(obj, spec=kept_spec, status=kept_status)


def trim_resource_claim(obj: Object) -> Object:
    status = obj.get("status") or {}
    kept_status = _picked(status, ("reservedFor",))
    allocation = status.get("allocation")
    if allocation is not None:
        # Present, even empty, means allocated: it is kept as a dict whatever it holds.
        kept_allocation = _picked(allocation, ("nodeSelector",))
        results = (allocation.get("devices") or {}).get("results")
        if results is not None:
            kept_allocation["devices"] = {"results": results}
        kept_status["allocation"] = kept_allocation
    return _trimmed(obj, status=kept_status)


def trim_node(obj: Object) -> Object:
    status = obj.get("status") or {}
    kept_status = _picked(status, ("allocatable",))
    if "conditions" in status:
        kept_status["conditions"] = [
            _picked(condition, ("type", "status")) for condition in status["conditions"] or []
        ]
    return _trimmed(obj, status=kept_status)


def trim_resource_slice(obj: Object) -> Object:
    spec = _picked(obj.get("spec"), ("driver", "nodeName", "pool", "sharedCounters", "devices"))
    return _trimmed(obj, spec=spec)


def trim_device_class(obj: Object) -> Object:
    return _trimmed(obj, spec=_picked(obj.get("spec"), ("selectors",)))


def trim_device_taint_rule(obj: Object) -> Object:
    return _trimmed(obj, spec=_picked(obj.get("spec"), ("deviceSelector", "taint")))


def trim_resource_quota(obj: Object) -> Object:
    return _trimmed(
        obj,
        spec=_picked(obj.get("spec"), ("hard",)),
        status=_picked(obj.get("status"), ("hard", "used")),
    )


# By plural, as the observer's informers are (DeviceTaintRule's is the same at every version).
TRANSFORMS: dict[str, Callable[[Object], Object]] = {
    "gpuunits": trim_gpuunit,
    "pods": trim_pod,
    "resourceclaims": trim_resource_claim,
    "nodes": trim_node,
    "resourceslices": trim_resource_slice,
    "deviceclasses": trim_device_class,
    "devicetaintrules": trim_device_taint_rule,
    "resourcequotas": trim_resource_quota,
}

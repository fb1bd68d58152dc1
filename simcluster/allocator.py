"""Pure DRA allocation: the node and devices a pod's ResourceClaims get, following the rules of
the kube-scheduler's structured allocator and worded like its failures. No store, no threads."""

from __future__ import annotations

import json
import math
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from dracel import (
    CelCompileError,
    CompiledSelector,
    SelectorRuntimeError,
    compile_selector,
    device_env,
    device_selected,
)
from simcluster import capacity
from simcluster.capacity import Consumption, CounterSetKey, Usage
from simcluster.quota import pod_usage
from simcluster.taints import TaintRules, all_tolerated

DeviceKey = tuple[str, str, str]
SelectorKey = tuple[str, ...]
# A device's match against a request's selectors, or the runtime error one of them raised.
Verdict = bool | SelectorRuntimeError
# reservedFor holds at most this many consumers (1.33+).
MAX_RESERVED_FOR = 256

# Per-node reasons, as the Filter plugins word them.
REASON_CLAIMS = "cannot allocate all claims"
REASON_CLAIM_ELSEWHERE = "resourceclaim not available on the node"
REASON_CPU = "Insufficient cpu"
REASON_MEMORY = "Insufficient memory"
REASON_PODS = "Too many pods"
REASON_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
REASON_CORDONED = "node(s) were unschedulable"
REASON_VOLUME_NODE = "node(s) had volume node affinity conflict"
REASON_NOT_READY = "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
REASON_TIMEOUT = "timed out trying to allocate devices"
# Device choices tried per node before giving up; the real allocator is bounded by a timeout.
SEARCH_LIMIT = 20_000
# Reasons preemption could fix by evicting pods; everything else is "not helpful".
_RESOLVABLE = {REASON_CPU, REASON_MEMORY, REASON_PODS}


class _SliceEntry:
    """CEL inputs and match results for one version of one ResourceSlice; reused across passes
    while the slice's resourceVersion is unchanged, since CEL evaluation dominates a pass."""

    __slots__ = ("envs", "matches")

    def __init__(self, driver: str, devices: list[dict[str, Any]]) -> None:
        self.envs = [device_env(driver, device) for device in devices]
        self.matches: dict[SelectorKey, list[Verdict | None]] = {}

    def verdict(self, index: int, key: SelectorKey, selectors: list[CompiledSelector]) -> Verdict:
        """Whether the device matches, or the runtime error of the selector that failed."""
        results = self.matches.get(key)
        if results is None:
            results = self.matches[key] = [None] * len(self.envs)
        result = results[index]
        if result is None:
            try:
                result = device_selected(selectors, self.envs[index])
            except SelectorRuntimeError as exc:
                result = exc
            results[index] = result
        return result

    def match(self, index: int, key: SelectorKey, selectors: list[CompiledSelector]) -> bool:
        """A match; a runtime error counts as none (DeviceTaintRule selectors)."""
        return self.verdict(index, key, selectors) is True


class SelectorCache:
    """Survives across scheduler passes; `Inventory` drops entries of slices that are gone."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, str], _SliceEntry] = {}

    def entry(self, resource_slice: Mapping[str, Any]) -> _SliceEntry:
        spec = resource_slice.get("spec") or {}
        key = slice_version(resource_slice)
        entry = self._entries.get(key) if key else None
        if entry is None:
            entry = _SliceEntry(spec.get("driver", ""), spec.get("devices") or [])
            # Without a resourceVersion a changed slice cannot be told apart: never reuse it.
            if key:
                self._entries[key] = entry
        return entry

    def retain(self, keys: set[tuple[str, str, str]]) -> None:
        for key in [k for k in self._entries if k not in keys]:
            del self._entries[key]


def slice_version(resource_slice: Mapping[str, Any]) -> tuple[str, str, str] | None:
    metadata = resource_slice.get("metadata") or {}
    version = metadata.get("resourceVersion")
    if not version:
        return None
    return (metadata.get("name", ""), metadata.get("uid", ""), str(version))


@dataclass(eq=False)
class Device:
    driver: str
    pool: str
    name: str
    # Exactly one of: `node` (node-local), `node_selector`, or neither (usable on every node).
    node: str | None
    node_selector: dict[str, Any] | None
    entry: _SliceEntry
    index: int
    # The slice's own taints, then those of matching DeviceTaintRules.
    taints: tuple[dict[str, Any], ...] = ()
    # The device as published (capacity, consumesCounters); shareable when it allows
    # multiple allocations.
    spec: Mapping[str, Any] = field(default_factory=dict)
    shareable: bool = False
    draws: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.name)

    def usable_on(self, node: NodeState) -> bool:
        if self.node is not None:
            return self.node == node.name
        return self.node_selector is None or node_selector_matches(self.node_selector, node)


@dataclass(eq=False)
class Pool:
    driver: str
    name: str
    generation: int
    complete: bool
    invalid: bool
    devices: list[Device]

    @property
    def pool_id(self) -> str:
        return f"{self.driver}/{self.name}"


class Inventory:
    """The devices of a cluster, indexed by node: only the highest generation of each pool
    counts; a pool with fewer slices than resourceSliceCount is incomplete, one whose slices
    disagree on that count or repeat a device name is invalid. Each device carries its taints,
    its slice's and those `taint_rules` add."""

    def __init__(
        self,
        slices: Iterable[Mapping[str, Any]],
        cache: SelectorCache | None = None,
        taint_rules: TaintRules | None = None,
    ) -> None:
        cache = cache or SelectorCache()
        grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for resource_slice in slices:
            spec = resource_slice.get("spec") or {}
            pool = spec.get("pool") or {}
            grouped.setdefault((spec.get("driver", ""), pool.get("name", "")), []).append(
                resource_slice
            )
        self.pools: list[Pool] = []
        self.node_devices: dict[str, list[Device]] = {}
        self.node_pools: dict[str, list[Pool]] = {}
        self.shared_devices: list[Device] = []
        self.shared_pools: list[Pool] = []
        self.by_key: dict[DeviceKey, Device] = {}
        # Counter sets of each pool (sharedCounters of any of its kept slices).
        self.counter_sets: dict[CounterSetKey, dict[str, Any]] = {}
        # Whether any device has a NoExecute taint: without one, nothing is to be evicted.
        self.no_execute = False
        live: set[tuple[str, str, str]] = set()
        for (driver, pool_name), pool_slices in sorted(grouped.items()):
            generation = max(_pool_field(s, "generation", 0) for s in pool_slices)
            kept = [s for s in pool_slices if _pool_field(s, "generation", 0) == generation]
            counts = {_pool_field(s, "resourceSliceCount", 1) for s in kept}
            expected = min(counts)
            pool = Pool(
                driver,
                pool_name,
                generation,
                complete=len(kept) == expected,
                invalid=len(counts) > 1 or len(kept) > expected,
                devices=[],
            )
            names: set[str] = set()
            for resource_slice in sorted(kept, key=lambda s: s.get("metadata", {}).get("name", "")):
                version = slice_version(resource_slice)
                if version:
                    live.add(version)
                entry = cache.entry(resource_slice)
                for counter_set in resource_slice["spec"].get("sharedCounters") or []:
                    self.counter_sets[(driver, pool_name, str(counter_set.get("name", "")))] = {
                        name: capacity.quantity(counter.get("value", "0"))
                        for name, counter in (counter_set.get("counters") or {}).items()
                    }
                for index, device in enumerate(resource_slice["spec"].get("devices") or []):
                    if device["name"] in names:
                        pool.invalid = True
                    names.add(device["name"])
                    found = _device(driver, pool_name, resource_slice["spec"], device, entry, index)
                    if taint_rules:
                        _add_rule_taints(found, taint_rules)
                    pool.devices.append(found)
                    self.by_key.setdefault(found.key, found)
                    self.no_execute = self.no_execute or any(
                        t.get("effect") == "NoExecute" for t in found.taints
                    )
            self.pools.append(pool)
            pool_nodes = {d.node for d in pool.devices}
            for node_name in pool_nodes - {None}:
                self.node_pools.setdefault(node_name, []).append(pool)  # type: ignore[arg-type]
            if None in pool_nodes:
                self.shared_pools.append(pool)
            if pool.invalid:
                continue
            for device in pool.devices:
                if device.node is None:
                    self.shared_devices.append(device)
                else:
                    self.node_devices.setdefault(device.node, []).append(device)
        cache.retain(live)


def _pool_field(resource_slice: Mapping[str, Any], name: str, default: int) -> int:
    return int(((resource_slice.get("spec") or {}).get("pool") or {}).get(name, default))


def _device(
    driver: str,
    pool: str,
    spec: Mapping[str, Any],
    device: Mapping[str, Any],
    entry: _SliceEntry,
    index: int,
) -> Device:
    source = device if spec.get("perDeviceNodeSelection") else spec
    node = source.get("nodeName")
    selector = None if node or source.get("allNodes") else source.get("nodeSelector")
    taints = tuple(t for t in device.get("taints") or () if isinstance(t, dict))
    return Device(
        driver,
        pool,
        device["name"],
        node,
        selector,
        entry,
        index,
        taints,
        spec=device,
        shareable=bool(device.get("allowMultipleAllocations")),
        draws=capacity.counter_draws(device),
    )


def _add_rule_taints(device: Device, rules: TaintRules) -> None:
    """Append the taints of matching rules after the slice's own, as the tracker patches them."""

    def matches(key: tuple[str, ...], selectors: list[CompiledSelector]) -> bool:
        return device.entry.match(device.index, key, selectors)

    added = rules.matching(device.driver, device.pool, device.name, matches)
    if added:
        device.taints = (*device.taints, *(taint for _name, taint in added))


@dataclass
class NodeState:
    """What the scheduler knows of one node for a pass; free amounts shrink as pods land."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    cpu_free: int = 0  # millicores
    memory_free: int = 0  # bytes
    pods_free: int = 110
    unschedulable: bool = False
    ready: bool = True


@dataclass
class ClaimRequest:
    """One ResourceClaim a pod references, as the allocator needs it."""

    namespace: str
    name: str
    requests: list[dict[str, Any]]
    config: list[dict[str, Any]] = field(default_factory=list)
    constraints: list[dict[str, Any]] = field(default_factory=list)
    allocation: dict[str, Any] | None = None
    reserved_for: list[dict[str, Any]] = field(default_factory=list)
    deleting: bool = False

    @classmethod
    def from_claim(cls, claim: Mapping[str, Any]) -> ClaimRequest:
        metadata = claim.get("metadata") or {}
        devices = (claim.get("spec") or {}).get("devices") or {}
        status = claim.get("status") or {}
        return cls(
            namespace=metadata.get("namespace", ""),
            name=metadata.get("name", ""),
            requests=list(devices.get("requests") or []),
            config=list(devices.get("config") or []),
            constraints=[c for c in devices.get("constraints") or [] if isinstance(c, dict)],
            allocation=status.get("allocation"),
            reserved_for=list(status.get("reservedFor") or []),
            deleting=bool(metadata.get("deletionTimestamp")),
        )


@dataclass
class PodRequest:
    namespace: str
    name: str
    uid: str = ""
    cpu: int = 0  # millicores
    memory: int = 0  # bytes
    node_selector: dict[str, str] = field(default_factory=dict)
    claims: list[ClaimRequest] = field(default_factory=list)
    # nodeAffinity.required of the PersistentVolumes the pod mounts (VolumeBinding's Filter).
    volume_affinities: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any], claims: list[ClaimRequest]) -> PodRequest:
        metadata = pod.get("metadata") or {}
        usage = pod_usage(pod)
        cpu = usage.get("requests.cpu")
        memory = usage.get("requests.memory")
        return cls(
            namespace=metadata.get("namespace", ""),
            name=metadata.get("name", ""),
            uid=metadata.get("uid", ""),
            cpu=math.ceil(cpu.amount * 1000) if cpu else 0,
            memory=math.ceil(memory.amount) if memory else 0,
            node_selector=dict((pod.get("spec") or {}).get("nodeSelector") or {}),
            claims=claims,
        )


@dataclass
class Placement:
    node: str
    # status.allocation for each claim allocated now (claims allocated before are not here).
    allocations: dict[str, dict[str, Any]]
    devices: list[DeviceKey]
    # What the placement takes: devices whole, shares and counters.
    usage: Usage = field(default_factory=Usage)


@dataclass
class Unschedulable:
    """PodScheduled=False/Unschedulable with the scheduler's FitError message."""

    message: str
    # Claims the DRA PostFilter deallocates so that the next attempt may place them elsewhere.
    deallocate: list[str] = field(default_factory=list)


@dataclass
class SchedulingError:
    """A failure the real scheduler reports as an error (reason SchedulerError), not a fit."""

    message: str


@dataclass
class _Alternative:
    """One way to satisfy a request: the request itself or one firstAvailable subrequest."""

    result_name: str
    class_name: str
    mode: str
    count: int
    admin_access: bool
    key: SelectorKey
    selectors: list[CompiledSelector]
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    # exactly.capacity.requests: {capacity name: quantity}.
    capacity: dict[str, str] = field(default_factory=dict)
    # How many of `selectors` are the class's (they come first).
    class_selectors: int = 0

    @property
    def capacity_key(self) -> str:
        return json.dumps(self.capacity, sort_keys=True) if self.capacity else ""

    @property
    def tolerations_key(self) -> str:
        return json.dumps(self.tolerations, sort_keys=True) if self.tolerations else ""

    def tolerates(self, device: Device) -> bool:
        return not device.taints or all_tolerated(device.taints, self.tolerations)


@dataclass
class _Need:
    claim: ClaimRequest
    request_name: str
    alternatives: list[_Alternative]


# A device chosen for a request, with what it consumes when shared (None: held whole or,
# with admin access, not held at all).
_Chosen = tuple[Device, Consumption | None]
_Pick = tuple[_Need, _Alternative, list[_Chosen]]


@dataclass
class _Fit:
    picks: list[_Pick]


class _FilterError(Exception):
    """A Filter failure the scheduler reports as an error rather than a misfit."""


@dataclass
class _Plan:
    """What PreFilter learned about a pod: the claims to allocate and where allocated ones are."""

    needs: list[_Need]
    pinned: list[ClaimRequest]
    class_configs: dict[str, list[dict[str, Any]]]


def node_selector_matches(selector: Mapping[str, Any], node: NodeState) -> bool:
    """A core NodeSelector: terms are ORed, the requirements inside a term ANDed."""
    for term in selector.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not expressions and not fields:
            continue
        if all(_requirement(r, node.labels) for r in expressions) and all(
            _requirement(r, {"metadata.name": node.name}) for r in fields
        ):
            return True
    return False


def _requirement(requirement: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key, operator = requirement.get("key", ""), requirement.get("operator", "")
    wanted = requirement.get("values") or []
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and wanted:
        try:
            actual, bound = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def allocation_node_selector(node: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def fit_error_message(
    total: int, reasons: Counter[str] | None, prefilter: str | None, post_filter: str
) -> str:
    """The FitError text: `0/N nodes are available: <histogram>.` then the PostFilter verdicts."""
    message = f"0/{total} nodes are available:"
    if prefilter:
        message += f" {prefilter}."
    elif reasons:
        message += " " + ", ".join(sorted(f"{n} {r}" for r, n in reasons.items())) + "."
    return f"{message} {post_filter}" if post_filter else message


def preemption_message(total: int, resolvable: int) -> str:
    """DefaultPreemption's verdict when the cluster holds no lower-priority victims."""
    histogram = Counter[str]()
    if resolvable:
        histogram["No preemption victims found for incoming pod"] = resolvable
    if total - resolvable:
        histogram["Preemption is not helpful for scheduling"] = total - resolvable
    return "preemption: " + fit_error_message(total, histogram, None, "")


class Allocator:
    """One scheduling pass over an `Inventory` and the nodes. `place` decides for one pod without
    changing anything; `commit` records a placement so later pods of the pass see it."""

    def __init__(
        self,
        inventory: Inventory,
        classes: Mapping[str, Mapping[str, Any]],
        nodes: Iterable[NodeState],
        allocated: Iterable[DeviceKey] | Usage = (),
    ) -> None:
        self.inventory = inventory
        self.classes = classes
        self.nodes = {node.name: node for node in sorted(nodes, key=lambda n: n.name)}
        self.usage = allocated if isinstance(allocated, Usage) else Usage(set(allocated))
        # Devices held whole; shareable devices and their counters are in `usage` only.
        self.allocated: set[DeviceKey] = self.usage.exclusive
        self._consumptions: dict[tuple[DeviceKey, str], Consumption | None] = {}
        self._matching_cache: dict[tuple[str, SelectorKey], list[Device]] = {}
        self._shared_match: dict[SelectorKey, bool] = {}
        self._candidates: dict[SelectorKey, list[str]] = {}
        self._first_candidate: dict[tuple[SelectorKey, str], int] = {}
        # Within a pass resources only shrink, so a pod shape that failed once fails again.
        self._failed_shapes: dict[Any, Unschedulable | SchedulingError] = {}

    # -- deciding ----------------------------------------------------------------------------

    def place(self, pod: PodRequest) -> Placement | Unschedulable | SchedulingError:
        total = len(self.nodes)
        plan_or_failure = self._prefilter(pod)
        if isinstance(plan_or_failure, Unschedulable | SchedulingError):
            return plan_or_failure
        plan = plan_or_failure
        shape = self._shape(pod, plan)
        if shape is not None and shape in self._failed_shapes:
            return self._failed_shapes[shape]
        try:
            for node in self._search_order(pod, plan):
                verdict = self._filter(pod, plan, node)
                if isinstance(verdict, _Fit):
                    return self._build_placement(node, plan, verdict.picks)
            reasons, resolvable = self._diagnose(pod, plan)
        except _FilterError as exc:
            failure: Unschedulable | SchedulingError = SchedulingError(
                f'running "DynamicResources" filter plugin: {exc}'
            )
        else:
            failure = self._unschedulable(pod, plan, total, reasons, resolvable)
        if shape is not None:
            self._failed_shapes[shape] = failure
        return failure

    def commit(self, placement: Placement, pod: PodRequest) -> None:
        node = self.nodes[placement.node]
        node.cpu_free -= pod.cpu
        node.memory_free -= pod.memory
        node.pods_free -= 1
        self.usage.merge(placement.usage)

    def _prefilter(self, pod: PodRequest) -> _Plan | Unschedulable | SchedulingError:
        total = len(self.nodes)
        needs: list[_Need] = []
        pinned: list[ClaimRequest] = []
        class_configs: dict[str, list[dict[str, Any]]] = {}
        for claim in pod.claims:
            problem = None
            if claim.deleting:
                problem = f'resourceclaim "{claim.name}" is being deleted'
            elif claim.allocation is not None:
                if not any(r.get("uid") == pod.uid for r in claim.reserved_for) and (
                    len(claim.reserved_for) >= MAX_RESERVED_FOR
                ):
                    problem = "resourceclaim in use"
                pinned.append(claim)
            if problem:
                post = preemption_message(total, 0)
                return Unschedulable(fit_error_message(total, None, problem, post))
            if claim.allocation is not None:
                continue
            for request in claim.requests:
                alternatives: list[_Alternative] = []
                subrequests = (
                    [(request.get("name", ""), request["exactly"])]
                    if request.get("exactly")
                    else [
                        (f"{request.get('name', '')}/{sub.get('name', '')}", sub)
                        for sub in request.get("firstAvailable") or []
                    ]
                )
                for result_name, exact in subrequests:
                    class_name = exact.get("deviceClassName", "")
                    device_class = self.classes.get(class_name)
                    if device_class is None:
                        problem = f"request {result_name}: device class {class_name} does not exist"
                        post = preemption_message(total, 0)
                        return Unschedulable(fit_error_message(total, None, problem, post))
                    try:
                        alternative = self._alternative(claim, result_name, exact, device_class)
                    except _FilterError as exc:
                        return SchedulingError(f'running "DynamicResources" filter plugin: {exc}')
                    class_configs[class_name] = list(
                        (device_class.get("spec") or {}).get("config") or []
                    )
                    alternatives.append(alternative)
                needs.append(_Need(claim, request.get("name", ""), alternatives))
        return _Plan(needs, pinned, class_configs)

    def _alternative(
        self,
        claim: ClaimRequest,
        result_name: str,
        exact: Mapping[str, Any],
        device_class: Mapping[str, Any],
    ) -> _Alternative:
        class_name = device_class["metadata"]["name"]
        class_expressions = [
            s["cel"]["expression"]
            for s in (device_class.get("spec") or {}).get("selectors") or []
            if s.get("cel")
        ]
        claim_expressions = [
            s["cel"]["expression"] for s in exact.get("selectors") or [] if s.get("cel")
        ]
        compiled: list[CompiledSelector] = []
        for origin, expressions in (
            (f"class {class_name}", class_expressions),
            (f"claim {claim.namespace}/{claim.name}", claim_expressions),
        ):
            for number, expression in enumerate(expressions):
                try:
                    compiled.append(compile_selector(expression))
                except CelCompileError as exc:
                    raise _FilterError(f"{origin}: selector #{number}: {exc}") from exc
        mode = exact.get("allocationMode") or "ExactCount"
        if mode not in ("ExactCount", "All"):
            raise _FilterError(
                f"claim {claim.namespace}/{claim.name}, request {result_name}: "
                f"unsupported count mode {mode}"
            )
        return _Alternative(
            result_name=result_name,
            class_name=class_name,
            mode=mode,
            count=int(exact.get("count") or 1),
            admin_access=bool(exact.get("adminAccess")),
            key=(*class_expressions, "\x00", *claim_expressions),
            selectors=compiled,
            tolerations=[dict(t) for t in exact.get("tolerations") or [] if isinstance(t, dict)],
            capacity={
                str(k): str(v)
                for k, v in ((exact.get("capacity") or {}).get("requests") or {}).items()
            },
            class_selectors=len(class_expressions),
        )

    def _shape(self, pod: PodRequest, plan: _Plan) -> Any:
        if plan.pinned:
            return None
        needs = tuple(
            tuple(
                (a.key, a.mode, a.count, a.admin_access, a.tolerations_key, a.capacity_key)
                for a in need.alternatives
            )
            for need in plan.needs
        )
        constraints = json.dumps(
            [need.claim.constraints for need in plan.needs if need.claim.constraints],
            sort_keys=True,
        )
        node_selector = tuple(sorted(pod.node_selector.items()))
        volumes = json.dumps(pod.volume_affinities, sort_keys=True)
        return (pod.cpu, pod.memory, node_selector, volumes, bool(pod.claims), needs, constraints)

    def _search_order(self, pod: PodRequest, plan: _Plan) -> Iterator[NodeState]:
        """Nodes worth a full Filter, in name order; placing a pod is first-fit."""
        for claim in plan.pinned:
            names = _pinned_names(claim.allocation or {})
            if names is not None:
                yield from (self.nodes[n] for n in sorted(names) if n in self.nodes)
                return
        first = next(
            (
                need.alternatives[0]
                for need in plan.needs
                if len(need.alternatives) == 1
                and need.alternatives[0].mode == "ExactCount"
                and not need.alternatives[0].admin_access
            ),
            None,
        )
        if first is None or self._shared_matches(first):
            yield from self.nodes.values()
            return
        # Only nodes with a free matching device can host the pod. Nodes at the front of the
        # list whose devices are all taken stay taken for the rest of the pass: skip them for
        # good, which keeps a pass linear in pods rather than pods x nodes.
        candidates = self._candidate_nodes(first)
        # Tolerations decide which free devices count, so the skip is per (selectors, them).
        skip_key = (first.key, first.tolerations_key)
        start = self._first_candidate.get(skip_key, 0)
        while start < len(candidates) and not self._free(candidates[start], first):
            start += 1
        self._first_candidate[skip_key] = start
        for name in candidates[start:]:
            if len(self._free(name, first)) >= first.count:
                yield self.nodes[name]

    def _candidate_nodes(self, alternative: _Alternative) -> list[str]:
        candidates = self._candidates.get(alternative.key)
        if candidates is None:
            candidates = self._candidates[alternative.key] = [
                name for name in self.nodes if self._matching(name, alternative)
            ]
        return candidates

    def _matching(self, node_name: str, alternative: _Alternative) -> list[Device]:
        cache_key = (node_name, alternative.key)
        devices = self._matching_cache.get(cache_key)
        if devices is None:
            # A device whose selector fails at run time stays a candidate: the search reports
            # the error when it reaches the device, as the real allocator does.
            devices = [
                d
                for d in self.inventory.node_devices.get(node_name, ())
                if d.entry.verdict(d.index, alternative.key, alternative.selectors) is not False
            ]
            self._matching_cache[cache_key] = devices
        return devices

    def _shared_matches(self, alternative: _Alternative) -> bool:
        result = self._shared_match.get(alternative.key)
        if result is None:
            result = self._shared_match[alternative.key] = any(
                d.entry.verdict(d.index, alternative.key, alternative.selectors) is not False
                for d in self.inventory.shared_devices
            )
        return result

    def _free(self, node_name: str, alternative: _Alternative) -> list[Device]:
        """Matching devices on the node that nobody holds and whose taints it tolerates."""
        return [
            d
            for d in self._matching(node_name, alternative)
            if d.key not in self.allocated and alternative.tolerates(d)
        ]

    def _node_reasons(self, pod: PodRequest, node: NodeState) -> list[str]:
        """The non-DRA filters, in the default profile's order; all fit reasons are reported."""
        if node.unschedulable:
            return [REASON_CORDONED]
        if not node.ready:
            return [REASON_NOT_READY]
        if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
            return [REASON_SELECTOR]
        reasons = []
        if node.pods_free < 1:
            reasons.append(REASON_PODS)
        if pod.cpu > node.cpu_free:
            reasons.append(REASON_CPU)
        if pod.memory > node.memory_free:
            reasons.append(REASON_MEMORY)
        if not reasons and any(
            not node_selector_matches(selector, node) for selector in pod.volume_affinities
        ):
            reasons.append(REASON_VOLUME_NODE)
        return reasons

    def _filter(self, pod: PodRequest, plan: _Plan, node: NodeState) -> list[str] | _Fit:
        """The reasons the node is rejected, or the devices picked per request when it fits."""
        reasons = self._node_reasons(pod, node)
        if reasons:
            return reasons
        for claim in plan.pinned:
            selector = (claim.allocation or {}).get("nodeSelector")
            if selector and not node_selector_matches(selector, node):
                return [REASON_CLAIM_ELSEWHERE]
        search = _Search(self, plan, node)
        try:
            picks = search.run()
        except _Exhausted:
            return [REASON_TIMEOUT]
        if picks is None:
            return [REASON_CLAIMS]
        return _Fit(picks)

    def candidates(self, need: _Need, alternative: _Alternative, node: NodeState) -> list[Device]:
        """Devices on or usable from the node that match the alternative's selectors and whose
        taints it tolerates, in publication order; `All` fails when a pool is mid-update."""
        if alternative.mode == "All":
            for pool in [*self.inventory.node_pools.get(node.name, ()), *self._shared_pools(node)]:
                if pool.complete and not pool.invalid:
                    continue
                state = "currently invalid" if pool.invalid else "currently being updated"
                raise _FilterError(
                    f"claim {need.claim.namespace}/{need.claim.name}, request {need.request_name}: "
                    f"asks for all devices, but resource pool {pool.pool_id} is {state}"
                )
        devices = [*self._matching(node.name, alternative), *self._shared_on(node, alternative)]
        if alternative.mode == "All":
            # "All" selects its devices before the search, so any runtime error surfaces now.
            for device in devices:
                self.check_selectable(need, alternative, device)
        # A device whose taints the request does not tolerate is never allocated, not even
        # with admin access; `All` then cannot have every device.
        tolerated = [d for d in devices if alternative.tolerates(d)]
        if alternative.mode == "All" and len(tolerated) < len(devices):
            return []
        return tolerated

    def check_selectable(self, need: _Need, alternative: _Alternative, device: Device) -> None:
        """Raise the scheduler's error when a selector of the alternative failed at run time on
        the device, worded as the 1.34 allocator words it (the class's selectors first, each
        list numbered from 0)."""
        verdict = device.entry.verdict(device.index, alternative.key, alternative.selectors)
        if not isinstance(verdict, SelectorRuntimeError):
            return
        if verdict.index < alternative.class_selectors:
            origin = f"class {alternative.class_name}: selector #{verdict.index}"
        else:
            number = verdict.index - alternative.class_selectors
            origin = f"claim {need.claim.namespace}/{need.claim.name}: selector #{number}"
        raise _FilterError(f"{origin}: {verdict}")

    def consumption(self, device: Device, alternative: _Alternative) -> Consumption | None:
        key = (device.key, alternative.capacity_key)
        if key not in self._consumptions:
            self._consumptions[key] = capacity.consumption(
                device.driver, device.spec, alternative.capacity
            )
        return self._consumptions[key]

    def _shared_pools(self, node: NodeState) -> list[Pool]:
        return [
            pool
            for pool in self.inventory.shared_pools
            if any(d.node is None and d.usable_on(node) for d in pool.devices)
        ]

    def _shared_on(self, node: NodeState, alternative: _Alternative) -> list[Device]:
        if not self.inventory.shared_devices or not self._shared_matches(alternative):
            return []
        return [
            d
            for d in self.inventory.shared_devices
            if d.usable_on(node)
            and d.entry.verdict(d.index, alternative.key, alternative.selectors) is not False
        ]

    def _diagnose(self, pod: PodRequest, plan: _Plan) -> tuple[Counter[str], int]:
        """Why each node was rejected, for the FitError histogram and preemption's verdict."""
        reasons: Counter[str] = Counter()
        resolvable = 0
        for node in self.nodes.values():
            verdict = self._filter(pod, plan, node)
            if not isinstance(verdict, _Fit):
                reasons.update(verdict)
                resolvable += all(r in _RESOLVABLE for r in verdict)
        return reasons, resolvable

    def _unschedulable(
        self,
        pod: PodRequest,
        plan: _Plan,
        total: int,
        reasons: Counter[str],
        resolvable: int,
    ) -> Unschedulable:
        deallocate: list[str] = []
        if not pod.claims:
            verdict = "no new claims to deallocate"
        else:
            verdict = "still not schedulable"
            for claim in plan.pinned:
                others = [r for r in claim.reserved_for if r.get("uid") != pod.uid]
                if not others:
                    deallocate = [claim.name]
                    verdict = "deallocation of ResourceClaim completed"
                    break
        post = f"{verdict}, {preemption_message(total, resolvable)}"
        return Unschedulable(fit_error_message(total, reasons, None, post), deallocate)

    def _build_placement(
        self,
        node: NodeState,
        plan: _Plan,
        picks: list[_Pick],
    ) -> Placement:
        by_claim: dict[str, list[_Pick]] = {}
        for pick in picks:
            by_claim.setdefault(pick[0].claim.name, []).append(pick)
        allocations: dict[str, dict[str, Any]] = {}
        taken: list[DeviceKey] = []
        usage = Usage()
        for claim_name, claim_picks in by_claim.items():
            claim = claim_picks[0][0].claim
            results: list[dict[str, Any]] = []
            config: list[dict[str, Any]] = []
            node_local = False
            selectors: list[dict[str, Any]] = []
            for _need, alternative, chosen in claim_picks:
                for device, share in chosen:
                    result: dict[str, Any] = {
                        "request": alternative.result_name,
                        "driver": device.driver,
                        "pool": device.pool,
                        "device": device.name,
                    }
                    if alternative.admin_access:
                        result["adminAccess"] = True
                    elif share is not None:
                        result["shareID"] = str(uuid.uuid4())
                        result["consumedCapacity"] = dict(share.text)
                        usage.add_share(device.key, share.amounts)
                        usage.draw(device.key, device.draws)
                    else:
                        taken.append(device.key)
                        usage.exclusive.add(device.key)
                        usage.draw(device.key, device.draws)
                    if alternative.tolerations:
                        # What the eviction controller reads (the 1.34 fix of k8s #134434).
                        result["tolerations"] = [dict(t) for t in alternative.tolerations]
                    results.append(result)
                    node_local = node_local or device.node is not None
                    if device.node_selector and device.node_selector not in selectors:
                        selectors.append(device.node_selector)
                config.extend(
                    {"source": "FromClass", "requests": [alternative.result_name], **entry}
                    for entry in plan.class_configs.get(alternative.class_name, [])
                )
            config.extend({"source": "FromClaim", **entry} for entry in claim.config)
            # An empty config list is omitted, as the real server writes the allocation.
            devices_result: dict[str, Any] = {"results": results}
            if config:
                devices_result["config"] = config
            allocation: dict[str, Any] = {"devices": devices_result}
            if node_local or len(selectors) > 1:
                allocation["nodeSelector"] = allocation_node_selector(node.name)
            elif selectors:
                allocation["nodeSelector"] = selectors[0]
            allocations[claim_name] = allocation
        return Placement(node=node.name, allocations=allocations, devices=taken, usage=usage)


class _Exhausted(Exception):
    """The search tried SEARCH_LIMIT device choices on a node without finding a fit."""


class _Search:
    """Backtracking over a pod's requests on one node, as the structured allocator searches:
    for each request its alternatives in order, for each the devices in publication order,
    undoing a choice when a later request (or a constraint) cannot be met with it. What is
    taken is checked against the pass's usage plus this search's tentative picks: devices held
    whole, capacity left on shareable devices, and counters left in counter sets."""

    def __init__(self, allocator: Allocator, plan: _Plan, node: NodeState) -> None:
        self.allocator = allocator
        self.plan = plan
        self.node = node
        self.usage = allocator.usage
        self.exclusive: set[DeviceKey] = set()
        self.shared: dict[DeviceKey, dict[str, Any]] = {}
        self.counters: dict[CounterSetKey, dict[str, Any]] = {}
        self.drawing: dict[DeviceKey, int] = {}
        self.picks: list[_Pick] = []
        self.steps = 0
        # How many tentative shares each shareable device has in this search.
        self.shared_uses: dict[DeviceKey, int] = {}

    def run(self) -> list[_Pick] | None:
        return self.picks if self._place(0) else None

    def _place(self, index: int) -> bool:
        if index == len(self.plan.needs):
            return True
        need = self.plan.needs[index]
        for alternative in need.alternatives:
            candidates = self.allocator.candidates(need, alternative, self.node)
            if alternative.mode == "All":
                if self._take_all(index, need, alternative, candidates):
                    return True
            elif self._choose(index, need, alternative, candidates, 0, []):
                return True
        return False

    def _take_all(
        self, index: int, need: _Need, alternative: _Alternative, candidates: list[Device]
    ) -> bool:
        """Every matching device, all of them free; at least one must exist."""
        if not candidates:
            return False
        chosen: list[_Chosen] = []
        undo: list[Any] = []
        for device in candidates:
            taken = self._take(need, device, alternative)
            if taken is None or not self._constraints_hold(need, alternative, device, chosen):
                if taken is not None:
                    taken[1]()
                for release in reversed(undo):
                    release()
                return False
            chosen.append((device, taken[0]))
            undo.append(taken[1])
        self.picks.append((need, alternative, chosen))
        if self._place(index + 1):
            return True
        self.picks.pop()
        for release in reversed(undo):
            release()
        return False

    def _choose(
        self,
        index: int,
        need: _Need,
        alternative: _Alternative,
        candidates: list[Device],
        start: int,
        chosen: list[_Chosen],
    ) -> bool:
        if len(chosen) == alternative.count:
            self.picks.append((need, alternative, list(chosen)))
            if self._place(index + 1):
                return True
            self.picks.pop()
            return False
        for position in range(start, len(candidates)):
            if len(candidates) - position < alternative.count - len(chosen):
                return False
            self.steps += 1
            if self.steps > SEARCH_LIMIT:
                raise _Exhausted
            device = candidates[position]
            taken = self._take(need, device, alternative)
            if taken is None:
                continue
            if not self._constraints_hold(need, alternative, device, chosen):
                taken[1]()
                continue
            chosen.append((device, taken[0]))
            if self._choose(index, need, alternative, candidates, position + 1, chosen):
                return True
            chosen.pop()
            taken[1]()
        return False

    # -- what a device has left ---------------------------------------------------------------

    def _take(
        self, need: _Need, device: Device, alternative: _Alternative
    ) -> tuple[Consumption | None, Any] | None:
        """Tentatively allocate the device for the alternative: (its share or None, undo), or
        None when it is taken, lacks room, or its counters would be exceeded."""
        if alternative.admin_access:
            # Admin access ignores whether the device is in use and takes nothing.
            self.allocator.check_selectable(need, alternative, device)
            if alternative.capacity and not capacity.fits_exclusive(
                device.driver, device.spec, alternative.capacity
            ):
                return None
            return None, _nothing
        key = device.key
        if key in self.usage.exclusive or key in self.exclusive:
            return None
        # Being in use is checked first, then the selectors, as the real allocator orders it.
        self.allocator.check_selectable(need, alternative, device)
        share: Consumption | None = None
        if device.shareable:
            share = self.allocator.consumption(device, alternative)
            if share is None:
                return None
            totals = capacity.device_totals(device.spec)
            used = self.usage.shared.get(key, {})
            pending = self.shared.get(key, {})
            for name, amount in share.amounts.items():
                if used.get(name, 0) + pending.get(name, 0) + amount > totals.get(name, 0):
                    return None
        else:
            if key in self.usage.shared or key in self.shared:
                return None
            if alternative.capacity and not capacity.fits_exclusive(
                device.driver, device.spec, alternative.capacity
            ):
                return None
        # Counters are drawn by a device's first allocation; one already in use has drawn them.
        counted = not self.usage.in_use(key)
        if counted and key not in self.drawing and not self._counters_fit(device):
            return None
        if share is not None:
            current = self.shared.setdefault(key, {})
            for name, amount in share.amounts.items():
                current[name] = current.get(name, 0) + amount
        else:
            self.exclusive.add(key)
        if counted:
            self._draw(device, 1)
        amounts = share.amounts if share is not None else None

        def undo() -> None:
            if amounts is not None:
                pending = self.shared[key]
                for name, amount in amounts.items():
                    pending[name] -= amount
                self.shared_uses[key] -= 1
                if not self.shared_uses[key]:
                    del self.shared[key]
                    del self.shared_uses[key]
            else:
                self.exclusive.discard(key)
            if counted:
                self._draw(device, -1)

        if amounts is not None:
            self.shared_uses[key] = self.shared_uses.get(key, 0) + 1
        return share, undo

    def _counters_fit(self, device: Device) -> bool:
        sets = self.allocator.inventory.counter_sets
        for counter_set, counters in device.draws.items():
            set_key = (device.driver, device.pool, counter_set)
            total = sets.get(set_key)
            if total is None:
                return False
            used = self.usage.counters.get(set_key, {})
            pending = self.counters.get(set_key, {})
            for name, amount in counters.items():
                if name not in total:
                    return False
                if used.get(name, 0) + pending.get(name, 0) + amount > total[name]:
                    return False
        return True

    def _draw(self, device: Device, direction: int) -> None:
        """Count a tentative user of the device; its counters are drawn by the first one and
        given back with the last."""
        key = device.key
        before = self.drawing.get(key, 0)
        after = before + direction
        if after:
            self.drawing[key] = after
        else:
            self.drawing.pop(key, None)
        if (before == 0) == (after == 0):
            return
        for counter_set, counters in device.draws.items():
            pending = self.counters.setdefault((device.driver, device.pool, counter_set), {})
            for name, amount in counters.items():
                pending[name] = pending.get(name, 0) + direction * amount

    # -- constraints --------------------------------------------------------------------------

    def _constraints_hold(
        self, need: _Need, alternative: _Alternative, device: Device, chosen: list[_Chosen]
    ) -> bool:
        """matchAttribute: every device of the requests a constraint names has the attribute,
        with one value; distinctAttribute: each a different value (no names: all requests)."""
        claim = need.claim
        if not claim.constraints:
            return True
        for constraint in claim.constraints:
            if not _constraint_covers(constraint, need.request_name, alternative.result_name):
                continue
            match = constraint.get("matchAttribute")
            distinct = constraint.get("distinctAttribute")
            name = match or distinct
            if not name:
                continue
            value = _attribute(device, name)
            if value is None:
                return False
            others = [
                _attribute(other, name)
                for other in self._claim_devices(claim, constraint)
                if other is not device
            ] + [_attribute(other, name) for other, _ in chosen if other is not device]
            if match and any(v != value for v in others):
                return False
            if distinct and value in others:
                return False
        return True

    def _claim_devices(self, claim: ClaimRequest, constraint: Mapping[str, Any]) -> list[Device]:
        return [
            device
            for need, alternative, chosen in self.picks
            if need.claim is claim
            and _constraint_covers(constraint, need.request_name, alternative.result_name)
            for device, _ in chosen
        ]


def _pinned_names(allocation: Mapping[str, Any]) -> set[str] | None:
    """Node names an allocation's nodeSelector allows when it names them outright."""
    selector = allocation.get("nodeSelector")
    if not selector:
        return None
    names: set[str] = set()
    for term in selector.get("nodeSelectorTerms") or []:
        fields = [
            r
            for r in term.get("matchFields") or []
            if r.get("key") == "metadata.name" and r.get("operator") == "In"
        ]
        if not fields or term.get("matchExpressions"):
            return None
        names.update(fields[0].get("values") or [])
    return names


def _nothing() -> None:
    return None


def _constraint_covers(constraint: Mapping[str, Any], request: str, result_name: str) -> bool:
    names = constraint.get("requests") or []
    return not names or request in names or result_name in names


def _attribute(device: Device, name: str) -> Any:
    """A fully qualified attribute of the device: `<driver>/<name>` also finds the
    driver-domain attribute published without a prefix."""
    attributes = device.spec.get("attributes") or {}
    value = attributes.get(name)
    if value is None:
        domain, _, identifier = name.rpartition("/")
        if domain == device.driver:
            value = attributes.get(identifier)
    if not isinstance(value, dict) or not value:
        return None
    return tuple(sorted(value.items()))


def usage_of(claims: Iterable[Mapping[str, Any]], inventory: Inventory) -> Usage:
    """What allocated claims take: devices without a shareID whole, shares their
    consumedCapacity, and each allocated device its counters once; admin access nothing."""
    usage = Usage()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("adminAccess"):
                continue
            key = (result["driver"], result["pool"], result["device"])
            if result.get("shareID"):
                usage.add_share(
                    key,
                    {
                        name: capacity.quantity(value)
                        for name, value in (result.get("consumedCapacity") or {}).items()
                    },
                )
            else:
                usage.exclusive.add(key)
            device = inventory.by_key.get(key)
            if device is not None:
                usage.draw(key, device.draws)
    return usage


def allocated_devices(claims: Iterable[Mapping[str, Any]]) -> set[DeviceKey]:
    """Devices in use: every result of every allocated claim, except admin-access ones."""
    in_use: set[DeviceKey] = set()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if not result.get("adminAccess"):
                in_use.add((result["driver"], result["pool"], result["device"]))
    return in_use

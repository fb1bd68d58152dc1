"""Pure functions from raw cluster objects to the mirror's rows, the operator document and
package availability. No database, no network: the sync feeds them and applies the result.

Counting follows the scheduler's allocator (dra-facts §3): slices grouped by (driver, pool),
only the highest generation kept, a pool complete when it has resourceSliceCount slices. A
device with a NoSchedule or NoExecute taint (its slice's or a DeviceTaintRule's) is given to no
claim that does not tolerate it, and the runtime's claims tolerate none: it is never free. A
device that consumes shared counters fits only while its counter sets have what it draws
(inventory.counters).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

import dracel
from dracel import quantity
from inventory import counters

NVIDIA_PRODUCT = "productName"
# The effects that keep a device from claims that do not tolerate them.
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class PackageSpec:
    """What availability needs to know about a package."""

    id: str
    device_class_name: str
    selectors: tuple[str, ...]
    count: int
    cpu_millicores: int
    memory_bytes: int
    # A fallback package's alternatives, in order: the ids of their own specs
    # ("<package>/<alternative>"), whose availability stands in when its own class has none.
    alternatives: tuple[str, ...] = ()
    # A shared package's per-device capacity requests ({"cores": "25", "memory": "20Gi"}):
    # it takes a share of a device that allows multiple allocations, not a whole device.
    capacity: tuple[tuple[str, str], ...] = ()
    # A unit's devices must agree on this attribute ("gpu.nvidia.com/parentUUID"): they are
    # counted per value, not per node.
    match_attribute: str = ""


@dataclass
class Observation:
    nodes: dict[str, dict] = field(default_factory=dict)
    classes: dict[str, dict] = field(default_factory=dict)
    pools: dict[tuple[str, str], dict] = field(default_factory=dict)
    # In the allocator's search order: pools by (driver, name), slices by name, devices as
    # each slice lists them.
    devices: dict[tuple[str, str, str], dict] = field(default_factory=dict)
    claims: dict[tuple[str, str], dict] = field(default_factory=dict)
    quotas: dict[tuple[str, str], dict] = field(default_factory=dict)
    slice_count: int = 0
    evaluated_devices: int = 0
    # Devices that allow multiple allocations: their capacity, and what shares hold of it.
    shareable: dict[tuple[str, str, str], dict] = field(default_factory=dict)
    # Partitionable devices: the pools' counter sets (published, and drawn by allocated
    # devices), and what each device that consumes counters draws from them.
    counter_sets: dict[counters.SetKey, counters.CounterSet] = field(default_factory=dict)
    draws: dict[tuple[str, str, str], counters.Draws] = field(default_factory=dict)


def _millicores(value: str | None) -> int:
    try:
        return quantity.parse_cpu(value or "0")
    except ValueError:
        return 0


def _bytes(value: str | None) -> int:
    try:
        return quantity.parse_bytes(value or "0")
    except ValueError:
        return 0


def _digest(value: object) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def pod_requests(pod: dict) -> tuple[int, int]:
    """cpu (millicores) and memory (bytes) a pod requests: its containers' sum, or its largest
    init container if that is bigger, as the scheduler counts it."""
    spec = pod.get("spec") or {}

    def total(containers: Iterable[dict]) -> tuple[int, int]:
        cpu = memory = 0
        for container in containers:
            requests = (container.get("resources") or {}).get("requests") or {}
            cpu += _millicores(requests.get("cpu"))
            memory += _bytes(requests.get("memory"))
        return cpu, memory

    cpu, memory = total(spec.get("containers") or [])
    for init in spec.get("initContainers") or []:
        init_cpu, init_memory = total([init])
        cpu, memory = max(cpu, init_cpu), max(memory, init_memory)
    return cpu, memory


def _observe_nodes(nodes: list[dict], pods: list[dict]) -> dict[str, dict]:
    requested: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node and phase not in ("Succeeded", "Failed"):
            cpu, memory = pod_requests(pod)
            requested[node][0] += cpu
            requested[node][1] += memory
    rows = {}
    for node in nodes:
        name = node["metadata"]["name"]
        status = node.get("status") or {}
        allocatable = status.get("allocatable") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        rows[name] = {
            "name": name,
            "ready": ready,
            "labels": node["metadata"].get("labels") or {},
            "cpu_allocatable_millicores": _millicores(allocatable.get("cpu")),
            "memory_allocatable_bytes": _bytes(allocatable.get("memory")),
            "cpu_requested_millicores": requested[name][0],
            "memory_requested_bytes": requested[name][1],
        }
    return rows


def _latest_pools(slices: list[dict]) -> dict[tuple[str, str], list[dict]]:
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        pool = spec.get("pool") or {}
        grouped[(spec.get("driver", ""), pool.get("name", ""))].append(resource_slice)
    latest = {}
    for key, members in grouped.items():
        top = max(int(s["spec"]["pool"].get("generation", 0)) for s in members)
        latest[key] = [s for s in members if int(s["spec"]["pool"].get("generation", 0)) == top]
    return latest


def _allocations(claims: list[dict]) -> dict[tuple[str, str, str], tuple[str, str]]:
    holders = {}
    for claim in claims:
        metadata = claim["metadata"]
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            key = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
            holders[key] = (metadata.get("namespace", ""), metadata["name"])
    return holders


def _held(claims: list[dict]) -> set[tuple[str, str, str]]:
    """Devices allocated claims hold, which draw their counters: admin access holds nothing."""
    return {
        (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        for claim in claims
        for result in (
            ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        ).get("results")
        or []
        if not result.get("adminAccess")
    }


def _consumed(claims: list[dict]) -> dict[tuple[str, str, str], dict[str, int]]:
    """What the allocated shares hold of each shared device's capacity, summed per name (in
    the quantity's integer form, bytes or units)."""
    used: dict[tuple[str, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if not result.get("consumedCapacity"):
                continue
            key = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
            for name, value in result["consumedCapacity"].items():
                used[key][name] += _amount(value)
    return used


def _amount(value: object) -> int:
    try:
        return int(quantity.parse(str(value)))
    except (ValueError, TypeError):
        return 0


def share_request(policy: dict, requested: int) -> int:
    """What a request of `requested` takes of a capacity under its requestPolicy, as the
    allocator rounds it: up to the range's minimum, then up by its step; up to the first valid
    value at or above it."""
    valid_range = policy.get("validRange") or {}
    if valid_range:
        low = _amount(valid_range.get("min", 0))
        step = _amount(valid_range.get("step", 0))
        taken = max(requested, low)
        if step > 0 and (taken - low) % step:
            taken = low + ((taken - low) // step + 1) * step
        return taken
    values = sorted(_amount(v) for v in policy.get("validValues") or [])
    return next((v for v in values if v >= requested), requested) if values else requested


def shares_that_fit(device: dict, requests: tuple[tuple[str, str], ...]) -> int:
    """How many more shares of `requests` a shared device holds: the fewest, over its
    capacities, of what remains divided by what one share takes (a capacity the share does
    not ask for takes its policy's default, or all of it, as the allocator does). 0 when a
    capacity asked for is not one the device publishes."""
    asked = dict(requests)
    capacities = device.get("capacity") or {}
    if any(not isinstance(capacities.get(name), dict) for name in asked):
        return 0
    fits = None
    for name, capacity in capacities.items():
        if not isinstance(capacity, dict):
            continue
        policy = capacity.get("requestPolicy") or {}
        total = _amount(capacity.get("value", 0))
        if name in asked:
            take = share_request(policy, _amount(asked[name]))
        else:
            take = _amount(policy["default"]) if policy.get("default") else total
        remaining = total - device["consumed"].get(name, 0)
        count = remaining // take if take > 0 else None  # taking none never limits
        if count is not None:
            fits = count if fits is None else min(fits, count)
    return max(0, fits or 0)


def _claim_node(allocation: dict) -> str:
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for expression in term.get("matchFields") or []:
            if expression.get("key") == "metadata.name" and expression.get("values"):
                return expression["values"][0]
    return ""


def _observe_claims(claims: list[dict]) -> dict[tuple[str, str], dict]:
    rows = {}
    for claim in claims:
        metadata = claim["metadata"]
        status = claim.get("status") or {}
        allocation = status.get("allocation")
        results = ((allocation or {}).get("devices") or {}).get("results") or []
        key = (metadata.get("namespace", ""), metadata["name"])
        rows[key] = {
            "namespace": key[0],
            "name": key[1],
            "uid": metadata.get("uid", ""),
            "allocated": allocation is not None,
            "node_name": _claim_node(allocation or {}),
            "results": [
                {k: r.get(k, "") for k in ("request", "driver", "pool", "device")} for r in results
            ],
            "reserved_for": status.get("reservedFor") or [],
        }
    return rows


def _membership(
    driver: str,
    device: dict,
    classes: dict[str, list[dracel.CompiledSelector]],
    packages: list[PackageSpec],
    package_selectors: dict[str, list[dracel.CompiledSelector]],
) -> tuple[list[str], list[str]]:
    """Classes the device belongs to, and packages it can serve (its class and the package's
    own selectors), from one CEL binding of the device."""
    sets = {f"class:{name}": selectors for name, selectors in classes.items()}
    sets.update({f"package:{p.id}": package_selectors[p.id] for p in packages})
    matched = dracel.matching_sets(sets, dracel.device_env(driver, device))
    member_of = sorted(name for name in classes if f"class:{name}" in matched)
    fits = sorted(
        p.id for p in packages if p.device_class_name in member_of and f"package:{p.id}" in matched
    )
    return member_of, fits


def _compile_all(expressions: Iterable[str]) -> list[dracel.CompiledSelector] | None:
    try:
        return [dracel.compile_selector(e) for e in expressions]
    except dracel.CelCompileError:
        return None  # a class or package that cannot compile matches nothing


@dataclass(frozen=True)
class _TaintRule:
    """A DeviceTaintRule (resource.k8s.io/v1alpha3, as 1.34 serves it) ready to match."""

    name: str
    taint: dict
    selected: bool  # has a deviceSelector; without one it taints every device (1.34)
    driver: str | None
    pool: str | None
    device: str | None
    device_class: str | None
    selectors: list[dracel.CompiledSelector] | None  # None: cannot compile, matches nothing


def _taint_rules(rules: Iterable[dict]) -> list[_TaintRule]:
    prepared = []
    for rule in sorted(rules, key=lambda r: r["metadata"]["name"]):
        spec = rule.get("spec") or {}
        selector = spec.get("deviceSelector")
        chosen = selector or {}
        prepared.append(
            _TaintRule(
                name=rule["metadata"]["name"],
                taint=spec.get("taint") or {},
                selected=selector is not None,
                driver=chosen.get("driver"),
                pool=chosen.get("pool"),
                device=chosen.get("device"),
                device_class=chosen.get("deviceClassName"),
                selectors=_compile_all(
                    (s.get("cel") or {}).get("expression", "")
                    for s in chosen.get("selectors") or []
                ),
            )
        )
    return prepared


def _taint_row(taint: dict, source: str) -> dict:
    return {
        "key": taint.get("key", ""),
        "value": taint.get("value", ""),
        "effect": taint.get("effect", ""),
        "timeAdded": taint.get("timeAdded", ""),
        "source": source,
    }


def _device_taints(
    slice_name: str,
    driver: str,
    pool: str,
    device: dict,
    member_of: list[str],
    rules: list[_TaintRule],
) -> list[dict]:
    """The device's taints, its slice's first, then those of the rules that select it as the
    scheduler's slice tracker does: driver, pool and device by name, the class's selectors (the
    device is of that class) and the rule's own CEL selectors (an error matches nothing)."""
    taints = [
        _taint_row(t, f"ResourceSlice/{slice_name}")
        for t in device.get("taints") or []
        if isinstance(t, dict)
    ]
    env = None
    for rule in rules:
        if rule.selected:
            if (
                (rule.driver is not None and rule.driver != driver)
                or (rule.pool is not None and rule.pool != pool)
                or (rule.device is not None and rule.device != device["name"])
                or (rule.device_class is not None and rule.device_class not in member_of)
                or rule.selectors is None
            ):
                continue
            if rule.selectors:
                env = env or dracel.device_env(driver, device)
                if not dracel.device_matches(rule.selectors, env):
                    continue
        taints.append(_taint_row(rule.taint, f"DeviceTaintRule/{rule.name}"))
    return taints


def observe(
    *,
    nodes: list[dict],
    device_classes: list[dict],
    slices: list[dict],
    claims: list[dict],
    pods: list[dict],
    quotas: list[dict],
    packages: list[PackageSpec],
    device_taint_rules: list[dict] | None = None,
    previous_membership: dict[tuple[str, str, str], tuple[str, list[str], list[str]]] | None = None,
) -> Observation:
    """Mirror rows for everything observed. `previous_membership` maps a device to the
    (content hash, classes, packages) of the last sync, so unchanged devices skip CEL."""
    previous_membership = previous_membership or {}
    taint_rules = _taint_rules(device_taint_rules or [])
    observation = Observation(slice_count=len(slices))
    observation.nodes = _observe_nodes(nodes, pods)
    class_selectors: dict[str, list[dracel.CompiledSelector]] = {}
    for device_class in device_classes:
        name = device_class["metadata"]["name"]
        expressions = [
            (s.get("cel") or {}).get("expression", "")
            for s in (device_class.get("spec") or {}).get("selectors") or []
        ]
        observation.classes[name] = {"name": name, "selectors": expressions}
        compiled = _compile_all(expressions)
        if compiled is not None:
            class_selectors[name] = compiled
    package_selectors = {}
    usable_packages = []
    for package in packages:
        compiled = _compile_all(package.selectors)
        if compiled is not None:
            package_selectors[package.id] = compiled
            usable_packages.append(package)
    rules_digest = _digest(
        [
            sorted((k, v["selectors"]) for k, v in observation.classes.items()),
            sorted((p.id, p.device_class_name, list(p.selectors)) for p in usable_packages),
        ]
    )
    holders = _allocations(claims)
    consumed = _consumed(claims)
    # Selectors that read only named values cannot tell apart devices that agree on them
    # (thousands of identical GPUs differing in name, UUID and index): one evaluation each.
    read = dracel.reads(
        [s for group in (*class_selectors.values(), *package_selectors.values()) for s in group]
    )
    read_order = tuple(sorted(read)) if read is not None else None
    alike: dict[tuple, tuple[list[str], list[str]]] = {}

    for (driver, pool_name), latest in sorted(_latest_pools(slices).items()):
        members = sorted(latest, key=lambda s: (s.get("metadata") or {}).get("name", ""))
        first = members[0]["spec"]
        announced = int(first["pool"].get("resourceSliceCount", 1) or 1)
        complete = len(members) == announced
        observation.pools[(driver, pool_name)] = {
            "driver": driver,
            "name": pool_name,
            "node_name": first.get("nodeName") or "",
            "generation": int(first["pool"].get("generation", 0)),
            "slice_count": announced,
            "slices_seen": len(members),
            "complete": complete,
            "counter_sets": [],
        }
        for resource_slice in members:
            node_name = resource_slice["spec"].get("nodeName") or ""
            for counter_set in resource_slice["spec"].get("sharedCounters") or []:
                set_key = (driver, pool_name, str(counter_set.get("name", "")))
                # A set published again by a later slice replaces it, as in the allocator.
                observation.counter_sets[set_key] = counters.CounterSet(
                    driver,
                    pool_name,
                    set_key[2],
                    first.get("nodeName") or "",
                    counters.published_counters(counter_set),
                )
            for device in resource_slice["spec"].get("devices") or []:
                key = (driver, pool_name, device["name"])
                content_hash = _digest([driver, device, rules_digest])
                known = previous_membership.get(key)
                if known and known[0] == content_hash:
                    member_of, fits = known[1], known[2]
                else:
                    shared = (
                        None
                        if read_order is None
                        else dracel.device_key(driver, device, read_order)
                    )
                    if shared in alike:
                        member_of, fits = alike[shared]
                    else:
                        member_of, fits = _membership(
                            driver, device, class_selectors, usable_packages, package_selectors
                        )
                        observation.evaluated_devices += 1
                        if shared is not None:
                            alike[shared] = (member_of, fits)
                holder = holders.get(key)
                taints = _device_taints(
                    resource_slice["metadata"].get("name", ""),
                    driver,
                    pool_name,
                    device,
                    member_of,
                    taint_rules,
                )
                product = (device.get("attributes") or {}).get(NVIDIA_PRODUCT) or {}
                observation.devices[key] = {
                    "driver": driver,
                    "pool": pool_name,
                    "name": device["name"],
                    "node_name": node_name,
                    "pool_complete": complete,
                    "product": product.get("string", "") if isinstance(product, dict) else "",
                    "attributes": device.get("attributes") or {},
                    "capacity": device.get("capacity") or {},
                    "consumes_counters": device.get("consumesCounters") or [],
                    "device_classes": member_of,
                    "packages": fits,
                    "content_hash": content_hash,
                    "allocated": holder is not None,
                    "claim_namespace": holder[0] if holder else "",
                    "claim_name": holder[1] if holder else "",
                    "taints": taints,
                    "tainted": any(t["effect"] in BLOCKING_EFFECTS for t in taints),
                }
                if device.get("allowMultipleAllocations"):
                    observation.shareable[key] = {
                        "capacity": device.get("capacity") or {},
                        "consumed": dict(consumed.get(key, {})),
                    }
                if device.get("consumesCounters"):
                    observation.draws[key] = counters.draws_of(driver, pool_name, device)
    counters.draw_allocated(observation.counter_sets, observation.draws, _held(claims))
    for set_key, counter_set in sorted(observation.counter_sets.items()):
        observation.pools[set_key[:2]]["counter_sets"].append(
            {"name": counter_set.name, "counters": counter_set.shown()}
        )
    observation.claims = _observe_claims(claims)
    for quota in quotas:
        metadata = quota["metadata"]
        quota_key = (metadata.get("namespace", ""), metadata["name"])
        status = quota.get("status") or {}
        observation.quotas[quota_key] = {
            "namespace": quota_key[0],
            "name": quota_key[1],
            "hard": status.get("hard") or (quota.get("spec") or {}).get("hard") or {},
            "used": status.get("used") or {},
        }
    return observation


# --- what the API serves ---------------------------------------------------------------------


def _tally(devices: Iterable[dict]) -> dict:
    """Free devices are neither allocated nor tainted NoSchedule/NoExecute."""
    total = allocated = tainted = free = 0
    for device in devices:
        total += 1
        allocated += device["allocated"]
        tainted += device["tainted"]
        free += not (device["allocated"] or device["tainted"])
    return {"total": total, "allocated": allocated, "tainted": tainted, "free": free}


def _shared_device(key: tuple[str, str, str], device: dict, shared: dict, shares: int) -> dict:
    """A device several claims may share: its capacity, what its shares hold, what is left
    (quantities as the device publishes them: bytes where it counts in Ki/Mi/Gi)."""
    capacity, used, left = {}, {}, {}
    for name, published in sorted((shared["capacity"] or {}).items()):
        if not isinstance(published, dict):
            continue
        text = str(published.get("value", "0"))
        total = _amount(text)
        taken = shared["consumed"].get(name, 0)
        show = quantity.format_bytes if text.endswith("i") else str
        capacity[name], used[name], left[name] = show(total), show(taken), show(total - taken)
    return {
        "driver": key[0],
        "pool": key[1],
        "device": key[2],
        "nodeName": device["node_name"],
        "shares": shares,
        "capacity": capacity,
        "consumed": used,
        "remaining": left,
    }


def _tainted_devices(observation: Observation) -> list[dict]:
    return [
        {
            "driver": device["driver"],
            "pool": device["pool"],
            "device": device["name"],
            "nodeName": device["node_name"],
            "allocated": device["allocated"],
            "claim": f"{device['claim_namespace']}/{device['claim_name']}"
            if device["allocated"]
            else None,
            "taints": device["taints"],
        }
        for _key, device in sorted(observation.devices.items())
        if device["taints"]
    ]


def build_document(observation: Observation) -> dict:
    """The operator inventory: the article's fields, then per class, node, pool and quota."""
    counted = [d for d in observation.devices.values() if d["pool_complete"]]
    allocated_results = sorted(
        (
            {
                "claimName": claim["name"],
                "namespace": claim["namespace"],
                **{k: result[k] for k in ("request", "driver", "pool", "device")},
            }
            for claim in observation.claims.values()
            for result in claim["results"]
        ),
        key=lambda d: (d["namespace"], d["claimName"], d["driver"], d["pool"], d["device"]),
    )
    by_class: dict[str, list[dict]] = {name: [] for name in observation.classes}
    by_node: dict[str, list[dict]] = {name: [] for name in observation.nodes}
    for device in counted:
        for name in device["device_classes"]:
            by_class.setdefault(name, []).append(device)
        if device["node_name"]:
            by_node.setdefault(device["node_name"], []).append(device)
    nodes = []
    for name in sorted(by_node):
        node = observation.nodes.get(name)
        entry = {"name": name, **_tally(by_node[name])}
        if node:
            entry.update(
                ready=node["ready"],
                cpuAllocatable=quantity.format_cpu(node["cpu_allocatable_millicores"]),
                cpuFree=quantity.format_cpu(
                    max(0, node["cpu_allocatable_millicores"] - node["cpu_requested_millicores"])
                ),
                memoryAllocatable=quantity.format_bytes(node["memory_allocatable_bytes"]),
                memoryFree=quantity.format_bytes(
                    max(0, node["memory_allocatable_bytes"] - node["memory_requested_bytes"])
                ),
            )
        nodes.append(entry)
    tainted = _tainted_devices(observation)
    shares: dict[tuple[str, str, str], int] = defaultdict(int)
    for claim in observation.claims.values():
        for result in claim["results"]:
            shares[(result["driver"], result["pool"], result["device"])] += 1
    return {
        "totalGpuAllocatable": len(counted),
        "draClaimCount": len(observation.claims),
        "draAllocatedClaims": sum(c["allocated"] for c in observation.claims.values()),
        "draAllocatedDevices": len(allocated_results),
        "draResourceSlices": observation.slice_count,
        "draDevices": allocated_results,
        "draTaintedDevices": len(tainted),
        "taintedDevices": tainted,
        "sharedDevices": [
            _shared_device(key, observation.devices[key], shared, shares.get(key, 0))
            for key, shared in sorted(observation.shareable.items())
        ],
        "counterSets": [
            {
                "driver": counter_set.driver,
                "pool": counter_set.pool,
                "name": counter_set.name,
                "nodeName": counter_set.node_name,
                "counters": counter_set.shown(),
            }
            for _key, counter_set in sorted(observation.counter_sets.items())
        ],
        "deviceClasses": [
            {"name": name, **_tally(devices)} for name, devices in sorted(by_class.items())
        ],
        "nodes": nodes,
        "pools": [
            {
                "driver": p["driver"],
                "name": p["name"],
                "generation": p["generation"],
                "complete": p["complete"],
                "slices": f"{p['slices_seen']}/{p['slice_count']}",
            }
            for _key, p in sorted(observation.pools.items())
        ],
        "quotas": [
            {"namespace": q["namespace"], "name": q["name"], "hard": q["hard"], "used": q["used"]}
            for _key, q in sorted(observation.quotas.items())
        ],
    }


def package_availability(observation: Observation, packages: list[PackageSpec]) -> dict[str, dict]:
    """Units of each package that fit right now, node by node: free matching devices on the
    node divided by the package's count, bounded by the node's free cpu and memory. A tainted
    device is not free (a unit's claim tolerates no taint); when taints are why nothing fits,
    the reason says so. On a node whose devices consume shared counters, units are placed one
    after another as the allocator would (inventory.counters), and a free device whose
    counters are already consumed is not counted free."""
    free_by_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    tainted_by_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    # Packages with a matchAttribute: free devices per (node, package, attribute value).
    constrained = {p.id: p.match_attribute for p in packages if p.match_attribute}
    grouped: dict[tuple[str, str], dict[object, int]] = defaultdict(lambda: defaultdict(int))
    # Nodes with devices that consume counters: their free devices per package, in order.
    counted_nodes = {observation.devices[key]["node_name"] for key in observation.draws}
    ordered: dict[tuple[str, str], list[counters.Candidate]] = defaultdict(list)
    for key, device in observation.devices.items():
        if not device["allocated"] and device["node_name"]:
            counts = tainted_by_node if device["tainted"] else free_by_node
            drawing = device["node_name"] in counted_nodes and not device["tainted"]
            for package_id in device["packages"]:
                counts[device["node_name"]][package_id] += 1
                value = None
                if package_id in constrained and not device["tainted"]:
                    value = attribute_value(device, constrained[package_id])
                    if value is not None:
                        grouped[(device["node_name"], package_id)][value] += 1
                if drawing:
                    ordered[(device["node_name"], package_id)].append(
                        counters.Candidate(key, observation.draws.get(key, ()), value)
                    )
    remaining: dict[str, counters.Counters] = defaultdict(dict)
    for set_key, counter_set in observation.counter_sets.items():
        remaining[counter_set.node_name][set_key] = counter_set.remaining()
    result = {}
    for package in packages:
        if package.capacity:
            result[package.id] = _shared_availability(observation, package)
            continue
        placeable = free_devices = tainted_devices = 0
        device_bound = tainted_bound = False
        # Free devices whose counters are consumed, and the sets that lack what they draw.
        blocked = 0
        exhausted: set[counters.SetKey] = set()
        counted = False
        for node_name in free_by_node.keys() | tainted_by_node.keys():
            matching = free_by_node[node_name].get(package.id, 0)
            tainted = tainted_by_node[node_name].get(package.id, 0)
            tainted_devices += tainted
            tainted_bound = tainted_bound or (matching + tainted) // package.count > 0
            candidates = ordered.get((node_name, package.id))
            left = remaining.get(node_name, {})
            if candidates is not None:
                counted = True
                unfit = sum(not counters.fits(c.draws, left) for c in candidates)
                blocked += unfit
                exhausted.update(counters.lacking(candidates, left))
                matching -= unfit
            free_devices += matching
            node = observation.nodes.get(node_name)
            if not matching or node is None or not node["ready"]:
                continue
            cpu_free = node["cpu_allocatable_millicores"] - node["cpu_requested_millicores"]
            memory_free = node["memory_allocatable_bytes"] - node["memory_requested_bytes"]
            by_resources = min(
                cpu_free // max(package.cpu_millicores, 1),
                memory_free // max(package.memory_bytes, 1),
            )
            if candidates is not None:
                by_devices = counters.placeable_units(
                    candidates,
                    left,
                    count=package.count,
                    constrained=bool(package.match_attribute),
                    limit=max(1, by_resources),
                )
            elif package.match_attribute:
                by_devices = sum(
                    n // package.count for n in grouped[(node_name, package.id)].values()
                )
            else:
                by_devices = matching // package.count
            device_bound = device_bound or by_devices > 0
            placeable += max(0, min(by_devices, by_resources))
        result[package.id] = {
            "placeable": placeable,
            "free_devices": free_devices,
            "reason": ""
            if placeable
            else _why_not(
                observation,
                package,
                _Shortfall(
                    free_devices,
                    device_bound,
                    tainted_devices,
                    tainted_bound,
                    counted,
                    blocked,
                    sorted(exhausted),
                ),
            ),
        }
    return _with_alternatives(result, packages)


def attribute_value(device: dict, qualified: str) -> object:
    """The value of a fully qualified attribute on a device (an attribute in its own
    driver's domain may be published without the domain), or None."""
    domain, _, name = qualified.partition("/")
    attributes = device.get("attributes") or {}
    found = attributes.get(qualified)
    if found is None and domain == device.get("driver"):
        found = attributes.get(name)
    if not isinstance(found, dict) or not found:
        return None
    return next(iter(found.values()))


def _shared_availability(observation: Observation, package: PackageSpec) -> dict:
    """Units of a shared package that fit: on each ready node, the shares its matching
    untainted shared devices still hold (a unit takes one share of `count` devices), bounded
    by the node's free cpu and memory. `free_devices` counts devices with room for a share."""
    shares_by_node: dict[str, list[int]] = defaultdict(list)
    for key, device in observation.devices.items():
        shared = observation.shareable.get(key)
        if shared is None or device["tainted"] or package.id not in device["packages"]:
            continue
        fits = shares_that_fit(shared, package.capacity)
        if fits and device["node_name"]:
            shares_by_node[device["node_name"]].append(fits)
    placeable = free_devices = 0
    for node_name, per_device in shares_by_node.items():
        free_devices += len(per_device)
        node = observation.nodes.get(node_name)
        if node is None or not node["ready"]:
            continue
        # `count` distinct devices per unit: the units the node's shares can make.
        by_shares = sum(per_device) // package.count if len(per_device) >= package.count else 0
        cpu_free = node["cpu_allocatable_millicores"] - node["cpu_requested_millicores"]
        memory_free = node["memory_allocatable_bytes"] - node["memory_requested_bytes"]
        placeable += max(
            0,
            min(
                by_shares,
                cpu_free // max(package.cpu_millicores, 1),
                memory_free // max(package.memory_bytes, 1),
            ),
        )
    reason = ""
    if not placeable:
        wanted = ", ".join(f"{name} {value}" for name, value in package.capacity)
        reason = (
            f"device class {package.device_class_name} does not exist"
            if package.device_class_name not in observation.classes
            else f"no shared device of class {package.device_class_name} has {wanted} left"
            if not free_devices
            else "nodes with room for a share lack the cpu or memory the package needs"
        )
    return {"placeable": placeable, "free_devices": free_devices, "reason": reason}


def _with_alternatives(result: dict[str, dict], packages: list[PackageSpec]) -> dict[str, dict]:
    """A fallback package is as placeable as its first alternative that is (its own class
    first); the alternatives' own entries are not packages and leave the result."""
    for package in packages:
        if not package.alternatives:
            continue
        own = result[package.id]
        if own["placeable"]:
            continue
        for alternative in package.alternatives:
            found = result.get(alternative, {})
            if found.get("placeable"):
                result[package.id] = {
                    **found,
                    "reason": f"its own class has no fit; alternative "
                    f"{alternative.rpartition('/')[2]} has",
                }
                break
        else:
            own["reason"] = f"{own['reason']}; no alternative fits either"
    for package in packages:
        for alternative in package.alternatives:
            result.pop(alternative, None)
    return result


@dataclass(frozen=True)
class _Shortfall:
    """What a package found: `free` devices it could use; `device_bound`, whether some ready
    node has enough of them; `tainted` unallocated matching devices that taints keep from it
    and `tainted_bound`, whether some node would have enough without them; `blocked` free
    matching devices whose counters are consumed, and the counter sets that lack them;
    `counted`, whether some node's devices consume counters."""

    free: int
    device_bound: bool
    tainted: int
    tainted_bound: bool
    counted: bool = False
    blocked: int = 0
    exhausted: list[counters.SetKey] = field(default_factory=list)


def _why_not(observation: Observation, package: PackageSpec, found: _Shortfall) -> str:
    """Why no unit fits."""
    if package.device_class_name not in observation.classes:
        return f"device class {package.device_class_name} does not exist"
    because = f": {found.tainted} matching devices are tainted"
    if not found.free:
        if found.blocked:
            return (
                f"the free devices of class {package.device_class_name} need counters "
                f"already consumed ({_counter_sets_named(observation, found.exhausted)})"
            )
        return f"no free devices match device class {package.device_class_name}" + (
            because if found.tainted else ""
        )
    if not found.device_bound:
        return (
            f"no node has {package.count} free matching devices"
            + (" whose counters fit together" if found.counted else "")
            + (because if found.tainted_bound else "")
        )
    return "nodes with free devices lack the cpu or memory the package needs"


def _counter_sets_named(observation: Observation, keys: list[counters.SetKey]) -> str:
    """`gpu-0-counter-set on node-a`, then how many more (a reason is at most 200 characters)."""
    if not keys:
        return "counter sets not published"
    known = observation.counter_sets.get(keys[0])
    first = f"{keys[0][2]} on {known.node_name}" if known else keys[0][2]
    return first + (f" and {len(keys) - 1} more" if len(keys) > 1 else "")

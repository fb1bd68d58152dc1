"""The development DRA driver: what a GPU DRA driver's kubelet plugin publishes for the KWOK
nodes of a topology (devstack/topologies/*.yaml) — the Nodes as their kubelets register them,
the DeviceClasses its chart installs, and ResourceSlices with the NVIDIA driver's attribute
names: whole GPUs, static MIG devices and partitionable (dynamic MIG) GPUs through shared
counters, and HAMi-style shared GPUs through consumable capacity. The real scheduler allocates
from these slices; `Driver` also changes them when a test asks (a device tainted by its
driver, a node gone). Ported from the simulator's topology seeding, for 1.36 only."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from dracel import CelCompileError, compile_selector
from dracel.quantity import format_quantity
from dracel.quantity import parse as parse_quantity

TOPOLOGIES = Path(__file__).parent / "topologies"
SAMPLE_TOPOLOGY = TOPOLOGIES / "sample.yaml"
DRIVER = "gpu.nvidia.com"
KUBELET_VERSION = "v1.36.3"
# A ResourceSlice holds at most 128 devices; larger nodes publish a multi-slice pool.
MAX_DEVICES_PER_SLICE = 128
# Since 1.35: devices of a slice that consume counters or carry taints, at most 64; counter
# sets per slice, at most 8 (resource.k8s.io validation).
MAX_DEVICES_WITH_TAINTS = 64
MAX_COUNTER_SETS = 8
DRIVER_VERSION = "570.124.6"
CUDA_DRIVER_VERSION = "12.8.0"
DEFAULT_PRODUCT = "NVIDIA H100 80GB HBM3"
_UNKNOWN_PRODUCT = {
    "memory": "16Gi",
    "architecture": "Unknown",
    "cudaComputeCapability": "8.0.0",
    "nodeCpuPerGpu": 8,
    "nodeMemoryPerGpu": "64Gi",
}

Seed = list[tuple[str, dict[str, Any]]]


class TopologyError(ValueError):
    """A topology file or dict that cannot be turned into cluster objects."""


def load_topology(source: str | Path | Mapping[str, Any] | None) -> Seed:
    """(kind, object) pairs to create: nodes, then device classes, then slices.

    `source` is a YAML path, an already-parsed topology, `{"generate": {"nodes",
    "gpus_per_node", "product"}}`, or None for the shipped sample topology.
    """
    if source is None:
        spec = _read_yaml(SAMPLE_TOPOLOGY)
    elif isinstance(source, str | Path):
        spec = _read_yaml(Path(source))
    else:
        spec = dict(source)
    if "generate" in spec:
        spec = generated_topology(**spec["generate"])
    return build_objects(spec)


def generated_topology(
    nodes: int = 3, gpus_per_node: int = 8, product: str | None = None
) -> dict[str, Any]:
    """`nodes` identical nodes of one product, sized from the sample's product table, with the
    sample's device classes so every catalog class exists (unmatched ones just stay empty)."""
    sample = _read_yaml(SAMPLE_TOPOLOGY)
    product = product or DEFAULT_PRODUCT
    shape = {**_UNKNOWN_PRODUCT, **sample["products"].get(product, {})}
    per_node = max(gpus_per_node, 1)
    cpu = int(shape["nodeCpuPerGpu"]) * per_node
    memory = parse_quantity(str(shape["nodeMemoryPerGpu"])) * per_node
    return {
        "products": {**sample["products"], product: shape},
        "deviceClasses": sample["deviceClasses"],
        "nodes": [
            {
                "name": f"gpu-node-{index}",
                "cpu": str(cpu),
                "memory": format_quantity(memory, binary=True),
                "gpus": [{"product": product, "count": gpus_per_node}] if gpus_per_node else [],
            }
            for index in range(nodes)
        ],
    }


def build_objects(spec: Mapping[str, Any]) -> Seed:
    """Turn a parsed topology into cluster objects; raises TopologyError on bad input."""
    products: Mapping[str, Any] = spec.get("products") or {}
    seed: Seed = []
    slices: Seed = []
    seen_nodes: set[str] = set()
    for index, node in enumerate(spec.get("nodes") or []):
        name = _required(node, "name", f"nodes[{index}]")
        if name in seen_nodes:
            raise TopologyError(f"nodes[{index}]: duplicate node name {name!r}")
        seen_nodes.add(name)
        gpus = _expand_gpus(node.get("gpus") or [], products, f"nodes[{index}]")
        shareable = _expand_gpus(node.get("shareableGpus") or [], products, f"nodes[{index}]")
        mig = _expand_gpus(node.get("migGpus") or [], products, f"nodes[{index}]")
        node_gpus = gpus or shareable or mig
        seed.append(("nodes", build_node(node, node_gpus)))
        slices.extend(("resourceslices", s) for s in build_resource_slices(name, gpus))
        slices.extend(("resourceslices", s) for s in build_shareable_slices(name, shareable))
        slices.extend(("resourceslices", s) for s in build_mig_slices(name, mig, f"nodes[{index}]"))
    for index, device_class in enumerate(spec.get("deviceClasses") or []):
        seed.append(("deviceclasses", build_device_class(device_class, f"deviceClasses[{index}]")))
    return seed + slices


def _expand_gpus(
    entries: list[Mapping[str, Any]], products: Mapping[str, Any], where: str
) -> list[dict[str, Any]]:
    """One dict per physical GPU, product defaults filled in from the products table."""
    gpus: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        product = _required(entry, "product", f"{where}.gpus[{index}]")
        details = {**_UNKNOWN_PRODUCT, **products.get(product, {}), **entry}
        try:
            parse_quantity(str(details["memory"]))
            count = int(details.get("count", 1))
        except ValueError as exc:
            raise TopologyError(f"{where}.gpus[{index}]: {exc}") from exc
        gpus.extend(dict(details) for _ in range(count))
    return gpus


def build_node(node: Mapping[str, Any], gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """A node as its kubelet registers it (capacity and identity); the KWOK controller then
    reports it Ready, with its address and kubelet endpoint (devstack/stages/nodes.yaml)."""
    name = node["name"]
    capacity = {
        "cpu": str(node.get("cpu", "8")),
        "memory": str(node.get("memory", "32Gi")),
        "pods": str(node.get("pods", 110)),
        "ephemeral-storage": str(node.get("ephemeralStorage", "500Gi")),
    }
    for key in ("cpu", "memory", "ephemeral-storage"):
        try:
            parse_quantity(capacity[key])
        except ValueError as exc:
            raise TopologyError(f"node {name}: invalid {key} {capacity[key]!r}") from exc
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "kwok",
        "type": "kwok",
    }
    if gpus:
        # GPU feature discovery publishes the product with spaces turned into dashes.
        labels["nvidia.com/gpu.product"] = gpus[0]["product"].replace(" ", "-")
        labels["nvidia.com/gpu.count"] = str(len(gpus))
    labels.update(node.get("labels") or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "nodeInfo": {
                "machineID": _hex_id(name, "machine"),
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"boot.{name}")),
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "kwok",
                "kernelVersion": "kwok",
                "osImage": "KWOK development node",
            },
        },
    }


def build_resource_slices(node_name: str, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The driver's pool for one node: pool name = node name, generation 1, devices gpu-<i>."""
    if not gpus:
        return []
    devices = [_gpu_device(node_name, index, gpu) for index, gpu in enumerate(gpus)]
    chunks = [
        devices[start : start + MAX_DEVICES_PER_SLICE]
        for start in range(0, len(devices), MAX_DEVICES_PER_SLICE)
    ]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{DRIVER}-{_hex_id(node_name, str(number))[:5]}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": 1, "resourceSliceCount": len(chunks)},
                "devices": chunk,
            },
        }
        for number, chunk in enumerate(chunks)
    ]


def _gpu_device(node_name: str, index: int, gpu: Mapping[str, Any]) -> dict[str, Any]:
    device_name = f"gpu-{index}"
    bus = 0x18 + index * 0x10
    return {
        "name": device_name,
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid(node_name, device_name)},
            "productName": {"string": gpu["product"]},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": str(gpu["architecture"])},
            "cudaComputeCapability": {"version": str(gpu["cudaComputeCapability"])},
            "driverVersion": {"version": str(gpu.get("driverVersion", DRIVER_VERSION))},
            "cudaDriverVersion": {"version": CUDA_DRIVER_VERSION},
            # No `index` (nor `minor`): the driver stopped publishing them in v25.8.0
            # (NVIDIA/k8s-dra-driver-gpu 36fc80ab), so a selector reading one is a CEL
            # runtime error on a current cluster.
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{bus % 0x100:02x}:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{(bus // 0x40) % 0x100:02x}"},
        },
        "capacity": {"memory": {"value": str(gpu["memory"])}},
    }


HAMI_DRIVER = "hami-core-gpu.project-hami.io"
# Static MIG profiles of an 80 GB H100: memory and multiprocessors each slice takes.
MIG_PROFILES = {
    "1g.10gb": ("10Gi", 16),
    "1g.20gb": ("20Gi", 26),
    "2g.20gb": ("20Gi", 32),
    "3g.40gb": ("40Gi", 60),
    "4g.40gb": ("40Gi", 64),
    "7g.80gb": ("80Gi", 132),
}
MIG_PARENT = ("80Gi", 132)
# Where each profile may sit on an 80 GB H100 (`nvidia-smi mig -lgipp`): its GPU instance
# profile id, the first memory slice of each placement, and how many of the 8 slices it spans.
MIG_PLACEMENTS = {
    "1g.10gb": (19, (0, 1, 2, 3, 4, 5, 6), 1),
    "1g.20gb": (15, (0, 2, 4, 6), 2),
    "2g.20gb": (14, (0, 2, 4), 2),
    "3g.40gb": (9, (0, 4), 4),
    "4g.40gb": (5, (0,), 4),
    "7g.80gb": (0, (0,), 8),
}
MIG_MEMORY_SLICES = 8


def _slice(node_name: str, driver: str, number: int, count: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{driver}-{_hex_id(node_name, driver, str(number))[:5]}"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": count},
            **spec,
        },
    }


def build_shareable_slices(node_name: str, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """HAMi's DRA driver: each GPU `hami-gpu-<minor>` allows multiple allocations and offers
    `cores` (100, any whole percent) and `memory` (the framebuffer, by the MiB)."""
    if not gpus:
        return []
    devices = []
    for minor, gpu in enumerate(gpus):
        name = f"hami-gpu-{minor}"
        memory = str(gpu["memory"])
        devices.append(
            {
                "name": name,
                "attributes": {
                    "type": {"string": "hami-gpu"},
                    "uuid": {"string": gpu_uuid(node_name, name)},
                    "minor": {"int": minor},
                    "productName": {"string": gpu["product"]},
                    "brand": {"string": "Nvidia"},
                    "architecture": {"string": str(gpu["architecture"])},
                    "cudaComputeCapability": {"version": str(gpu["cudaComputeCapability"])},
                    "driverVersion": {"version": str(gpu.get("driverVersion", DRIVER_VERSION))},
                    "cudaDriverVersion": {"version": CUDA_DRIVER_VERSION},
                },
                "allowMultipleAllocations": True,
                "capacity": {
                    "cores": {
                        "value": "100",
                        "requestPolicy": {
                            "default": "100",
                            "validRange": {"min": "0", "max": "100", "step": "1"},
                        },
                    },
                    "memory": {
                        "value": memory,
                        "requestPolicy": {
                            "default": memory,
                            "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"},
                        },
                    },
                },
            }
        )
    return [_slice(node_name, HAMI_DRIVER, 0, 1, devices=devices)]


def build_mig_slices(
    node_name: str, gpus: list[dict[str, Any]], where: str
) -> list[dict[str, Any]]:
    """NVIDIA's driver with MIG. A GPU with a `layout` is static MIG: those profiles as devices
    of type mig with `profile` and `parentUUID`, memory and multiprocessors capacity, drawing
    on the parent's counter set. A `partitionable: true` GPU is dynamic MIG
    (DRAPartitionableDevices): the whole GPU and every placement of every profile, each
    drawing on the GPU's counter set, so the allocator's counters decide what fits together.
    The counter sets go first, in counters-only slices of at most 8 sets, then
    the static devices (at most 64 a slice, as they consume counters), then each partitionable
    GPU's devices in a slice of their own: since 1.35 a slice holds devices or counters, not
    both."""
    if not gpus:
        return []
    counter_sets = []
    devices = []
    partitioned: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for index, gpu in enumerate(gpus):
        if gpu.get("partitionable"):
            if gpu.get("layout"):
                raise TopologyError(f"{where}: a partitionable GPU takes no layout")
            counter_sets.append(_partition_counter_set(index))
            partitioned.append((counter_sets[-1], _partitionable_devices(node_name, index, gpu)))
            continue
        parent = gpu_uuid(node_name, f"gpu-{index}")
        counter_set = f"gpu-{index}-counters"
        counter_sets.append(
            {
                "name": counter_set,
                "counters": {
                    "memory": {"value": MIG_PARENT[0]},
                    "multiprocessors": {"value": str(MIG_PARENT[1])},
                },
            }
        )
        for number, profile in enumerate(gpu.get("layout") or []):
            if profile not in MIG_PROFILES:
                raise TopologyError(f"{where}: unknown MIG profile {profile!r}")
            memory, processors = MIG_PROFILES[profile]
            name = f"gpu-{index}-mig-{profile.split('.')[0]}-{number}"
            attributes = _mig_attributes(gpu, profile, parent)
            attributes["uuid"] = {"string": gpu_uuid(node_name, name).replace("GPU-", "MIG-")}
            devices.append(
                {
                    "name": name,
                    "attributes": attributes,
                    "capacity": {
                        "memory": {"value": memory},
                        "multiprocessors": {"value": str(processors)},
                    },
                    "consumesCounters": [
                        {
                            "counterSet": counter_set,
                            "counters": {
                                "memory": {"value": memory},
                                "multiprocessors": {"value": str(processors)},
                            },
                        }
                    ],
                }
            )
    parts: list[dict[str, Any]] = [
        {"sharedCounters": counter_sets[start : start + MAX_COUNTER_SETS]}
        for start in range(0, len(counter_sets), MAX_COUNTER_SETS)
    ]
    parts += [
        {"devices": devices[start : start + MAX_DEVICES_WITH_TAINTS]}
        for start in range(0, len(devices), MAX_DEVICES_WITH_TAINTS)
    ]
    parts += [{"devices": own} for _counter_set, own in partitioned]
    return [
        _slice(node_name, DRIVER, number, len(parts), **part) for number, part in enumerate(parts)
    ]


def _mig_attributes(gpu: Mapping[str, Any], profile: str, parent: str) -> dict[str, Any]:
    return {
        "type": {"string": "mig"},
        "profile": {"string": profile},
        "parentUUID": {"string": parent},
        "productName": {"string": gpu["product"]},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": str(gpu["architecture"])},
        "cudaComputeCapability": {"version": str(gpu["cudaComputeCapability"])},
        "driverVersion": {"version": DRIVER_VERSION},
        "cudaDriverVersion": {"version": CUDA_DRIVER_VERSION},
    }


def _partition_counter_set(index: int) -> dict[str, Any]:
    """One counter set per partitionable GPU, named and shaped as NVIDIA's driver does it
    (cmd/gpu-kubelet-plugin/partitions.go): a counter per capacity, one per memory slice."""
    return {
        "name": f"gpu-{index}-counter-set",
        "counters": _partition_counters(MIG_PARENT[0], MIG_PARENT[1], 0, MIG_MEMORY_SLICES),
    }


def _partition_counters(memory: str, processors: int, start: int, size: int) -> dict[str, Any]:
    return {
        "memory": {"value": memory},
        "multiprocessors": {"value": str(processors)},
        **{f"memory-slice-{n}": {"value": "1"} for n in range(start, start + size)},
    }


def _partitionable_devices(
    node_name: str, index: int, gpu: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The whole GPU, which draws every counter, and each profile at each placement, which
    draws its memory, multiprocessors and the memory slices it spans; named
    `gpu-<i>-mig-<profile>-<profile id>-<first slice>` and sorted by name, as the driver
    publishes them. Placements not yet created have no MIG UUID."""
    parent = gpu_uuid(node_name, f"gpu-{index}")
    counter_set = f"gpu-{index}-counter-set"
    whole = _gpu_device(node_name, index, gpu)
    whole["capacity"]["multiprocessors"] = {"value": str(MIG_PARENT[1])}
    whole["consumesCounters"] = [
        {
            "counterSet": counter_set,
            "counters": _partition_counters(MIG_PARENT[0], MIG_PARENT[1], 0, MIG_MEMORY_SLICES),
        }
    ]
    bus = {
        key: whole["attributes"][key]
        for key in ("resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot")
    }
    devices = [whole]
    for profile, (profile_id, starts, size) in MIG_PLACEMENTS.items():
        memory, processors = MIG_PROFILES[profile]
        for start in starts:
            devices.append(
                {
                    "name": f"gpu-{index}-mig-{profile.replace('.', '')}-{profile_id}-{start}",
                    "attributes": {**_mig_attributes(gpu, profile, parent), **bus},
                    "capacity": {
                        "memory": {"value": memory},
                        "multiprocessors": {"value": str(processors)},
                    },
                    "consumesCounters": [
                        {
                            "counterSet": counter_set,
                            "counters": _partition_counters(memory, processors, start, size),
                        }
                    ],
                }
            )
    return sorted(devices, key=lambda d: d["name"])


def gpu_uuid(node_name: str, device_name: str) -> str:
    """Deterministic, so a restarted cluster publishes the same GPUs."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'devstack://{node_name}/{device_name}')}"


def build_device_class(device_class: Mapping[str, Any], where: str) -> dict[str, Any]:
    name = _required(device_class, "name", where)
    expressions = list(device_class.get("selectors") or [])
    if device_class.get("selector"):
        expressions.append(device_class["selector"])
    for expression in expressions:
        try:
            compile_selector(expression)
        except CelCompileError as exc:
            raise TopologyError(f"{where} ({name}): {exc}") from exc
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TopologyError(f"cannot read topology {path}: {exc}") from exc
    if not isinstance(loaded, dict):
        raise TopologyError(f"topology {path} must be a mapping")
    return loaded


def _required(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key) if isinstance(entry, Mapping) else None
    if not value:
        raise TopologyError(f"{where}: missing {key!r}")
    return str(value)


def _hex_id(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:32]


def publish(api: Any, source: str | Path | Mapping[str, Any] | None) -> None:
    """Register the topology's nodes and publish its DeviceClasses and ResourceSlices (each
    slice owned by its node, as a kubelet plugin's are: a node deleted takes its slices)."""
    owners: dict[str, dict[str, Any]] = {}
    for kind, obj in load_topology(source):
        if kind == "resourceslices":
            node = owners[obj["spec"]["nodeName"]]
            obj["metadata"]["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node["name"], "uid": node["uid"]}
            ]
        applied = api.apply(obj)
        if kind == "nodes":
            owners[applied["metadata"]["name"]] = applied["metadata"]

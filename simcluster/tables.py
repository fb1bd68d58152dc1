"""Server-side `meta.k8s.io/v1` Table rendering, with the columns the real printers use."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Any

from simcluster.resources import ResourceType

Row = list[Any]
Column = dict[str, Any]

NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated."
)
AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was created."
)


def column(
    name: str, type_: str = "string", *, priority: int = 0, description: str = "", format_: str = ""
) -> Column:
    return {
        "name": name,
        "type": type_,
        "format": format_,
        "description": description,
        "priority": priority,
    }


NAME = column("Name", format_="name", description=NAME_DESCRIPTION)
AGE = column("Age", "date", description=AGE_DESCRIPTION)


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def age(timestamp: str | None) -> str:
    moment = parse_time(timestamp)
    if moment is None:
        return "<unknown>"
    return human_duration((dt.datetime.now(dt.UTC) - moment).total_seconds())


def _created(obj: dict[str, Any]) -> str:
    return age(obj["metadata"].get("creationTimestamp"))


def _pod_row(pod: dict[str, Any]) -> Row:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    restarts = 0
    ready = 0
    for container in status.get("containerStatuses") or []:
        restarts += container.get("restartCount", 0)
        state = container.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
        elif state.get("terminated"):
            reason = f"ExitCode:{state['terminated'].get('exitCode', 0)}"
        elif container.get("ready") and state.get("running") is not None:
            ready += 1
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        str(restarts),
        _created(pod),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


_POD_COLUMNS = [
    NAME,
    column("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
    column("Status", description="The aggregate status of the containers in this pod."),
    column(
        "Restarts",
        description="The number of times the containers in this pod have been restarted.",
    ),
    AGE,
    column(
        "IP",
        priority=1,
        description="IP address allocated to the pod. Routable at least within the cluster.",
    ),
    column(
        "Node",
        priority=1,
        description="NodeName is a request to schedule this pod onto a specific node.",
    ),
    column(
        "Nominated Node",
        priority=1,
        description="nominatedNodeName is set when this pod preempts other pods on the node.",
    ),
    column(
        "Readiness Gates",
        priority=1,
        description="If specified, all readiness gates will be evaluated for pod readiness.",
    ),
]


def _node_row(node: dict[str, Any]) -> Row:
    status = node.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    ready = conditions.get("Ready")
    state = "Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(
        key.split("/", 1)[1]
        for key in labels
        if key.startswith("node-role.kubernetes.io/") and "/" in key
    )
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        node["metadata"]["name"],
        state,
        ",".join(roles) or "<none>",
        _created(node),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP") or "<none>",
        addresses.get("ExternalIP") or "<none>",
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


_NODE_COLUMNS = [
    NAME,
    column("Status", description="The status of the node"),
    column("Roles", description="The roles of the node"),
    AGE,
    column("Version", description="Kubelet Version reported by the node."),
    column(
        "Internal-IP",
        priority=1,
        description="Addresses reachable to the node.",
    ),
    column(
        "External-IP",
        priority=1,
        description="Addresses reachable to the node.",
    ),
    column(
        "OS-Image",
        priority=1,
        description="OS Image reported by the node from /etc/os-release.",
    ),
    column(
        "Kernel-Version",
        priority=1,
        description="Kernel Version reported by the node from 'uname -r'.",
    ),
    column(
        "Container-Runtime",
        priority=1,
        description=(
            "ContainerRuntime Version reported by the node through runtime remote API (e.g. "
            "containerd://1.4.2)."
        ),
    ),
]


def _quota_row(quota: dict[str, Any]) -> Row:
    status = quota.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    requests: list[str] = []
    limits: list[str] = []
    for key in sorted(hard):
        entry = f"{key}: {used.get(key, '0')}/{hard[key]}"
        (limits if key.startswith("limits.") else requests).append(entry)
    return [quota["metadata"]["name"], _created(quota), ", ".join(requests), ", ".join(limits)]


def _event_row(event: dict[str, Any]) -> Row:
    involved = event.get("involvedObject") or {}
    last = (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event["metadata"].get("creationTimestamp")
    )
    first = (
        event.get("firstTimestamp")
        or event.get("eventTime")
        or event["metadata"].get("creationTimestamp")
    )
    source = event.get("source") or {}
    return [
        age(last),
        event.get("type", ""),
        event.get("reason", ""),
        f"{(involved.get('kind') or '').lower()}/{involved.get('name', '')}",
        event.get("message", ""),
        involved.get("fieldPath", ""),
        ", ".join(v for v in (source.get("component"), source.get("host")) if v)
        or event.get("reportingComponent", ""),
        age(first),
        event.get("count", 1),
        event["metadata"]["name"],
    ]


_EVENT_COLUMNS = [
    column(
        "Last Seen",
        description="The time at which the most recent occurrence of this event was recorded.",
    ),
    column(
        "Type",
        description="Type of this event (Normal, Warning), new types could be added in the future.",
    ),
    column(
        "Reason",
        description="A short, machine understandable reason for the transition.",
    ),
    column("Object", description="The object that this event is about."),
    column("Message", description="A human-readable description of the status of this operation."),
    column("Subobject", priority=1, description="The field of the object this event is about."),
    column("Source", priority=1, description="The component reporting this event."),
    column("First Seen", priority=1, description="The time at which the event was first recorded."),
    column(
        "Count", "integer", priority=1, description="The number of times this event has occurred."
    ),
    column("Name", priority=1, format_="name", description=NAME_DESCRIPTION),
]


def claim_state(claim: dict[str, Any]) -> str:
    """`pending`, `allocated`, `allocated,reserved`, with a `deleted` prefix while finalizing."""
    states = []
    deleting = bool(claim["metadata"].get("deletionTimestamp"))
    status = claim.get("status") or {}
    if deleting:
        states.append("deleted")
    if not status.get("allocation"):
        if not deleting:
            states.append("pending")
    else:
        states.append("allocated")
        if status.get("reservedFor"):
            states.append("reserved")
    return ",".join(states)


def _claim_row(claim: dict[str, Any]) -> Row:
    return [claim["metadata"]["name"], claim_state(claim), _created(claim)]


def _slice_row(slice_: dict[str, Any]) -> Row:
    spec = slice_.get("spec") or {}
    return [
        slice_["metadata"]["name"],
        spec.get("nodeName") or "<none>",
        spec.get("driver", ""),
        (spec.get("pool") or {}).get("name", ""),
        _created(slice_),
    ]


_ACCESS_MODES = {
    "ReadWriteOnce": "RWO",
    "ReadOnlyMany": "ROX",
    "ReadWriteMany": "RWX",
    "ReadWriteOncePod": "RWOP",
}


def _access_modes(modes: list[str] | None) -> str:
    return ",".join(_ACCESS_MODES.get(mode, mode) for mode in modes or [])


def _service_row(service: dict[str, Any]) -> Row:
    spec, status = service.get("spec") or {}, service.get("status") or {}
    service_type = spec.get("type", "ClusterIP")
    ingress = (status.get("loadBalancer") or {}).get("ingress") or []
    external = [
        e.get("ip") or e.get("hostname") for e in ingress if e.get("ip") or e.get("hostname")
    ]
    external += spec.get("externalIPs") or []
    if service_type == "ExternalName":
        external_text = spec.get("externalName") or "<none>"
    elif service_type == "LoadBalancer":
        external_text = ",".join(external) or "<pending>"
    else:
        external_text = ",".join(external) or "<none>"
    ports = []
    for port in spec.get("ports") or []:
        number = (
            f"{port.get('port')}:{port['nodePort']}"
            if port.get("nodePort")
            else f"{port.get('port')}"
        )
        ports.append(f"{number}/{port.get('protocol', 'TCP')}")
    selector = spec.get("selector") or {}
    return [
        service["metadata"]["name"],
        service_type,
        spec.get("clusterIP") or "<none>",
        external_text,
        ",".join(ports) or "<none>",
        _created(service),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
    ]


_SERVICE_COLUMNS = [
    NAME,
    column("Type", description="type determines how the Service is exposed."),
    column("Cluster-IP", description="clusterIP is the IP address of the service."),
    column(
        "External-IP",
        description=(
            "externalIPs is a list of IP addresses for which nodes in the cluster will also "
            "accept traffic for this service."
        ),
    ),
    column("Port(s)", description="The list of ports that are exposed by this service."),
    AGE,
    column(
        "Selector",
        priority=1,
        description=(
            "Route service traffic to pods with label keys and values matching this selector."
        ),
    ),
]


def _claim_volume_row(claim: dict[str, Any]) -> Row:
    spec, status = claim.get("spec") or {}, claim.get("status") or {}
    phase = status.get("phase", "")
    if claim["metadata"].get("deletionTimestamp"):
        phase = "Terminating"
    return [
        claim["metadata"]["name"],
        phase,
        spec.get("volumeName", ""),
        (status.get("capacity") or {}).get("storage", ""),
        _access_modes(status.get("accessModes")),
        spec.get("storageClassName") or "",
        spec.get("volumeAttributesClassName") or "<unset>",
        _created(claim),
        spec.get("volumeMode") or "",
    ]


_PVC_COLUMNS = [
    NAME,
    column("Status", description="phase represents the current phase of PersistentVolumeClaim."),
    column(
        "Volume",
        description=(
            "volumeName is the binding reference to the PersistentVolume backing this claim."
        ),
    ),
    column(
        "Capacity", description="capacity represents the actual resources of the underlying volume."
    ),
    column(
        "Access Modes",
        description="accessModes contains the actual access modes the volume backing the PVC has.",
    ),
    column(
        "StorageClass",
        description="storageClassName is the name of the StorageClass required by the claim.",
    ),
    column(
        "VolumeAttributesClass",
        description=(
            "volumeAttributesClassName may be used to set the VolumeAttributesClass used by this "
            "claim."
        ),
    ),
    AGE,
    column(
        "VolumeMode",
        priority=1,
        description="volumeMode defines what type of volume is required by the claim.",
    ),
]


def _volume_row(volume: dict[str, Any]) -> Row:
    spec, status = volume.get("spec") or {}, volume.get("status") or {}
    ref = spec.get("claimRef") or {}
    phase = status.get("phase", "")
    if volume["metadata"].get("deletionTimestamp"):
        phase = "Terminating"
    return [
        volume["metadata"]["name"],
        (spec.get("capacity") or {}).get("storage", ""),
        _access_modes(spec.get("accessModes")),
        spec.get("persistentVolumeReclaimPolicy", ""),
        phase,
        f"{ref.get('namespace')}/{ref.get('name')}" if ref else "",
        spec.get("storageClassName") or "",
        spec.get("volumeAttributesClassName") or "<unset>",
        status.get("reason", ""),
        _created(volume),
        spec.get("volumeMode") or "",
    ]


_PV_COLUMNS = [
    NAME,
    column(
        "Capacity",
        description=(
            "capacity is the description of the persistent volume's resources and capacity."
        ),
    ),
    column("Access Modes", description="accessModes contains all ways the volume can be mounted."),
    column(
        "Reclaim Policy",
        description=(
            "persistentVolumeReclaimPolicy defines what happens to a persistent volume when "
            "released from its claim."
        ),
    ),
    column(
        "Status",
        description=(
            "phase indicates if a volume is available, bound to a claim, or released by a claim."
        ),
    ),
    column(
        "Claim",
        description=(
            "claimRef is part of a bi-directional binding between PersistentVolume and "
            "PersistentVolumeClaim."
        ),
    ),
    column(
        "StorageClass",
        description=(
            "storageClassName is the name of StorageClass to which this persistent volume belongs."
        ),
    ),
    column(
        "VolumeAttributesClass",
        description="Name of VolumeAttributesClass to which this persistent volume belongs.",
    ),
    column(
        "Reason",
        description=(
            "reason is a brief CamelCase string that describes any failure and is meant for "
            "machine parsing and tidy display in the CLI."
        ),
    ),
    AGE,
    column(
        "VolumeMode",
        priority=1,
        description=(
            "volumeMode defines if a volume is intended to be used with a formatted filesystem or "
            "to remain in raw block state."
        ),
    ),
]


def _storage_class_row(storage_class: dict[str, Any]) -> Row:
    name = storage_class["metadata"]["name"]
    annotations = storage_class["metadata"].get("annotations") or {}
    if annotations.get("storageclass.kubernetes.io/is-default-class") == "true":
        name += " (default)"
    return [
        name,
        storage_class.get("provisioner", ""),
        storage_class.get("reclaimPolicy", "Delete"),
        storage_class.get("volumeBindingMode", "Immediate"),
        bool(storage_class.get("allowVolumeExpansion")),
        _created(storage_class),
    ]


_STORAGE_CLASS_COLUMNS = [
    NAME,
    column("Provisioner", description="provisioner indicates the type of the provisioner."),
    column(
        "ReclaimPolicy",
        description=(
            "reclaimPolicy controls the reclaimPolicy for dynamically provisioned "
            "PersistentVolumes of this storage class."
        ),
    ),
    column(
        "VolumeBindingMode",
        description=(
            "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and "
            "bound."
        ),
    ),
    column(
        "AllowVolumeExpansion",
        "boolean",
        description="allowVolumeExpansion shows whether the storage class allow volume expand.",
    ),
    AGE,
]


def _selector_text(selector: dict[str, Any]) -> str:
    labels = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        values = ",".join(expression.get("values") or [])
        operator = expression.get("operator", "")
        if operator == "Exists":
            labels.append(expression.get("key", ""))
        elif operator == "DoesNotExist":
            labels.append(f"!{expression.get('key', '')}")
        else:
            labels.append(f"{expression.get('key', '')} {operator.lower()} ({values})")
    return ",".join(labels) or "<none>"


def _ingress_row(ingress: dict[str, Any]) -> Row:
    spec, status = ingress.get("spec") or {}, ingress.get("status") or {}
    hosts = [rule.get("host") for rule in spec.get("rules") or [] if rule.get("host")]
    addresses = [
        entry.get("ip") or entry.get("hostname")
        for entry in (status.get("loadBalancer") or {}).get("ingress") or []
    ]
    return [
        ingress["metadata"]["name"],
        spec.get("ingressClassName") or "<none>",
        ",".join(hosts) or "*",
        ",".join(a for a in addresses if a),
        "80, 443" if spec.get("tls") else "80",
        _created(ingress),
    ]


_INGRESS_COLUMNS = [
    NAME,
    column(
        "Class", description="ingressClassName is the name of an IngressClass cluster resource."
    ),
    column(
        "Hosts",
        description="Hosts that incoming requests are matched against before the ingress rule",
    ),
    column(
        "Address", description="Address is a list containing ingress points for the load-balancer"
    ),
    column("Ports", description="Ports of TLS configurations that open"),
    AGE,
]


_BUILTIN: dict[str, tuple[list[Column], Callable[[dict[str, Any]], Row]]] = {
    "pods": (_POD_COLUMNS, _pod_row),
    "nodes": (_NODE_COLUMNS, _node_row),
    "namespaces": (
        [NAME, column("Status", description="The status of the namespace"), AGE],
        lambda ns: [
            ns["metadata"]["name"],
            (ns.get("status") or {}).get("phase", ""),
            _created(ns),
        ],
    ),
    "resourcequotas": (
        [
            NAME,
            AGE,
            column(
                "Request",
                description="Used and hard quota of requests.",
            ),
            column(
                "Limit",
                description="Used and hard quota of limits.",
            ),
        ],
        _quota_row,
    ),
    "events": (_EVENT_COLUMNS, _event_row),
    "services": (_SERVICE_COLUMNS, _service_row),
    "secrets": (
        [
            NAME,
            column("Type", description="Used to facilitate programmatic handling of secret data."),
            column("Data", "string", description="Data contains the secret data."),
            AGE,
        ],
        lambda secret: [
            secret["metadata"]["name"],
            secret.get("type", ""),
            str(len(secret.get("data") or {})),
            _created(secret),
        ],
    ),
    "configmaps": (
        [NAME, column("Data", "string", description="Data contains the configuration data."), AGE],
        lambda cm: [
            cm["metadata"]["name"],
            str(len(cm.get("data") or {}) + len(cm.get("binaryData") or {})),
            _created(cm),
        ],
    ),
    "persistentvolumeclaims": (_PVC_COLUMNS, _claim_volume_row),
    "persistentvolumes": (_PV_COLUMNS, _volume_row),
    "storageclasses": (_STORAGE_CLASS_COLUMNS, _storage_class_row),
    "networkpolicies": (
        [
            NAME,
            column(
                "Pod-Selector",
                description="Selects the pods to which this NetworkPolicy object applies.",
            ),
            AGE,
        ],
        lambda policy: [
            policy["metadata"]["name"],
            _selector_text((policy.get("spec") or {}).get("podSelector") or {}),
            _created(policy),
        ],
    ),
    "ingresses": (_INGRESS_COLUMNS, _ingress_row),
    "deviceclasses": ([NAME, AGE], lambda obj: [obj["metadata"]["name"], _created(obj)]),
    "resourceclaims": (
        [
            NAME,
            column(
                "State",
                description="A summary of the current state (allocated, pending, reserved, etc.).",
            ),
            AGE,
        ],
        _claim_row,
    ),
    "resourceclaimtemplates": ([NAME, AGE], lambda obj: [obj["metadata"]["name"], _created(obj)]),
    "resourceslices": (
        [
            NAME,
            column("Node", description="The node that provides the devices."),
            column("Driver", description="The driver that provides the devices."),
            column("Pool", description="The pool of the devices."),
            AGE,
        ],
        _slice_row,
    ),
    "customresourcedefinitions": (
        [NAME, column("Created At", "date", description=AGE_DESCRIPTION)],
        lambda crd: [crd["metadata"]["name"], crd["metadata"].get("creationTimestamp", "")],
    ),
}

_JSONPATH_TOKEN = re.compile(
    r"\.([A-Za-z0-9_\-$]+)|\[(\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]|(\[\*\])"
    r"|\[\?\(@\.([A-Za-z0-9_\-]+)\s*==\s*[\"']([^\"']*)[\"']\)\]"
)


def json_path(obj: Any, path: str) -> Any:
    """The subset of kubectl JSONPath printer columns use: `.a.b`, `[0]`, `['x.y']`, `[*]` and
    `[?(@.type=="Ready")]` filters (those give every match, joined by the caller)."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    values = [obj]
    many = False
    position = 0
    while position < len(path):
        match = _JSONPATH_TOKEN.match(path, position)
        if not match:
            return None
        key, index, quoted, double, star, field, wanted = match.groups()
        position = match.end()
        found: list[Any] = []
        for value in values:
            if star or field is not None:
                many = True
                items = value if isinstance(value, list) else []
                found += [
                    item
                    for item in items
                    if star or (isinstance(item, dict) and str(item.get(field)) == wanted)
                ]
            elif index is not None:
                if isinstance(value, list) and int(index) < len(value):
                    found.append(value[int(index)])
            else:
                name = key if key is not None else quoted if quoted is not None else double
                if isinstance(value, dict) and name in value:
                    found.append(value[name])
        values = found
    if many:
        return ",".join(str(v) for v in values) if values else None
    return values[0] if values else None


def _printer_cell(value: Any, type_: str) -> Any:
    if value is None:
        return None
    if type_ == "date" and isinstance(value, str):
        return age(value)
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    if type_ == "string" and not isinstance(value, str):
        return json.dumps(value)
    return value


def _custom(rtype: ResourceType) -> tuple[list[Column], Callable[[dict[str, Any]], Row]]:
    printer = (rtype.crd or {}).get("additionalPrinterColumns") or []
    columns = [NAME]
    for entry in printer:
        columns.append(
            column(
                entry["name"],
                entry.get("type", "string"),
                priority=entry.get("priority", 0),
                description=entry.get("description", ""),
                format_=entry.get("format", ""),
            )
        )
    with_age = not any(entry["name"].lower() == "age" for entry in printer)
    if with_age:
        columns.append(AGE)

    def row(obj: dict[str, Any]) -> Row:
        cells: Row = [obj["metadata"]["name"]]
        for entry in printer:
            cells.append(
                _printer_cell(json_path(obj, entry["jsonPath"]), entry.get("type", "string"))
            )
        if with_age:
            cells.append(_created(obj))
        return cells

    return columns, row


def _renderer(rtype: ResourceType) -> tuple[list[Column], Callable[[dict[str, Any]], Row]]:
    if rtype.crd is not None:
        return _custom(rtype)
    return _BUILTIN.get(
        rtype.key, ([NAME, AGE], lambda obj: [obj["metadata"]["name"], _created(obj)])
    )


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def table(
    rtype: ResourceType,
    objects: list[dict[str, Any]],
    resource_version: str,
    *,
    include_object: str = "Metadata",
    with_columns: bool = True,
) -> dict[str, Any]:
    """A Table for objects of one kind; `include_object` is Metadata (default), Object or None."""
    columns, render = _renderer(rtype)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": render(obj)}
        attached = _row_object(obj, include_object)
        if attached is not None:
            row["object"] = attached
        rows.append(row)
    result: dict[str, Any] = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns if with_columns else [],
        "rows": rows,
    }
    return result

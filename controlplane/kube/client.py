"""One Kubernetes connection per process and cluster (kube.clusters: KUBECONFIG or the
in-cluster service account for the process's own, the registry's Reach for a named one), and a
small dict-in/dict-out REST API over the kinds the control plane uses.

Calls go through the official client's configured transport (auth, TLS, proxies) but skip its
model classes: the control plane works on plain JSON, and decoding thousands of objects into
pydantic models is the slowest part of a list."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from dataclasses import replace as replace_kind
from typing import Any
from urllib.parse import urlencode

import orjson
import urllib3
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from controlplane import metrics
from controlplane.kube import clusters
from controlplane.kube.errors import KubeError, TemporaryError, classify


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


GPUUNIT = Kind("GPUUnit", "runtime.lokiwager.io", "v1alpha1", "gpuunits")
RESOURCECLAIM = Kind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims")
POD = Kind("Pod", "", "v1", "pods")
NAMESPACE = Kind("Namespace", "", "v1", "namespaces", namespaced=False)
RESOURCEQUOTA = Kind("ResourceQuota", "", "v1", "resourcequotas")
NODE = Kind("Node", "", "v1", "nodes", namespaced=False)
DEVICECLASS = Kind("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", namespaced=False)
RESOURCESLICE = Kind("ResourceSlice", "resource.k8s.io", "v1", "resourceslices", namespaced=False)
# Served by 1.34 and 1.35 with the DRADeviceTaintRules gate and resource.k8s.io/v1alpha3 on,
# by 1.36 at v1beta2 with the gate and that version on; a cluster without them answers 404
# (read as no rules). Readers take the version the cluster serves: device_taint_rule_kind().
DEVICETAINTRULE = Kind(
    "DeviceTaintRule", "resource.k8s.io", "v1alpha3", "devicetaintrules", namespaced=False
)
DEVICETAINTRULE_VERSIONS = ("v1", "v1beta2", "v1alpha3")  # newest first
SERVICE = Kind("Service", "", "v1", "services")
CONFIGMAP = Kind("ConfigMap", "", "v1", "configmaps")
SECRET = Kind("Secret", "", "v1", "secrets")
PERSISTENTVOLUMECLAIM = Kind("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims")
NETWORKPOLICY = Kind("NetworkPolicy", "networking.k8s.io", "v1", "networkpolicies")
INGRESS = Kind("Ingress", "networking.k8s.io", "v1", "ingresses")
HTTPROUTE = Kind("HTTPRoute", "gateway.networking.k8s.io", "v1", "httproutes")
CRD = Kind(
    "CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions", False
)

_lock = threading.Lock()
# One ApiClient per cluster, for this process (rebuilt after fork: Celery's prefork pool forks).
_api_clients: dict[str, client.ApiClient] = {}
_pid: int | None = None


def api_client() -> client.ApiClient:
    """The ApiClient of the cluster calls go to now (clusters.using), made on first use."""
    global _pid
    name = clusters.current_cluster()
    with _lock:
        if _pid != os.getpid():
            _api_clients.clear()
            _device_taint_rule_kinds.clear()
            _pid = os.getpid()
        if (api := _api_clients.get(name)) is None:
            api = _api_clients[name] = client.ApiClient(_configuration(clusters.reach(name)))
        return api


def _configuration(reach: clusters.Reach) -> client.Configuration:
    configuration = client.Configuration()
    if reach.kubeconfig:
        config.load_kube_config(
            config_file=reach.kubeconfig,
            context=reach.context or None,
            client_configuration=configuration,
        )
    elif settings.KUBECONFIG:
        config.load_kube_config(
            config_file=settings.KUBECONFIG,
            context=settings.KUBE_CONTEXT or None,
            client_configuration=configuration,
        )
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        raise KubeError("no cluster configured: set KUBECONFIG", reason="NotConfigured")
    # Retries are ours to decide (tasks back off); a hung call must not hold a worker.
    configuration.retries = 0
    return configuration


def reset() -> None:
    """Forget every connection (tests point the process at another cluster)."""
    with _lock:
        _api_clients.clear()
        _device_taint_rule_kinds.clear()


# Per cluster: the version each serves DeviceTaintRule at.
_device_taint_rule_kinds: dict[str, Kind] = {}


def device_taint_rule_kind() -> Kind:
    """DeviceTaintRule at the newest version the cluster serves it (discovery, once per
    process and cluster): a 1.36 cluster serves it at v1beta2 and need not serve v1alpha3 at
    all. When discovery fails the v1alpha3 kind is returned, not remembered, so a later call
    asks again; when no version serves it, its reads answer 404 (no rules)."""
    name = clusters.current_cluster()
    if (known := _device_taint_rule_kinds.get(name)) is not None:
        return known
    found = DEVICETAINTRULE
    for version in DEVICETAINTRULE_VERSIONS:
        try:
            listing = _call("GET", f"/apis/{DEVICETAINTRULE.group}/{version}", verb="discovery")
        except KubeError as exc:
            if exc.status == 404:
                continue
            return DEVICETAINTRULE
        if any(r.get("name") == DEVICETAINTRULE.plural for r in listing.get("resources") or []):
            found = replace_kind(DEVICETAINTRULE, version=version)
            break
    _device_taint_rule_kinds[name] = found
    return found


def _path(kind: Kind, namespace: str | None, name: str | None = None, sub: str = "") -> str:
    base = f"/api/{kind.version}" if not kind.group else f"/apis/{kind.group}/{kind.version}"
    if kind.namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{kind.plural}"
    if name:
        base += f"/{name}"
    if sub:
        base += f"/{sub}"
    return base


def _outcome(status: int) -> str:
    if 200 <= status < 300:
        return "ok"
    if status == 0:
        return "unreachable"
    return {404: "not_found", 409: "conflict"}.get(
        status, "server_error" if status >= 500 or status == 429 else "client_error"
    )


def _call(
    method: str,
    path: str,
    *,
    verb: str,
    body: Any = None,
    query: dict[str, str] | None = None,
    content_type: str = "application/json",
    timeout: float | None = None,
) -> dict:
    """One REST call returning the decoded JSON body; failures raise classified KubeErrors."""
    api = api_client()
    url = api.configuration.host + path
    if query:
        url += "?" + urlencode(query)
    headers = {"Accept": "application/json", "Content-Type": content_type}
    api.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
    try:
        response = api.rest_client.request(
            method,
            url,
            headers=headers,
            body=body,
            _request_timeout=timeout or settings.KUBE_REQUEST_TIMEOUT,
        )
    except Exception as exc:
        metrics.KUBE_REQUESTS.labels(verb, "unreachable").inc()
        raise classify(exc) from exc
    payload = response.read()
    metrics.KUBE_REQUESTS.labels(verb, _outcome(response.status)).inc()
    if not 200 <= response.status < 300:
        failure = ApiException(status=response.status, reason=response.reason)
        failure.body = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        failure.headers = response.headers
        raise classify(failure)
    return orjson.loads(payload) if payload else {}


def get(kind: Kind, namespace: str | None, name: str) -> dict | None:
    try:
        return _call("GET", _path(kind, namespace, name), verb="get")
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


def list_objects(
    kind: Kind, *, namespace: str | None = None, label_selector: str = ""
) -> list[dict]:
    query = {"labelSelector": label_selector} if label_selector else None
    return _call("GET", _path(kind, namespace), query=query, verb="list").get("items", [])


def list_page(
    kind: Kind,
    *,
    namespace: str | None = None,
    label_selector: str = "",
    limit: int = 0,
    continue_token: str = "",
) -> dict:
    """One page of a list: the List object with its `metadata.continue` when more follow."""
    query = {"labelSelector": label_selector, "limit": str(limit or ""), "continue": continue_token}
    return _call(
        "GET", _path(kind, namespace), query={k: v for k, v in query.items() if v}, verb="list"
    )


def stream(
    path: str,
    *,
    query: dict[str, str],
    read_timeout: float,
    on_open: Callable[[Any], None] | None = None,
) -> Iterator[str]:
    """The lines of a streamed GET (a watch), as they arrive. `on_open` gets the response
    once it is open, so another thread can shut it down. A refused request raises its
    classified KubeError; a connection that drops mid-stream raises a TemporaryError."""
    api = api_client()
    url = api.configuration.host + path + "?" + urlencode(query)
    headers = {"Accept": "application/json"}
    api.update_params_for_auth(headers, None, ["BearerToken"], path, "GET", None)
    try:
        # The client's REST layer never preloads bodies: `.response` is the open urllib3 one.
        response = api.rest_client.request(
            "GET",
            url,
            headers=headers,
            _request_timeout=(settings.KUBE_REQUEST_TIMEOUT, read_timeout),
        ).response
    except Exception as exc:
        metrics.KUBE_REQUESTS.labels("watch", "unreachable").inc()
        raise classify(exc) from exc
    metrics.KUBE_REQUESTS.labels("watch", _outcome(response.status)).inc()
    try:
        if not 200 <= response.status < 300:
            failure = ApiException(status=response.status, reason=response.reason)
            failure.body = response.data.decode("utf-8", "replace")
            failure.headers = response.headers
            raise classify(failure)
        if on_open is not None:
            on_open(response)
        try:
            yield from iter_resp_lines(response)
        except (urllib3.exceptions.HTTPError, OSError, AttributeError, ValueError) as exc:
            # Whatever ends a stream early (a reset, a read timeout, our own shutdown()
            # from another thread) is a dropped connection to resume from.
            raise TemporaryError(
                f"stream of {path} dropped: {exc}", reason="StreamDropped"
            ) from exc
    finally:
        response.release_conn()


def create(kind: Kind, namespace: str | None, body: dict) -> dict:
    return _call("POST", _path(kind, namespace), body=body, verb="create")


def merge_patch(kind: Kind, namespace: str | None, name: str, patch: dict, sub: str = "") -> dict:
    return _call(
        "PATCH",
        _path(kind, namespace, name, sub),
        body=patch,
        content_type="application/merge-patch+json",
        verb="patch",
    )


def json_patch(kind: Kind, namespace: str | None, name: str, operations: list[dict]) -> dict:
    """An RFC 6902 patch: its `test` operations make the write conditional on what the
    object holds, checked by the API server in the same request (422 when one fails)."""
    return _call(
        "PATCH",
        _path(kind, namespace, name),
        body=operations,
        content_type="application/json-patch+json",
        verb="patch",
    )


def replace(kind: Kind, namespace: str | None, name: str, body: dict) -> dict:
    return _call("PUT", _path(kind, namespace, name), body=body, verb="update")


def delete(
    kind: Kind, namespace: str | None, name: str, *, propagation: str = "Background"
) -> bool:
    """Delete; False when it was already gone."""
    try:
        _call(
            "DELETE",
            _path(kind, namespace, name),
            body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation},
            verb="delete",
        )
    except KubeError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def version(*, timeout: float | None = None) -> dict:
    return _call("GET", "/version", timeout=timeout, verb="version")

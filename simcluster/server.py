"""The HTTP front end: Kubernetes REST paths, content negotiation, watch streams and fault
injection."""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import select
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import yaml

from simcluster import discovery, tables
from simcluster.errors import ApiError, cause
from simcluster.faults import FaultInjector, RequestEntry, RequestLog
from simcluster.kubelet import ContainerLogs, LogStream, log_timestamp
from simcluster.patch import json_patch, merge_patch, strategic_merge_patch
from simcluster.resources import ResourceType
from simcluster.store import Store, clone
from simcluster.validation import (
    drop_unknown_custom_fields,
    drop_unknown_fields,
    undeclared_apply_fields,
)

logger = logging.getLogger(__name__)

# A request the fault injector hangs is dropped unanswered after this long.
HANG_SECONDS = 60.0
# Without timeoutSeconds the real server picks 30-60 minutes; one cap keeps threads bounded.
MAX_WATCH_SECONDS = 1800.0
JSON_TYPE = "application/json"
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
_FAULT_REASONS = {
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass(frozen=True)
class RequestTarget:
    """What a REST path addresses: kind, namespace, name, subresource, and a /watch/ prefix."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch: bool


class SimServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Handler threads block on sockets; a large backlog keeps bursts of clients from being refused.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        store: Store,
        faults: FaultInjector,
        requests: RequestLog,
        logs: ContainerLogs | None = None,
    ) -> None:
        super().__init__(address, Handler)
        # host:port as discovery advertises it (the port is the bound one when 0 was asked).
        self.authority = f"{address[0]}:{self.server_address[1]}"
        self.store = store
        self.faults = faults
        self.requests = requests
        self.logs = logs if logs is not None else ContainerLogs()
        self.stopping = threading.Event()
        # How often a watch with allowWatchBookmarks gets a BOOKMARK (the real server: about
        # once a minute).
        self.bookmark_interval = 60.0

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-request (its process stopped while a keep-alive connection
        waited for its next request) is not a server error: the API server logs nothing."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


def media_ranges(accept: str) -> list[tuple[str, dict[str, str]]]:
    """Accept header entries in order, as (type, parameters)."""
    ranges = []
    for entry in accept.split(","):
        media_type, *params = (part.strip() for part in entry.split(";"))
        if media_type:
            ranges.append((media_type, dict(p.split("=", 1) for p in params if "=" in p)))
    return ranges


def negotiated_as(accept: str, choices: set[tuple[str, str, str]]) -> tuple[str, str, str] | None:
    """The first (as, g, v) the client asks for that we offer; None means plain JSON."""
    for media_type, params in media_ranges(accept):
        if "as" not in params:
            if media_type in (JSON_TYPE, "*/*", "application/*"):
                return None
            continue
        wanted = (params["as"], params.get("g", ""), params.get("v", ""))
        if wanted in choices:
            return wanted
    return None


TABLE = ("Table", "meta.k8s.io", "v1")
DISCOVERY_V2 = ("APIGroupDiscoveryList", "apidiscovery.k8s.io", "v2")
DISCOVERY_V2BETA1 = ("APIGroupDiscoveryList", "apidiscovery.k8s.io", "v2beta1")


def _negotiate_table(accept: str) -> bool:
    return negotiated_as(accept, {TABLE}) == TABLE


def _parse_body(raw: bytes, content_type: str) -> Any:
    if not raw:
        return None
    try:
        if content_type in ("application/yaml", "application/apply-patch+yaml"):
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as error:
        raise ApiError.bad_request(f"error decoding request body: {error}") from None


class Handler(BaseHTTPRequestHandler):
    # Small responses on kept-alive connections otherwise wait ~40 ms (Nagle + delayed ACK).
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server: SimServer

    def log_message(self, format: str, *args: Any) -> None:
        """Requests go to the RequestLog, not stderr."""

    # -------------------------------------------------------------- plumbing

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _reset(self) -> None:
        """Drop the connection with a TCP reset and no answer, like an unreachable server."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def _send_json(
        self,
        code: int,
        body: Any,
        content_type: str = JSON_TYPE,
        headers: dict[str, str] | None = None,
    ) -> None:
        payload = orjson.dumps(body)
        self._record(code)
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        for text in getattr(self, "_warnings", ()):
            # net.NewWarningHeader: code 299, agent "-", the text quoted.
            escaped = text.replace("\\", "\\\\").replace('"', '\\"')
            self.send_header("Warning", f'299 - "{escaped}"')
        self.end_headers()
        self.wfile.write(payload)

    def _send_error(self, error: ApiError, headers: dict[str, str] | None = None) -> None:
        self._send_json(error.code, error.to_status(), headers=headers)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self._query = {
            key: values[-1] for key, values in parse_qs(url.query, keep_blank_values=True).items()
        }
        self._code = 0
        # Warning headers for the response (fieldValidation=Warn).
        self._warnings: list[str] = []
        self._log: dict[str, Any] = {
            "verb": method.lower(),
            "resource": None,
            "namespace": None,
            "name": None,
            "subresource": None,
        }
        body = self._read_body()
        # A stopped server answers nothing, also on a keep-alive connection opened before.
        if self.server.faults.unreachable or self.server.stopping.is_set():
            self._reset()
            return
        try:
            self._route(method, url.path.rstrip("/") or "/", body)
        except ApiError as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        except Exception as error:
            # A bug in the simulator must surface as a 500 to the client and a traceback here.
            logger.exception("simcluster: %s %s failed", method, self.path)
            self._send_error(ApiError.internal(f"{type(error).__name__}: {error}"))

    def _record(self, code: int) -> None:
        """Log the request as its response starts: a client holding the response then always
        finds the request in the log."""
        self._code = code
        self.server.requests.record(
            RequestEntry(code=code, path=urlsplit(self.path).path, **self._log)
        )

    def _apply_faults(self, verb: str, resource: str | None) -> bool:
        """Sleep, hang or fail as configured; True when the request was already answered."""
        fault = self.server.faults.decide(verb, resource)
        if fault.latency:
            time.sleep(fault.latency)
        if fault.timeout:
            # Logged when the hang starts, with code 0: it will never be answered.
            self.server.requests.record(
                RequestEntry(code=0, path=urlsplit(self.path).path, **self._log)
            )
            self.server.stopping.wait(HANG_SECONDS)
            self._reset()
            self._code = 0
            return True
        if fault.status is not None:
            reason = _FAULT_REASONS.get(fault.status) or _status_reason(fault.status)
            headers = {"Retry-After": "1"} if fault.status == 429 else None
            self._send_error(
                ApiError(fault.status, reason, f"simulated fault: {verb} {resource}"), headers
            )
            return True
        return False

    # -------------------------------------------------------------- routing

    def _route(self, method: str, path: str, body: bytes) -> None:
        accept = self.headers.get("Accept") or ""
        registry = self.server.store.registry
        if path in ("/healthz", "/livez", "/readyz"):
            self._send_plain("ok")
            return
        if path == "/version":
            self._send_json(200, discovery.version_info(self.server.store.features.version))
            return
        if path.startswith("/openapi/"):
            self._openapi(path)
            return
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) <= 2:
            if len(parts) == 1:
                self._discovery_root(accept, core=True)
            elif parts[1] == "v1":
                self._send_json(200, discovery.api_resource_list(registry, "", "v1"))
            else:
                raise _not_found()
            return
        if parts[0] == "apis" and len(parts) <= 3:
            if len(parts) == 1:
                self._discovery_root(accept, core=False)
            elif len(parts) == 2:
                group_document = discovery.api_group(registry, parts[1])
                if group_document is None:
                    raise _not_found()
                self._send_json(200, group_document)
            else:
                resources = discovery.api_resource_list(registry, parts[1], parts[2])
                if resources is None:
                    raise _not_found()
                self._send_json(200, resources)
            return
        if parts[0] == "api" and parts[1] == "v1":
            group, version, rest = "", "v1", parts[2:]
        elif parts[0] == "apis" and len(parts) > 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _not_found()
        target = self._target(group, version, rest)
        self._resource_request(method, target, body, accept)

    def _send_plain(self, text: str) -> None:
        payload = text.encode()
        self._record(200)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _discovery_root(self, accept: str, *, core: bool) -> None:
        registry = self.server.store.registry
        # kubectl decides by Content-Type, so only answer aggregated when asked and label it.
        wanted = negotiated_as(accept, {DISCOVERY_V2, DISCOVERY_V2BETA1})
        if wanted is not None:
            content_type = (
                discovery.AGGREGATED_V2 if wanted == DISCOVERY_V2 else discovery.AGGREGATED_V2BETA1
            )
            body = discovery.aggregated(registry, core=core, api_version=f"{wanted[1]}/{wanted[2]}")
            self._send_json(200, body, content_type)
            return
        if core:
            self._send_json(200, discovery.api_versions(self.server.authority))
        else:
            self._send_json(200, discovery.api_group_list(registry))

    def _openapi(self, path: str) -> None:
        registry = self.server.store.registry
        server_version = self.server.store.features.version
        if path == "/openapi/v3":
            self._send_json(200, discovery.openapi_v3_root(registry, server_version=server_version))
            return
        if path.startswith("/openapi/v3/"):
            parts = path[len("/openapi/v3/") :].split("/")
            document = None
            if parts[0] == "api" and len(parts) == 2:
                document = discovery.openapi_v3_document(
                    registry, "", parts[1], server_version=server_version
                )
            elif parts[0] == "apis" and len(parts) == 3:
                document = discovery.openapi_v3_document(
                    registry, parts[1], parts[2], server_version=server_version
                )
            if document is not None:
                self._send_json(200, document)
                return
        # /openapi/v2 stays 404: kubectl wants protobuf there and tolerates the 404.
        raise _not_found()

    def _target(self, group: str, version: str, rest: list[str]) -> RequestTarget:
        registry = self.server.store.registry
        watch = False
        if rest and rest[0] == "watch":
            watch, rest = True, rest[1:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise _not_found()
        rtype = registry.lookup(group, version, rest[0])
        if rtype is None:
            raise _not_found()
        if namespace is not None and not rtype.namespaced:
            raise _not_found()
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if rtype.namespaced and name is not None and namespace is None:
            raise _not_found()
        return RequestTarget(rtype, namespace, name, subresource, watch)

    # -------------------------------------------------------------- resources

    def _resource_request(
        self, method: str, target: RequestTarget, body: bytes, accept: str
    ) -> None:
        rtype = target.rtype
        watch = target.watch or self._query.get("watch") in ("true", "1")
        if target.name is None:
            verb = {
                "GET": "watch" if watch else "list",
                "POST": "create",
                "DELETE": "deletecollection",
            }.get(method)
        else:
            verb = {
                "GET": "get",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete",
                "POST": "create",
            }.get(method)
        self._log.update(
            verb=verb or method.lower(),
            resource=rtype.key,
            namespace=target.namespace,
            name=target.name,
            subresource=target.subresource,
        )
        if verb is None:
            raise ApiError.method_not_allowed()
        if target.subresource not in (None, "status", "binding", "log"):
            raise _not_found()
        if target.subresource == "log" and (rtype.key != "pods" or verb != "get"):
            raise _not_found() if rtype.key != "pods" else ApiError.method_not_allowed()
        if target.subresource == "status" and (
            not rtype.status_subresource or verb not in ("get", "update", "patch")
        ):
            raise _not_found() if not rtype.status_subresource else ApiError.method_not_allowed()
        if target.subresource == "binding" and (rtype.key != "pods" or verb != "create"):
            raise _not_found()
        if self._apply_faults(verb, rtype.key):
            return
        content_type = (self.headers.get("Content-Type") or JSON_TYPE).split(";")[0].strip()
        handler = getattr(self, f"_{verb}")
        handler(target, body, content_type, accept)

    def _versioned(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Serve an object in the requested version (see _to_storage_version)."""
        if obj.get("apiVersion") == rtype.api_version:
            return obj
        return {**obj, "apiVersion": rtype.api_version}

    def _get(self, target: RequestTarget, body: bytes, content_type: str, accept: str) -> None:
        store = self.server.store
        rtype = target.rtype
        if target.subresource == "log":
            self._pod_log(target)
            return
        obj = store.get_shared(rtype.key, target.namespace, target.name or "")
        if obj is None:
            raise ApiError.not_found(rtype.plural, target.name or "", rtype.group)
        obj = self._versioned(rtype, obj)
        if _negotiate_table(accept):
            include = self._query.get("includeObject", "Metadata")
            self._send_json(
                200,
                tables.table(
                    rtype, [obj], obj["metadata"]["resourceVersion"], include_object=include
                ),
            )
        else:
            self._send_json(200, obj)

    def _list(self, target: RequestTarget, body: bytes, content_type: str, accept: str) -> None:
        rtype = target.rtype
        try:
            limit = int(self._query.get("limit") or 0)
        except ValueError:
            raise ApiError.bad_request("invalid limit") from None
        items, resource_version, continue_token, remaining = self.server.store.list_page(
            rtype.key,
            target.namespace,
            label_selector=self._query.get("labelSelector"),
            field_selector=self._query.get("fieldSelector"),
            limit=max(limit, 0),
            continue_token=self._query.get("continue") or None,
        )
        items = [self._versioned(rtype, obj) for obj in items]
        metadata: dict[str, Any] = {"resourceVersion": resource_version}
        if continue_token:
            metadata["continue"] = continue_token
            if remaining is not None:
                metadata["remainingItemCount"] = remaining
        if _negotiate_table(accept):
            include = self._query.get("includeObject", "Metadata")
            table = tables.table(rtype, items, resource_version, include_object=include)
            table["metadata"] = {**table.get("metadata", {}), **metadata}
            self._send_json(200, table)
            return
        self._send_json(
            200,
            {
                "kind": rtype.list_kind,
                "apiVersion": rtype.api_version,
                "metadata": metadata,
                "items": items,
            },
        )

    def _body_object(self, body: bytes, content_type: str) -> dict[str, Any]:
        if content_type not in (JSON_TYPE, "application/yaml", "*/*"):
            raise ApiError.unsupported_media_type(content_type)
        obj = _parse_body(body, content_type)
        if not isinstance(obj, dict):
            raise ApiError.bad_request("the request body must be a JSON object")
        return obj

    def _place(self, target: RequestTarget, obj: dict[str, Any]) -> None:
        """Take namespace (and name, for item URLs) from the URL, refusing contradictions."""
        metadata = obj.setdefault("metadata", {})
        if target.rtype.namespaced:
            if metadata.get("namespace") and metadata["namespace"] != target.namespace:
                raise ApiError.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            metadata["namespace"] = target.namespace
        if target.name is not None and target.subresource is None:
            if metadata.get("name") and metadata["name"] != target.name:
                raise ApiError.bad_request(
                    f"the name of the object ({metadata['name']}) does not match the name on the "
                    f"URL ({target.name})"
                )
            metadata["name"] = target.name
        self._to_storage_version(target.rtype, obj)

    def _to_storage_version(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        """Objects of a kind served at several versions are stored in one: custom objects in
        the CRD's storage version (conversion strategy None), DeviceTaintRule in its first
        served version, whose fields every served version shares (renaming apiVersion is the
        whole conversion)."""
        storage = self.server.store.registry.get(rtype.key)
        if (
            storage is not None
            and storage.version != rtype.version
            and obj.get("apiVersion") == rtype.api_version
        ):
            obj["apiVersion"] = storage.api_version

    def _field_validation(self) -> str:
        # The server's default for JSON and YAML bodies alike; kubectl sends Strict itself.
        return self._query.get("fieldValidation") or "Warn"

    def _unknown_fields(self, rtype: ResourceType, obj: dict[str, Any], patch: Any = None) -> None:
        """fieldValidation, as the real decoder applies it: fields the schema does not declare
        (a built-in's strict schema, a custom object's CRD schema and ObjectMeta) are dropped
        (Ignore), dropped with a warning each (Warn, the default), or refused (Strict): 400 for
        a create or update, 422 on `patch` for a patch. `patch` is the strategic-merge patch,
        which is what the real error shows; other patches show the patched object, a custom
        one as Go marshals a map (keys sorted)."""
        schemas = self.server.store.schemas
        if rtype.crd is not None:
            dropped = drop_unknown_custom_fields(rtype, obj, schemas)
        else:
            dropped = drop_unknown_fields(rtype, obj, schemas)
        if not dropped:
            return
        directive = self._field_validation()
        problems = [f'unknown field "{path}"' for path in dropped]
        if directive == "Warn":
            self._warnings.extend(problems)
        if directive != "Strict":
            return
        detail = "strict decoding error: " + ", ".join(problems)
        if self.command == "PATCH":
            if patch is not None:
                shown = _go_map(patch)
            else:
                shown = json.dumps(obj, separators=(",", ":"), sort_keys=rtype.crd is not None)
            raise ApiError.invalid(
                "",
                "",
                [
                    cause(
                        "FieldValueInvalid",
                        "patch",
                        f"Invalid value: {json.dumps(shown)}: {detail}",
                    )
                ],
            )
        raise ApiError.bad_request(
            f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
            f"{detail}"
        )

    def _refuse_undeclared_apply_fields(self, rtype: ResourceType, patch: Any) -> None:
        """A server-side apply patch with a field its schema does not declare fails in the
        field manager, whatever fieldValidation says, with an error no handler turns into a
        Status: 500, no reason (patch.go's applyPatcher returns it as is). Its text names the
        patch's own namespace, name and kind (objectGVKNN in structuredmerge.go) and each
        path as structured-merge-diff's ValidationErrors print them."""
        if not isinstance(patch, dict):
            return
        undeclared = undeclared_apply_fields(rtype, patch, self.server.store.schemas)
        if not undeclared:
            return
        errors = [f"{path}: field not declared in schema" for path in undeclared]
        detail = errors[0] if len(errors) == 1 else "\n  ".join(["errors:", *errors])
        metadata = patch.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        group, _, version = str(patch.get("apiVersion") or "").rpartition("/")
        raise ApiError.unclassified(
            f"failed to create typed patch object ({metadata.get('namespace') or ''}/"
            f"{metadata.get('name') or ''}; {group}/{version}, Kind={patch.get('kind') or ''}): "
            f"{detail}"
        )

    def _create(self, target: RequestTarget, body: bytes, content_type: str, accept: str) -> None:
        store = self.server.store
        obj = self._body_object(body, content_type)
        if target.subresource == "binding":
            self._bind(target, obj)
            return
        if target.rtype.namespaced and target.namespace is None:
            raise ApiError.method_not_allowed()
        self._place(target, obj)
        self._unknown_fields(target.rtype, obj)
        created = store.create(
            target.rtype.key,
            obj,
            dry_run=bool(self._query.get("dryRun")),
        )
        self._send_json(201, self._versioned(target.rtype, created))

    def _bind(self, target: RequestTarget, binding: dict[str, Any]) -> None:
        """pods/binding: what a scheduler posts to set a pod's node."""
        store = self.server.store
        node = (binding.get("target") or {}).get("name")
        if not node:
            raise ApiError.invalid(
                "Binding",
                target.name or "",
                [
                    {
                        "reason": "FieldValueRequired",
                        "message": "Required value",
                        "field": "target.name",
                    }
                ],
            )
        with store.lock:
            pod = store.get("pods", target.namespace, target.name or "")
            if pod is None:
                raise ApiError.not_found("pods", target.name or "")
            if pod["spec"].get("nodeName"):
                raise ApiError.conflict(
                    "pods/binding",
                    target.name or "",
                    f'pod {target.name} is already assigned to node "{pod["spec"]["nodeName"]}"',
                )
            pod["spec"]["nodeName"] = node
            store.update("pods", pod, internal=True)
        self._send_json(
            201,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
        )

    def _update(self, target: RequestTarget, body: bytes, content_type: str, accept: str) -> None:
        obj = self._body_object(body, content_type)
        self._place(target, obj)
        metadata = obj["metadata"]
        metadata["name"] = target.name
        self._unknown_fields(target.rtype, obj)
        updated = self.server.store.update(
            target.rtype.key,
            obj,
            subresource=target.subresource,
            dry_run=bool(self._query.get("dryRun")),
        )
        self._send_json(200, self._versioned(target.rtype, updated))

    def _patch(self, target: RequestTarget, body: bytes, content_type: str, accept: str) -> None:
        store = self.server.store
        rtype = target.rtype
        if content_type not in PATCH_TYPES:
            raise ApiError.unsupported_media_type(content_type)
        if content_type == "application/strategic-merge-patch+json" and rtype.crd is not None:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml",
            )
        patch = _parse_body(body, content_type)
        if content_type == "application/apply-patch+yaml":
            self._refuse_undeclared_apply_fields(rtype, patch)
        with store.lock:
            current = store.get(rtype.key, target.namespace, target.name or "")
            if current is None:
                if content_type == "application/apply-patch+yaml" and target.subresource is None:
                    self._apply_create(target, patch)
                    return
                raise ApiError.not_found(rtype.plural, target.name or "", rtype.group)
            if content_type == "application/json-patch+json":
                patched = json_patch(current, patch)
            elif content_type == "application/merge-patch+json":
                patched = merge_patch(current, patch)
            elif rtype.crd is not None:
                patched = merge_patch(current, _apply_body(patch))
            else:
                patch_body = (
                    _apply_body(patch) if content_type == "application/apply-patch+yaml" else patch
                )
                schemas = store.schemas
                root = schemas.root(rtype.kind, rtype.api_version)
                patched = strategic_merge_patch(current, patch_body, root, schemas.resolve)
            if not isinstance(patched, dict):
                raise ApiError.bad_request("the patch did not produce an object")
            patched.setdefault("metadata", {})
            self._to_storage_version(rtype, patched)
            patched["metadata"]["name"] = target.name
            if rtype.namespaced:
                patched["metadata"]["namespace"] = target.namespace
            if not patched["metadata"].get("resourceVersion"):
                patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            if content_type != "application/apply-patch+yaml":
                # (An apply patch has none left: its undeclared fields were refused above.)
                strategic = content_type == "application/strategic-merge-patch+json"
                self._unknown_fields(rtype, patched, patch if strategic else None)
            updated = store.update(
                rtype.key,
                patched,
                subresource=target.subresource,
                dry_run=bool(self._query.get("dryRun")),
            )
        self._send_json(200, self._versioned(rtype, updated))

    def _apply_create(self, target: RequestTarget, patch: Any) -> None:
        obj = _apply_body(patch)
        self._place(target, obj)
        created = self.server.store.create(target.rtype.key, obj)
        self._send_json(201, self._versioned(target.rtype, created))

    def _delete_options(self, body: bytes) -> dict[str, Any]:
        options = _parse_body(body, JSON_TYPE) or {}
        if not isinstance(options, dict):
            raise ApiError.bad_request("DeleteOptions must be a JSON object")
        policy = options.get("propagationPolicy") or self._query.get("propagationPolicy")
        orphan = options.get("orphanDependents")
        if orphan is None and "orphanDependents" in self._query:
            orphan = self._query["orphanDependents"] == "true"
        if policy is None and orphan is not None:
            policy = "Orphan" if orphan else "Background"
        options["propagationPolicy"] = policy
        grace = options.get("gracePeriodSeconds")
        if grace is None and "gracePeriodSeconds" in self._query:
            grace = self._query["gracePeriodSeconds"]
        if grace is not None:
            try:
                options["gracePeriodSeconds"] = int(grace)
            except (TypeError, ValueError):
                raise ApiError.bad_request(
                    f"gracePeriodSeconds must be an integer, not {grace!r}"
                ) from None
        return options

    def _delete(self, target: RequestTarget, body: bytes, content_type: str, accept: str) -> None:
        rtype = target.rtype
        options = self._delete_options(body)
        if self._query.get("dryRun"):
            obj = self.server.store.get(rtype.key, target.namespace, target.name or "")
            if obj is None:
                raise ApiError.not_found(rtype.plural, target.name or "", rtype.group)
            self._send_json(200, obj)
            return
        obj, removed = self.server.store.delete_object(
            rtype.key,
            target.namespace,
            target.name or "",
            propagation=options["propagationPolicy"],
            preconditions=options.get("preconditions"),
            grace_period=options.get("gracePeriodSeconds"),
        )
        if rtype.delete_returns_object or not removed:
            self._send_json(200, self._versioned(rtype, obj))
            return
        details = {
            "name": obj["metadata"]["name"],
            "kind": rtype.plural,
            "uid": obj["metadata"]["uid"],
        }
        if rtype.group:
            details["group"] = rtype.group
        self._send_json(
            200,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            },
        )

    def _deletecollection(
        self, target: RequestTarget, body: bytes, content_type: str, accept: str
    ) -> None:
        rtype = target.rtype
        options = self._delete_options(body)
        deleted = self.server.store.delete_collection(
            rtype.key,
            target.namespace,
            label_selector=self._query.get("labelSelector"),
            field_selector=self._query.get("fieldSelector"),
            propagation=options["propagationPolicy"],
            grace_period=options.get("gracePeriodSeconds"),
        )
        self._send_json(
            200,
            {
                "kind": rtype.list_kind,
                "apiVersion": rtype.api_version,
                "metadata": {"resourceVersion": self.server.store.resource_version},
                "items": [self._versioned(rtype, obj) for obj in deleted],
            },
        )

    # -------------------------------------------------------------- pods/log

    def _pod_log(self, target: RequestTarget) -> None:
        """pods/{name}/log: the apiserver's checks (options, container), then the kubelet's
        (the container's state), then the log as text/plain, streamed with follow=true."""
        name = target.name or ""
        options = _log_options(name, self._query)
        pod = self.server.store.get("pods", target.namespace, name)
        if pod is None:
            raise ApiError.not_found("pods", name)
        container = _log_container(pod, options.container)
        if not (pod.get("spec") or {}).get("nodeName"):
            # No node yet: the apiserver has no kubelet to ask and answers with nothing.
            self._send_text(b"")
            return
        stream = self._log_stream(pod, container, options.previous)
        lines = stream.lines if stream is not None else []
        if options.since_nanos is not None:
            lines = [entry for entry in lines if entry[0] >= options.since_nanos]
        if options.tail_lines is not None:
            lines = lines[len(lines) - options.tail_lines :] if options.tail_lines else []
        payload = b"".join(_log_line(entry, options.timestamps) for entry in lines)
        if options.limit_bytes is not None:
            payload = payload[: options.limit_bytes]
        if not options.follow or stream is None or stream.closed:
            self._send_text(payload)
            return
        self._follow_log(stream, stream.dropped + len(stream.lines), payload, options)

    def _log_stream(self, pod: dict[str, Any], container: str, previous: bool) -> LogStream | None:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        entry = next(
            (
                c
                for c in [
                    *(status.get("containerStatuses") or []),
                    *(status.get("initContainerStatuses") or []),
                ]
                if c.get("name") == container
            ),
            None,
        )
        if entry is None:
            raise ApiError.bad_request(f'container "{container}" in pod "{name}" is not available')
        state, last = entry.get("state") or {}, entry.get("lastState") or {}
        logs, uid = self.server.logs, pod["metadata"]["uid"]
        if previous:
            if not (last.get("terminated") or {}).get("containerID"):
                raise ApiError.bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            return logs.stream(uid, container, previous=True)
        if state.get("running") is not None or state.get("terminated") is not None:
            return logs.stream(uid, container)
        if (last.get("terminated") or {}).get("containerID"):
            return logs.stream(uid, container, previous=True)
        reason = (state.get("waiting") or {}).get("reason")
        if reason == "ErrImagePull":
            detail = "image can't be pulled"
        elif reason == "ImagePullBackOff":
            detail = "trying and failing to pull image"
        elif reason:
            detail = reason
        else:
            raise ApiError.bad_request(
                f'container "{container}" in pod "{name}" is waiting to start - no logs yet'
            )
        raise ApiError.bad_request(
            f'container "{container}" in pod "{name}" is waiting to start: {detail}'
        )

    def _send_text(self, payload: bytes) -> None:
        self._record(200)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(payload)

    def _follow_log(
        self, stream: LogStream, position: int, first: bytes, options: LogOptions
    ) -> None:
        """Chunked until the container stops, the client leaves or limitBytes is reached."""
        self._record(200)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        budget = options.limit_bytes
        connected = True
        changed = self.server.logs.changed
        try:
            chunk = first
            while True:
                if chunk:
                    if budget is not None:
                        chunk = chunk[:budget]
                        budget -= len(chunk)
                    self._write_chunk(chunk)
                if budget == 0 or self.server.stopping.is_set():
                    break
                with changed:
                    start = position - stream.dropped
                    if start >= len(stream.lines) and not stream.closed:
                        changed.wait(0.2)
                        start = position - stream.dropped
                    fresh = stream.lines[max(start, 0) :]
                    position = stream.dropped + len(stream.lines)
                    closed = stream.closed
                chunk = b"".join(_log_line(entry, options.timestamps) for entry in fresh)
                if closed and not chunk:
                    break
                if not chunk and self._client_gone():
                    connected = False
                    return
        except (BrokenPipeError, ConnectionResetError):
            connected = False
        finally:
            if connected:
                try:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    connected = False
            if not connected:
                self.close_connection = True

    # -------------------------------------------------------------- watch

    def _write_chunk(self, payload: bytes) -> None:
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _write_bookmark(self, rtype: Any, watcher: Any) -> None:
        """A BOOKMARK at the newest version this watch has seen everything up to: the events
        still queued for it are newer, so it may not claim the store's version past them."""
        version = self.server.store.bookmark_version(watcher)
        if version <= watcher.sent_version:
            return
        watcher.sent_version = version
        bookmark = {
            "kind": rtype.kind,
            "apiVersion": rtype.api_version,
            "metadata": {"resourceVersion": str(version)},
        }
        self._write_chunk(orjson.dumps({"type": "BOOKMARK", "object": bookmark}) + b"\n")

    def _watch(self, target: RequestTarget, body: bytes, content_type: str, accept: str) -> None:
        # Taken before the client can see the response: a drop asked for once the client knows
        # its watch is open always cuts it.
        drops = self.server.faults.watch_drops
        store = self.server.store
        rtype = target.rtype
        as_table = _negotiate_table(accept)
        try:
            timeout = float(self._query.get("timeoutSeconds") or MAX_WATCH_SECONDS)
        except ValueError:
            raise ApiError.bad_request("invalid timeoutSeconds") from None
        first_error: ApiError | None = None
        watcher = None
        try:
            watcher = store.watch(
                rtype.key,
                target.namespace,
                label_selector=self._query.get("labelSelector"),
                field_selector=self._query.get("fieldSelector"),
                resource_version=self._query.get("resourceVersion"),
                send_initial_events=self._query.get("sendInitialEvents") == "true",
            )
        except ApiError as error:
            if error.code != 410:
                raise
            first_error = error
        self._record(200)
        self.send_response(200)
        self.send_header("Content-Type", JSON_TYPE)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        deadline = time.monotonic() + min(timeout, MAX_WATCH_SECONDS)
        bookmarks = self._query.get("allowWatchBookmarks") in ("true", "1")
        next_bookmark = time.monotonic() + self.server.bookmark_interval
        first_table = True
        connected = True
        try:
            if first_error is not None:
                self._write_chunk(
                    json.dumps({"type": "ERROR", "object": first_error.to_status()}).encode()
                    + b"\n"
                )
                return
            assert watcher is not None
            while not self.server.stopping.is_set():
                if self.server.faults.watch_drops != drops:
                    connected = False
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    if bookmarks:  # as the real server does before it ends a watch on timeout
                        self._write_bookmark(rtype, watcher)
                    break
                if bookmarks and now >= next_bookmark:
                    self._write_bookmark(rtype, watcher)
                    next_bookmark = now + self.server.bookmark_interval
                wait = min(0.2, remaining, max(next_bookmark - now, 0.0) if bookmarks else 0.2)
                try:
                    event = watcher.events.get(timeout=wait)
                except queue.Empty:
                    if self._client_gone():
                        connected = False
                        return
                    continue
                if event is None:
                    break
                obj = self._versioned(rtype, event.object)
                if as_table and event.type != "BOOKMARK":
                    obj = tables.table(
                        rtype, [obj], str(event.resource_version), with_columns=first_table
                    )
                    first_table = False
                watcher.sent_version = max(watcher.sent_version, event.resource_version)
                self._write_chunk(orjson.dumps({"type": event.type, "object": obj}) + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            connected = False
        finally:
            if watcher is not None:
                store.stop_watch(watcher)
            if connected:
                try:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    connected = False
            if not connected:
                self.close_connection = True


@dataclass(frozen=True)
class LogOptions:
    """PodLogOptions as the query gives them."""

    container: str | None
    follow: bool
    previous: bool
    timestamps: bool
    tail_lines: int | None
    limit_bytes: int | None
    since_nanos: int | None


def _log_options(name: str, query: dict[str, str]) -> LogOptions:
    """Parse and validate like ValidatePodLogOptions (422 PodLogOptions)."""

    def number(key: str) -> int | None:
        if key not in query or query[key] == "":
            return None
        try:
            return int(query[key])
        except ValueError:
            raise ApiError.bad_request(
                f'strconv.ParseInt: parsing "{query[key]}": invalid syntax'
            ) from None

    def flag(key: str) -> bool:
        return query.get(key, "false").lower() in ("true", "1")

    tail_lines, limit_bytes = number("tailLines"), number("limitBytes")
    since_seconds = number("sinceSeconds")
    causes = []
    if tail_lines is not None and tail_lines < 0:
        causes.append(
            cause(
                "FieldValueInvalid",
                "tailLines",
                f"Invalid value: {tail_lines}: must be greater than or equal to 0",
            )
        )
    if limit_bytes is not None and limit_bytes < 1:
        causes.append(
            cause(
                "FieldValueInvalid",
                "limitBytes",
                f"Invalid value: {limit_bytes}: must be greater than 0",
            )
        )
    since_nanos = None
    if since_seconds is not None and query.get("sinceTime"):
        causes.append(
            cause(
                "FieldValueForbidden",
                "",
                "at most one of `sinceTime` or `sinceSeconds` may be specified",
            )
        )
    elif since_seconds is not None:
        if since_seconds < 1:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    "sinceSeconds",
                    f"Invalid value: {since_seconds}: must be greater than 0",
                )
            )
        since_nanos = time.time_ns() - since_seconds * 1_000_000_000
    elif query.get("sinceTime"):
        moment = tables.parse_time(query["sinceTime"])
        if moment is None:
            raise ApiError.bad_request(f'parsing time "{query["sinceTime"]}" as RFC3339: invalid')
        since_nanos = int(moment.timestamp()) * 1_000_000_000
    if causes:
        raise ApiError.invalid("PodLogOptions", name, causes)
    return LogOptions(
        container=query.get("container") or None,
        follow=flag("follow"),
        previous=flag("previous"),
        timestamps=flag("timestamps"),
        tail_lines=tail_lines,
        limit_bytes=limit_bytes,
        since_nanos=since_nanos,
    )


def _log_container(pod: dict[str, Any], container: str | None) -> str:
    """The apiserver's validateContainer: the only container, or the one named."""
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    containers = [c.get("name", "") for c in spec.get("containers") or []]
    every = [
        *(c.get("name", "") for c in spec.get("initContainers") or []),
        *containers,
        *(c.get("name", "") for c in spec.get("ephemeralContainers") or []),
    ]
    if not container:
        if len(containers) == 1:
            return containers[0]
        if not containers:
            raise ApiError.bad_request(f"pod {name} does not have a container")
        raise ApiError.bad_request(
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(every)}]"
        )
    if container not in every:
        raise ApiError.bad_request(f"container {container} is not valid for pod {name}")
    return container


def _log_line(entry: tuple[int, str], timestamps: bool) -> bytes:
    at, text = entry
    return (f"{log_timestamp(at)} {text}\n" if timestamps else f"{text}\n").encode()


def _status_reason(code: int) -> str:
    try:
        return HTTPStatus(code).phrase.replace(" ", "")
    except ValueError:
        return "Unknown"


def _go_map(value: Any) -> str:
    """A decoded JSON value as Go's %+v prints it: maps with sorted keys, `map[k:v ...]`."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_map(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_map(item) for item in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _apply_body(patch: Any) -> dict[str, Any]:
    """Server-side apply, approximated as an upsert of the applied configuration."""
    if not isinstance(patch, dict):
        raise ApiError.bad_request("apply patch must be an object")
    return clone(patch)


def _not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})

"""A small client of the development cluster's API for devstack itself (the driver, the agent,
the launcher): server-side apply, get, list, watch, patch and delete over urllib3, any kind
resolved through discovery. The product talks to clusters through `controlplane.kube`;
devstack stands outside the product and imports none of it."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3
import yaml

FIELD_MANAGER = "devstack"


class ApiError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body[:500]}")
        self.status = status
        self.body = body


class Api:
    def __init__(self, server: str, token: str, ca_file: Path | str) -> None:
        self.server = server.rstrip("/")
        context = ssl.create_default_context(cafile=str(ca_file))
        self.http = urllib3.PoolManager(
            maxsize=8, ssl_context=context, retries=False, timeout=urllib3.Timeout(30)
        )
        self.headers = {"Authorization": f"Bearer {token}"}
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    @classmethod
    def from_kubeconfig(cls, path: Path | str) -> Api:
        """From a kubeconfig devstack wrote (token user, CA data)."""
        import base64
        import tempfile

        config = yaml.safe_load(Path(path).read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as ca:
            ca.write(base64.b64decode(cluster["certificate-authority-data"]))
        return cls(cluster["server"], user["token"], ca.name)

    # -- plumbing --------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, Any] | None = None,
        ok: tuple[int, ...] = (200, 201, 202),
    ) -> Any:
        url = self.server + path + (f"?{urlencode(query)}" if query else "")
        data = None
        headers = dict(self.headers)
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        response = self.http.request(method, url, body=data, headers=headers)
        text = response.data.decode(errors="replace")
        if response.status not in ok:
            raise ApiError(response.status, text)
        return json.loads(text) if text else None

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(collection path prefix without namespace, namespaced) for a kind, by discovery."""
        key = (api_version, kind)
        if key not in self._resources:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            listing = self.request("GET", base)
            for entry in listing.get("resources", []):
                if "/" not in entry["name"]:
                    self._resources[(api_version, entry["kind"])] = (
                        f"{base}/{entry['name']}",
                        entry["namespaced"],
                    )
            if key not in self._resources:
                raise ApiError(404, f"{kind} is not served at {api_version}")
        return self._resources[key]

    def path(
        self, api_version: str, kind: str, namespace: str | None = None, name: str = ""
    ) -> str:
        prefix, namespaced = self.resource(api_version, kind)
        if namespaced and namespace:
            group_base, plural = prefix.rsplit("/", 1)
            prefix = f"{group_base}/namespaces/{namespace}/{plural}"
        return f"{prefix}/{name}" if name else prefix

    # -- verbs -----------------------------------------------------------------------------

    def apply(self, obj: Mapping[str, Any], *, subresource: str = "") -> dict[str, Any]:
        """Server-side apply of `obj` (its fields owned by devstack, conflicts forced)."""
        metadata = obj["metadata"]
        path = self.path(
            obj["apiVersion"], obj["kind"], metadata.get("namespace"), metadata["name"]
        )
        return self.request(
            "PATCH",
            path + (f"/{subresource}" if subresource else ""),
            json.dumps(obj).encode(),
            content_type="application/apply-patch+yaml",
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
        )

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        try:
            return self.request("GET", self.path(api_version, kind, namespace, name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, **query: str
    ) -> list[dict[str, Any]]:
        return self.request("GET", self.path(api_version, kind, namespace), query=query)["items"]

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str = "",
    ) -> dict[str, Any]:
        path = self.path(api_version, kind, namespace, name)
        return self.request(
            "PATCH",
            path + (f"/{subresource}" if subresource else ""),
            patch,
            content_type="application/merge-patch+json",
        )

    def delete(
        self, api_version: str, kind: str, name: str, namespace: str | None = None, **query: str
    ) -> bool:
        """Delete; False when it was not there."""
        try:
            self.request(
                "DELETE", self.path(api_version, kind, namespace, name), query=query or None
            )
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def watch(
        self, api_version: str, kind: str, *, resource_version: str, timeout: int = 300
    ) -> Iterator[dict[str, Any]]:
        """Watch events of a kind (all namespaces) from `resource_version`, with bookmarks."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout),
        }
        url = self.server + self.path(api_version, kind) + "?" + urlencode(query)
        response = self.http.request(
            "GET",
            url,
            headers=self.headers,
            preload_content=False,
            timeout=urllib3.Timeout(connect=10, read=timeout + 30),
        )
        try:
            if response.status != 200:
                raise ApiError(response.status, response.data.decode(errors="replace"))
            buffer = b""
            for chunk in response.stream(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()

    def wait_for_crd(self, name: str, timeout: float = 30) -> None:
        """Until the CRD is Established and its kind is served: a CRD just made answers 404,
        then 429/503 "storage is (re)initializing" for a moment."""
        deadline = time.monotonic() + timeout
        while True:
            crd = self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
            status = (crd or {}).get("status") or {}
            conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
            if crd and conditions.get("Established") == "True":
                spec = crd["spec"]
                version = next(v["name"] for v in spec["versions"] if v.get("storage"))
                try:
                    self.request(
                        "GET",
                        f"/apis/{spec['group']}/{version}/{spec['names']['plural']}",
                        query={"limit": "1"},
                    )
                    return
                except ApiError as error:
                    if error.status not in (404, 429, 503):
                        raise
            if time.monotonic() > deadline:
                raise ApiError(504, f"CRD {name} not established in {timeout}s")
            time.sleep(0.1)

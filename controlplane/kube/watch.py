"""Watch streams: list a kind page by page, then watch it from the list's resourceVersion, as
client-go's reflector does. Bookmarks move the version on without events; `410 Gone` (the
version was compacted away) means list again; a dropped connection resumes the watch from the
last version seen, after a backoff; every watch is bounded by `timeoutSeconds` and then
simply reopened.

An `Informer` keeps the objects of its kind in memory (replaced wholesale by each list,
changed by each event) and tells its handler about both, from its own thread. Given a
transform (client-go's `SetTransform`; controlplane/kube/trim.py has the observer's), it keeps
and hands on each object as the transform returns it, not as the server sent it."""

from __future__ import annotations

import contextvars
import logging
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from controlplane import memory
from controlplane.kube.client import Kind, _path, list_page, stream
from controlplane.kube.errors import KubeError, TemporaryError

logger = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace or "", name)
Transform = Callable[[dict], dict]


def key_of(obj: dict) -> Key:
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "", metadata.get("name") or ""


@dataclass(frozen=True)
class Event:
    """One change: ADDED, MODIFIED or DELETED, with the object as the server sent it (through
    the informer's transform, when it has one)."""

    type: str
    object: dict[str, Any]


class Gone(Exception):
    """The version a watch or a continue token started from has been compacted away."""


def list_all(
    kind: Kind,
    *,
    label_selector: str = "",
    page_size: int = 500,
    transform: Transform | None = None,
) -> tuple[list, str]:
    """Every object of `kind`, `page_size` at a time, and the list's resourceVersion. A
    continue token that expires mid-list (410) starts the list over. `transform` is applied
    page by page, so no more than a page of whole objects is held at once."""
    while True:
        items: list[dict] = []
        token = ""
        try:
            while True:
                page = list_page(
                    kind, label_selector=label_selector, limit=page_size, continue_token=token
                )
                found = page.get("items") or []
                items.extend(map(transform, found) if transform else found)
                metadata = page.get("metadata") or {}
                token = metadata.get("continue") or ""
                if not token:
                    return items, str(metadata.get("resourceVersion") or "")
        except KubeError as exc:
            if exc.status != 410:
                raise
            logger.info("list of %s expired mid-way; listing again", kind.plural)


def watch_events(
    kind: Kind,
    *,
    resource_version: str,
    label_selector: str = "",
    timeout_seconds: int = 300,
    on_open: Callable[[Any], None] | None = None,
) -> Iterator[dict]:
    """The raw events of one watch from `resource_version` (bookmarks included) until the
    server ends it. Raises Gone on a 410, TemporaryError when the connection drops."""
    query = {
        "watch": "1",
        "resourceVersion": resource_version,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(timeout_seconds),
    }
    if label_selector:
        query["labelSelector"] = label_selector
    lines = stream(
        _path(kind, None), query=query, read_timeout=timeout_seconds + 30, on_open=on_open
    )
    for line in lines:
        event = orjson.loads(line)
        if event.get("type") == "ERROR":
            status = event.get("object") or {}
            if status.get("code") == 410:
                raise Gone(status.get("message") or "too old resource version")
            raise TemporaryError(
                f"watch of {kind.plural} failed: {status.get('message') or status}",
                status=int(status.get("code") or 0),
                reason=str(status.get("reason") or ""),
            )
        yield event


class Handler(Protocol):
    def replaced(self, kind: Kind, objects: dict[Key, dict]) -> None:
        """A list replaced everything known of `kind` (after a start, a 410 or an error).
        Objects it no longer shows have each been reported as DELETED just before."""

    def changed(self, kind: Kind, event: Event) -> None:
        """One object of `kind` was added, modified or deleted."""


class Informer:
    """List-then-watch of one kind, kept in memory, on its own daemon thread."""

    def __init__(
        self,
        kind: Kind,
        handler: Handler,
        *,
        label_selector: str = "",
        page_size: int = 100,
        timeout_seconds: int = 300,
        max_backoff: float = 30.0,
        optional: bool = False,
        recheck_seconds: float = 60.0,
        transform: Transform | None = None,
    ) -> None:
        self.kind = kind
        # Applied to every object listed or watched before it is kept or handed on (the
        # resourceVersion a watch resumes from is read before it).
        self.transform = transform
        # An optional kind may not be served (an alpha API left off, as DeviceTaintRule is on
        # most clusters): a 404 on its list means none exist, and the informer is healthy
        # with nothing, listing again every `recheck_seconds` in case it is turned on.
        self.optional = optional
        self.recheck_seconds = recheck_seconds
        self.served = True
        self.handler = handler
        self.label_selector = label_selector
        # Smaller pages than list_all's: a page is decoded whole before the transform keeps a
        # part of each object, and the parts kept, allocated among the whole objects, pin the
        # memory those took once they are freed (the observer, listed at 10,000 units: 214 MB
        # resident with pages of 500, 183 MB with pages of 100).
        self.page_size = page_size
        self.timeout_seconds = timeout_seconds
        self.max_backoff = max_backoff
        self.objects: dict[Key, dict] = {}
        self.resource_version = ""
        self.synced = threading.Event()  # set once the first list is in
        # Whether the last attempt to watch failed (cleared when a watch opens): while it is
        # set, what the informer holds may be behind the cluster.
        self.failing = False
        self.lists = 0  # how many lists it took (1 + one per 410 or failure)
        self.watches = 0  # how many watches it opened
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> Informer:
        # The thread lists and watches the cluster the starter's calls go to (kube.using).
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self.run,), name=f"informer-{self.kind.plural}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._shut(self._response)
        if self._thread is not None:
            self._thread.join(timeout)

    def _shut(self, response: Any) -> None:
        """Wake the thread blocked reading `response` (it then sees the stop)."""
        if response is None:
            return
        try:
            response.shutdown()
        except Exception:  # a stream that is already gone needs no closing
            logger.debug("closing the watch of %s", self.kind.plural, exc_info=True)

    @property
    def healthy(self) -> bool:
        """Listed, and its watch up: what it holds is the cluster as of a moment ago."""
        return self.synced.is_set() and not self.failing

    def snapshot(self) -> dict[Key, dict]:
        with self._lock:
            return dict(self.objects)

    def get(self, key: Key) -> dict | None:
        """The object with this (namespace, name) as last seen, or None."""
        with self._lock:
            return self.objects.get(key)

    def run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if not self.resource_version and not self._relist():
                    self._stop.wait(self.recheck_seconds)  # not served: nothing to watch
                    continue
                self._watch()
                failures = 0
            except Gone:
                logger.info("watch of %s: version gone, listing again", self.kind.plural)
                self.resource_version = ""
            except Exception as exc:  # the informer outlives any failure; it backs off
                if self._stop.is_set():
                    return
                self.failing = True
                failures += 1
                delay = min(self.max_backoff, 0.2 * 2**failures) * random.uniform(0.5, 1.0)
                logger.warning(
                    "watch of %s failed (%s); again in %.1f s", self.kind.plural, exc, delay
                )
                if not isinstance(exc, TemporaryError):
                    # A refusal or a bug, not a dropped line: what we hold may be wrong.
                    self.resource_version = ""
                self._stop.wait(delay)

    def _relist(self) -> bool:
        """List the kind and replace what is held; False when an optional kind is not
        served (then nothing is held)."""
        try:
            items, version = list_all(
                self.kind,
                label_selector=self.label_selector,
                page_size=self.page_size,
                transform=self.transform,
            )
            self.served = True
        except KubeError as exc:
            if not (self.optional and exc.status == 404):
                raise
            if self.served:
                logger.info("%s are not served by the cluster: none", self.kind.plural)
            items, version, self.served = [], "", False
        if self._stop.is_set():
            return self.served
        objects = {key_of(obj): obj for obj in items}
        with self._lock:
            gone = [obj for key, obj in self.objects.items() if key not in objects]
            self.objects = objects
            self.resource_version = version
        self.lists += 1
        # What went while the watch was down shows only as an absence: say so, as client-go's
        # Replace does, so the handler hears of every deletion.
        for obj in gone:
            self.handler.changed(self.kind, Event("DELETED", obj))
        self.handler.replaced(self.kind, dict(objects))
        # A list decodes its pages whole before the transform keeps a part of each: what the
        # C heap kept of them goes back to the system.
        memory.release()
        self.synced.set()
        if not self.served:
            self.failing = False  # nothing to watch, and nothing missed
        return self.served

    def _opened(self, response: Any) -> None:
        self._response = response
        self.watches += 1
        self.failing = False
        if self._stop.is_set():  # stopped while this watch was being opened
            self._shut(response)

    def _watch(self) -> None:
        try:
            for raw in watch_events(
                self.kind,
                resource_version=self.resource_version,
                label_selector=self.label_selector,
                timeout_seconds=self.timeout_seconds,
                on_open=self._opened,
            ):
                if self._stop.is_set():
                    return
                obj = raw.get("object") or {}
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if raw.get("type") == "BOOKMARK":
                    if version:
                        self.resource_version = str(version)
                    continue
                if self.transform is not None:
                    obj = self.transform(obj)
                key = key_of(obj)
                with self._lock:
                    if raw.get("type") == "DELETED":
                        self.objects.pop(key, None)
                    else:
                        self.objects[key] = obj
                    if version:
                        self.resource_version = str(version)
                self.handler.changed(self.kind, Event(str(raw.get("type")), obj))
        finally:
            self._response = None

"""Optional persistence: the store is written to a JSON file shortly after changes and read
back on start."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from simcluster.kubelet import ContainerLogs
from simcluster.store import Store

DEBOUNCE_SECONDS = 0.5


class Persister:
    """Debounced snapshots of a Store (and the container logs, saved with the next object
    write or at stop); a burst of writes costs one file write."""

    def __init__(
        self,
        store: Store,
        path: str | Path,
        debounce: float = DEBOUNCE_SECONDS,
        *,
        logs: ContainerLogs | None = None,
    ) -> None:
        self.store = store
        self.logs = logs
        self.path = Path(path)
        self.debounce = debounce
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def load(self) -> bool:
        """Restore the store from the file; False when there is no file yet."""
        if not self.path.exists():
            return False
        data = json.loads(self.path.read_text())
        self.store.load(data)
        if self.logs is not None:
            self.logs.load(data.get("containerLogs") or {})
        return True

    def start(self) -> None:
        self.store.add_listener(lambda event_type, resource, obj: self._dirty.set())
        self._thread = threading.Thread(target=self._run, name="simcluster-persist", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._dirty.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.save()

    def save(self) -> None:
        snapshot = self.store.dump()
        if self.logs is not None:
            snapshot["containerLogs"] = self.logs.dump()
        data = json.dumps(snapshot, separators=(",", ":"))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_suffix(self.path.suffix + ".tmp")
        scratch.write_text(data)
        os.replace(scratch, self.path)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._dirty.wait()
            if self._stopping.is_set():
                return
            self._stopping.wait(self.debounce)
            self._dirty.clear()
            self.save()

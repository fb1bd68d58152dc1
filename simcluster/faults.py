"""Fault injection (errors, latency, hangs, an unreachable switch) and the request log that
tests read."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class FaultRule:
    verb: str | None
    resource: str | None
    error_rate: float
    status: int
    latency: float
    timeout: bool
    timeout_rate: float = 0.0

    def applies(self, verb: str, resource: str | None) -> bool:
        return (self.verb is None or self.verb == verb) and (
            self.resource is None
            or self.resource == resource
            or (resource or "").split(".")[0] == self.resource
        )


@dataclass(frozen=True)
class Fault:
    """What to do to one request: wait `latency` s, then hang, fail with `status`, or proceed."""

    latency: float = 0.0
    status: int | None = None
    timeout: bool = False


class FaultInjector:
    """Per (verb, resource) rules; None in a rule matches anything. Seeded for reproducible runs."""

    def __init__(self, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._rules: dict[tuple[str | None, str | None], FaultRule] = {}
        self._random = random.Random(seed)
        self._unreachable = False
        self._watch_drops = 0

    @property
    def watch_drops(self) -> int:
        return self._watch_drops

    def drop_watches(self) -> None:
        """Cut every open watch stream as a failing network would: the socket closes mid-stream,
        without the chunked body's end."""
        with self._lock:
            self._watch_drops += 1

    def set(
        self,
        verb: str | None = None,
        resource: str | None = None,
        *,
        error_rate: float = 0.0,
        status: int = 500,
        latency: float = 0.0,
        timeout: bool = False,
        timeout_rate: float = 0.0,
    ) -> None:
        """Add or replace the rule for (verb, resource); resource is a store key or a plural.
        `error_rate` of requests fail with `status`; `timeout_rate` of them (or all, with
        `timeout=True`) hang and are then dropped without an answer."""
        with self._lock:
            self._rules[(verb, resource)] = FaultRule(
                verb, resource, error_rate, status, latency, timeout, timeout_rate
            )

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self._unreachable = False

    @property
    def unreachable(self) -> bool:
        return self._unreachable

    @unreachable.setter
    def unreachable(self, value: bool) -> None:
        self._unreachable = value

    def decide(self, verb: str, resource: str | None) -> Fault:
        with self._lock:
            latency, status, timeout = 0.0, None, False
            for rule in self._rules.values():
                if not rule.applies(verb, resource):
                    continue
                latency = max(latency, rule.latency)
                timeout = (
                    timeout
                    or rule.timeout
                    or (rule.timeout_rate > 0 and self._random.random() < rule.timeout_rate)
                )
                if (
                    status is None
                    and rule.error_rate > 0
                    and self._random.random() < rule.error_rate
                ):
                    status = rule.status
            return Fault(latency=latency, status=status, timeout=timeout)


@dataclass(frozen=True)
class RequestEntry:
    verb: str
    resource: str | None
    namespace: str | None
    name: str | None
    code: int
    subresource: str | None = None
    path: str = ""


class RequestLog:
    """Thread-safe in-memory record of every request the server answered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[RequestEntry] = []

    def record(self, entry: RequestEntry) -> None:
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[RequestEntry]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def count(self, verb: str | None = None, resource: str | None = None) -> int:
        with self._lock:
            return sum(
                1
                for entry in self._entries
                if (verb is None or entry.verb == verb)
                and (
                    resource is None
                    or entry.resource == resource
                    or (entry.resource or "").split(".")[0] == resource
                )
            )

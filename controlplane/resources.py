"""One declaration per customer resource (storages, reservations, secrets, SSH keys, API keys,
webhooks): what the generic edges need to list, make and delete it, declared once in its app
(`runtime/resources.py`, `tenancy/resources.py`) and read by the dashboard's generic pages
(`dashboard/resources.py`), the API's (`controlplane/api/resources.py`) and, by the same
names, gpuctl's (`gpuctl/commands/collection.py`). What is truly a resource's own (a unit's
actions, a reservation's window, a webhook's test) stays in its own code.

The declaration speaks the API's field names: the service judges the input and reports
problems by API field, and `fields` says which form field each one is shown next to."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.errors import DomainError

Details = Mapping[str, Any]


@dataclass(frozen=True)
class Refusal:
    """How a service's refusal reads to a person: the sentence (from the error's details and
    `key`, the name of what a delete was for; None: the error's own message), and the API field
    it is about (None: the request as a whole; a callable when that depends on the details)."""

    says: Callable[[Details], str] | None = None
    field: str | Callable[[Details], str | None] | None = None

    def field_for(self, details: Details) -> str | None:
        return self.field(details) if callable(self.field) else self.field


@dataclass(frozen=True)
class Made:
    """What a create returns: the thing, whether it is new (a create may replace one of the
    same name), and a secret shown this once (an API key, a webhook's signing secret)."""

    thing: Any
    new: bool = True
    shown_once: str = ""


@dataclass(frozen=True)
class Resource:
    """A customer resource as the edges see it.

    - `name`: its address and route prefix ("ssh-key" -> /ssh-keys/, dashboard:ssh-key-list);
    - `label`, `plural`: how a sentence names one and several ("SSH key", "SSH keys");
    - `fields`: API field -> the form field its problems are shown next to;
    - `create(tenant, data)`: the service, given API-named data, returns a `Made`;
    - `delete(tenant, key)`: the service removing the one the address names;
    - `key(thing)`: what the address names it by (its name, unless said);
    - `created(made)`, `deleted(key)`: the sentences saying it was done;
    - `refusals`: each service error the person can act on, as a `Refusal` (create and
      delete); the rest show the error's own message;
    - `missing`: what a delete of one that is no longer there says.
    """

    name: str
    label: str
    plural: str
    fields: Mapping[str, str]
    create: Callable[[Any, Details], Made]
    delete: Callable[[Any, str], Any]
    created: Callable[[Made], str]
    deleted: Callable[[str], str]
    refusals: Mapping[type[DomainError], Refusal] = field(default_factory=dict)
    key: Callable[[Any], str] = lambda thing: thing.name
    missing: str = "{label} {key} was already deleted."

    def refusal(self, error: DomainError, *, key: str = "") -> tuple[str | None, str]:
        """The API field `error` is about (or None) and the sentence saying it."""
        for kind in type(error).__mro__:
            if kind in self.refusals:
                found = self.refusals[kind]
                says = found.says({**error.details, "key": key}) if found.says else error.message
                return found.field_for(error.details), says
        return None, error.message

    @property
    def title(self) -> str:
        """The label starting a sentence: "Storage", "SSH key"."""
        return self.label[:1].upper() + self.label[1:]

    def gone(self, key: str) -> str:
        return self.missing.format(label=self.title, key=key)


def units_named(details: Details) -> tuple[str, bool]:
    """The units a refusal names, as a sentence part, and whether there are several."""
    units = list(details.get("units") or [])
    return ", ".join(units), len(units) > 1

"""Validation of writes: the official strict schemas of the emulated version for built-ins,
openAPIV3Schema for CRD kinds, plus the name and field rules the real server enforces that a JSON
schema cannot express (some of which changed between versions)."""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Collection, Iterable
from functools import lru_cache
from importlib import resources as importlib_resources
from typing import Any

import jsonschema
from referencing import Registry, Resource

from dracel import CelCompileError, compile_selector
from simcluster.errors import ApiError, cause
from simcluster.features import DEFAULT_VERSION, SUPPORTED_VERSIONS, at_least
from simcluster.resources import ResourceType
from simcluster.taints import EFFECTS, OPERATORS, effects_of

_DEFS_PREFIX = "#/$defs/"

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")

SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    r"for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)

# Kinds whose names are DNS labels rather than subdomains.
_LABEL_NAMED = {"namespaces"}


def go_value(value: Any) -> str:
    """A value as Go's %#v-ish rendering in field errors: strings quoted, the rest as JSON."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def field_path(parts: Iterable[Any]) -> str:
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def schema_dir(version: str) -> str:
    """kubernetes-validate's strict schema set of an emulated minor version: the .0 release's,
    as published by that release's apiserver (`v1.35.0-local-strict`)."""
    return f"kubernetes-json-schema/v{version}.0-local-strict"


class BuiltinSchemas:
    """The official schemas of one Kubernetes version shipped with kubernetes-validate, loaded
    once and cached per kind."""

    def __init__(self, version: str = DEFAULT_VERSION) -> None:
        self.version = version
        self._directory = schema_dir(version)
        self._lock = threading.Lock()
        self._definitions: dict[str, Any] | None = None
        self._registry: Registry | None = None
        self._validators: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
        self._roots: dict[tuple[str, str], dict[str, Any]] = {}

    def _load(self, filename: str) -> Any:
        path = importlib_resources.files("kubernetes_validate").joinpath(
            f"{self._directory}/{filename}"
        )
        return json.loads(path.read_text())

    def _ensure_definitions(self) -> tuple[dict[str, Any], Registry]:
        with self._lock:
            if self._definitions is None:
                document = self._load("_definitions.json")
                self._definitions = document["$defs"]
                self._registry = Resource.from_contents(document) @ Registry()
            assert self._registry is not None
            return self._definitions, self._registry

    def definition(self, name: str) -> dict[str, Any]:
        definitions, _ = self._ensure_definitions()
        return definitions[name]

    def resolve(self, node: dict[str, Any] | None) -> dict[str, Any] | None:
        """Follow `$ref` into the shared definitions (what strategic merge needs)."""
        definitions, _ = self._ensure_definitions()
        while node and "$ref" in node:
            ref = node["$ref"]
            node = definitions.get(ref[ref.index(_DEFS_PREFIX) + len(_DEFS_PREFIX) :])
        return node

    @staticmethod
    def _filename(kind: str, api_version: str) -> str:
        group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
        return f"{kind.lower()}-{group_version}.json"

    def root(self, kind: str, api_version: str) -> dict[str, Any]:
        key = (kind, api_version)
        if key not in self._roots:
            self._roots[key] = self._load(self._filename(kind, api_version))
        return self._roots[key]

    def validator(self, kind: str, api_version: str) -> jsonschema.protocols.Validator:
        key = (kind, api_version)
        validator = self._validators.get(key)
        if validator is None:
            _, registry = self._ensure_definitions()
            schema = self.root(kind, api_version)
            registry = Resource.from_contents(schema) @ registry
            validator = jsonschema.Draft202012Validator(schema, registry=registry)
            self._validators[key] = validator
        return validator

    def metadata_validator(self) -> jsonschema.protocols.Validator:
        key = ("ObjectMeta", "meta/v1")
        validator = self._validators.get(key)
        if validator is None:
            _, registry = self._ensure_definitions()
            schema = {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$ref": "https://kubernetes.io/api/_definitions.json#/$defs/"
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            }
            validator = jsonschema.Draft202012Validator(schema, registry=registry)
            self._validators[key] = validator
        return validator


# One schema set per emulated version, each loading its files on first use: a write looks its
# validator up in two dicts (version, then kind), never builds one twice.
_SCHEMA_SETS = {version: BuiltinSchemas(version) for version in SUPPORTED_VERSIONS}


def schemas_for(version: str) -> BuiltinSchemas:
    """The official schemas of an emulated version (KeyError for one it does not have)."""
    return _SCHEMA_SETS[version]


def _schema_causes(errors: Iterable[jsonschema.ValidationError], prefix: list[Any]) -> list[dict]:
    causes: list[dict] = []
    for error in errors:
        # oneOf/anyOf failures carry the useful detail in their best sub-error.
        if error.validator in ("oneOf", "anyOf") and error.context:
            error = jsonschema.exceptions.best_match(error.context)
        path = [*prefix, *error.absolute_path]
        where = field_path(path)
        if error.validator == "additionalProperties":
            extras = sorted(set(error.instance) - set(error.schema.get("properties", {})))
            for extra in extras:
                name = field_path([*path, extra])
                causes.append(
                    cause("FieldValueForbidden", name, f'Forbidden: unknown field "{name}"')
                )
        elif error.validator == "required":
            missing = re.match(r"'([^']*)' is a required property", error.message)
            name = field_path([*path, missing.group(1)]) if missing else where
            causes.append(cause("FieldValueRequired", name, "Required value"))
        elif error.validator == "enum":
            supported = ", ".join(go_value(v) for v in error.validator_value if v is not None)
            causes.append(
                cause(
                    "FieldValueNotSupported",
                    where,
                    f"Unsupported value: {go_value(error.instance)}: supported values: {supported}",
                )
            )
        elif error.validator == "type":
            wanted = error.validator_value
            wanted = [t for t in wanted if t != "null"] if isinstance(wanted, list) else [wanted]
            causes.append(
                cause(
                    "FieldValueTypeInvalid",
                    where,
                    f"Invalid value: {go_value(error.instance)}: {where} in body must be of type "
                    f"{' or '.join(wanted)}: {go_value(error.instance)}",
                )
            )
        else:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    where,
                    f"Invalid value: {go_value(error.instance)}: {error.message}",
                )
            )
    return causes


def validate_metadata(rtype: ResourceType, obj: dict[str, Any], *, creating: bool) -> list[dict]:
    """Name, generateName and label rules shared by every kind."""
    metadata = obj.get("metadata") or {}
    causes: list[dict] = []
    name = metadata.get("name")
    if not name:
        if not (creating and metadata.get("generateName")):
            causes.append(
                cause(
                    "FieldValueRequired",
                    "metadata.name",
                    "Required value: name or generateName is required",
                )
            )
    elif rtype.key in _LABEL_NAMED:
        if len(name) > 63 or not DNS_LABEL.match(name):
            message = LABEL_MESSAGE if len(name) <= 63 else "must be no more than 63 characters"
            causes.append(
                cause(
                    "FieldValueInvalid",
                    "metadata.name",
                    f"Invalid value: {go_value(name)}: {message}",
                )
            )
    elif len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        message = SUBDOMAIN_MESSAGE if len(name) <= 253 else "must be no more than 253 characters"
        causes.append(
            cause(
                "FieldValueInvalid", "metadata.name", f"Invalid value: {go_value(name)}: {message}"
            )
        )
    for key, value in (metadata.get("labels") or {}).items():
        prefix, _, label_name = key.rpartition("/")
        if (
            not label_name
            or len(label_name) > 63
            or not _LABEL_NAME.match(label_name)
            or (prefix and not DNS_SUBDOMAIN.match(prefix))
        ):
            causes.append(
                cause(
                    "FieldValueInvalid",
                    "metadata.labels",
                    f"Invalid value: {go_value(key)}: name part must consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                    "character",
                )
            )
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(
                cause(
                    "FieldValueInvalid",
                    "metadata.labels",
                    f"Invalid value: {go_value(value)}: a valid label must be an empty string or "
                    "consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                    "with an alphanumeric character",
                )
            )
    return causes


def validate_builtin(
    rtype: ResourceType,
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    schemas: BuiltinSchemas,
) -> None:
    """Raise 422 when a built-in object breaks the strict schema of the version `schemas` are
    of, or a server-side rule of that version."""
    causes = validate_metadata(rtype, obj, creating=old is None)
    validator = schemas.validator(rtype.kind, rtype.api_version)
    causes += _schema_causes(validator.iter_errors(obj), [])
    if not causes:
        versioned = _VERSIONED_RULES.get(rtype.key)
        if versioned is not None:
            causes += versioned(obj, old, schemas.version)
        else:
            causes += _KIND_RULES.get(rtype.key, _no_rules)(obj, old)
    if causes:
        name = (obj.get("metadata") or {}).get("name") or ""
        raise ApiError.invalid(rtype.kind, name, causes, rtype.group)


def drop_unknown_fields(
    rtype: ResourceType, obj: dict[str, Any], schemas: BuiltinSchemas
) -> list[str]:
    """Remove the fields the kind's schema (of the version `schemas` are of) does not declare
    from a built-in object, as the real server's decoder drops them, and return their paths
    ("spec.foo", "spec.containers[0].bar") in document order, as a strict decode reports them."""
    validator = schemas.validator(rtype.kind, rtype.api_version)
    unknown: set[tuple[Any, ...]] = set()
    for error in validator.iter_errors(obj):
        if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
            continue
        declared = set(error.schema.get("properties", {}))
        path = tuple(error.absolute_path)
        unknown.update((*path, extra) for extra in error.instance if extra not in declared)
    if not unknown:
        return []
    dropped: list[str] = []
    _drop(obj, (), unknown, dropped)
    return dropped


def _drop(value: Any, path: tuple[Any, ...], unknown: set[tuple[Any, ...]], out: list[str]) -> None:
    if isinstance(value, dict):
        for key in list(value):
            if (*path, key) in unknown:
                del value[key]
                out.append(field_path([*path, key]))
            else:
                _drop(value[key], (*path, key), unknown, out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _drop(item, (*path, index), unknown, out)


def _no_rules(obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict]:
    return []


def _immutable(path: str, new: Any) -> dict:
    return cause("FieldValueInvalid", path, f"Invalid value: {go_value(new)}: field is immutable")


def _pod_rules(obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict]:
    spec = obj.get("spec") or {}
    causes: list[dict] = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append(cause("FieldValueRequired", "spec.containers", "Required value"))
    claim_names = {claim.get("name") for claim in spec.get("resourceClaims") or []}
    seen: set[str] = set()
    for index, container in enumerate(containers):
        where = f"spec.containers[{index}]"
        name = container.get("name", "")
        if not DNS_LABEL.match(name):
            causes.append(
                cause(
                    "FieldValueInvalid",
                    f"{where}.name",
                    f"Invalid value: {go_value(name)}: {LABEL_MESSAGE}",
                )
            )
        elif name in seen:
            causes.append(
                cause("FieldValueDuplicate", f"{where}.name", f"Duplicate value: {go_value(name)}")
            )
        seen.add(name)
        if not container.get("image"):
            causes.append(cause("FieldValueRequired", f"{where}.image", "Required value"))
        for claim_index, claim in enumerate((container.get("resources") or {}).get("claims") or []):
            if claim.get("name") not in claim_names:
                causes.append(
                    cause(
                        "FieldValueNotFound",
                        f"{where}.resources.claims[{claim_index}].name",
                        f"Not found: {go_value(claim.get('name'))}",
                    )
                )
    for index, claim in enumerate(spec.get("resourceClaims") or []):
        sources = [
            key for key in ("resourceClaimName", "resourceClaimTemplateName") if claim.get(key)
        ]
        if len(sources) != 1:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    f"spec.resourceClaims[{index}]",
                    "Invalid value: "
                    f"{go_value(claim)}: must specify one of: `resourceClaimName`, "
                    "`resourceClaimTemplateName`",
                )
            )
    if old is not None and not causes:
        causes += _pod_update_rules(spec, old.get("spec") or {})
    return causes


def _mutable_pod_view(spec: dict[str, Any]) -> dict[str, Any]:
    """The pod spec with the fields an update may change blanked out."""
    view = copy.deepcopy(spec)
    for key in (
        "activeDeadlineSeconds",
        "tolerations",
        "terminationGracePeriodSeconds",
        "nodeName",
    ):
        view.pop(key, None)
    for group in ("containers", "initContainers"):
        for container in view.get(group) or []:
            container.pop("image", None)
    return view


def _pod_update_rules(spec: dict[str, Any], old_spec: dict[str, Any]) -> list[dict]:
    if old_spec.get("nodeName") and spec.get("nodeName") != old_spec.get("nodeName"):
        return [_immutable("spec.nodeName", spec.get("nodeName"))]
    if _mutable_pod_view(spec) != _mutable_pod_view(old_spec):
        return [
            cause(
                "FieldValueForbidden",
                "spec",
                "Forbidden: pod updates may not change fields other than "
                "`spec.containers[*].image`,"
                "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)",
            )
        ]
    return []


_QUALIFIED_NAME_MESSAGE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
# A device with taints (or counters) caps its slice at 64 devices instead of 128.
MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS = 64
MAX_TOLERATIONS = 16
# Per version: taints per device (4 in 1.34, 16 from 1.35: the schemas' Device.taints
# descriptions); shared counters of a 1.34 slice, over all its sets; from 1.35, counter sets per
# slice, counters per set and counter consumptions per device (ResourceSliceMaxCounterSets,
# ResourceSliceMaxCountersPerCounterSet, ResourceSliceMaxDeviceCounterConsumptionsPerDevice in
# pkg/apis/resource/types.go, and the 1.35 schemas' descriptions).
MAX_TAINTS_PER_DEVICE_1_34 = 4
MAX_TAINTS_PER_DEVICE = 16
MAX_SHARED_COUNTERS_1_34 = 32
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_CONSUMPTIONS_PER_DEVICE = 2


def _invalid(path: str, value: Any, message: str) -> dict:
    return cause("FieldValueInvalid", path, f"Invalid value: {go_value(value)}: {message}")


def _too_many(path: str, count: int, limit: int) -> dict:
    return cause("FieldValueTooMany", path, f"Too many: {count}: must have at most {limit} items")


def _label_name_causes(name: str, path: str) -> list[dict]:
    """metav1validation.ValidateLabelName: a qualified name, `[prefix/]name`."""
    messages = []
    parts = name.split("/")
    if len(parts) > 2:
        messages.append(
            f"a qualified name {_QUALIFIED_NAME_MESSAGE} with an optional DNS subdomain prefix "
            "and '/' (e.g. 'example.com/MyName')"
        )
    else:
        if len(parts) == 2:
            prefix = parts[0]
            if not prefix:
                messages.append("prefix part must be non-empty")
            elif len(prefix) > 253:
                messages.append("prefix part must be no more than 253 characters")
            elif not DNS_SUBDOMAIN.match(prefix):
                messages.append(f"prefix part {SUBDOMAIN_MESSAGE}")
        local = parts[-1]
        if not local:
            messages.append("name part must be non-empty")
        elif len(local) > 63:
            messages.append("name part must be no more than 63 characters")
        if not _LABEL_NAME.match(local):
            messages.append(f"name part {_QUALIFIED_NAME_MESSAGE}")
    return [_invalid(path, name, message) for message in messages]


def _label_value_causes(value: str, path: str) -> list[dict]:
    messages = []
    if len(value) > 63:
        messages.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        messages.append(_LABEL_VALUE_MESSAGE)
    return [_invalid(path, value, message) for message in messages]


def _effect_not_supported(path: str, effect: Any, effects: tuple[str, ...] = EFFECTS) -> dict:
    supported = ", ".join(go_value(e) for e in effects)
    return cause(
        "FieldValueNotSupported",
        path,
        f"Unsupported value: {go_value(effect)}: supported values: {supported}",
    )


def _taint_causes(taint: dict[str, Any], path: str, version: str) -> list[dict]:
    """A device taint (in a slice or a DeviceTaintRule): a label key, a label value, and one of
    the effects the version knows (1.35 adds None)."""
    causes = _label_name_causes(str(taint.get("key") or ""), f"{path}.key")
    if taint.get("value"):
        causes += _label_value_causes(str(taint["value"]), f"{path}.value")
    effect = taint.get("effect") or ""
    effects = effects_of(version)
    if not effect:
        causes.append(cause("FieldValueRequired", f"{path}.effect", "Required value"))
    elif effect not in effects:
        causes.append(_effect_not_supported(f"{path}.effect", effect, effects))
    return causes


def _toleration_causes(toleration: dict[str, Any], path: str) -> list[dict]:
    causes = []
    if toleration.get("key"):
        causes += _label_name_causes(str(toleration["key"]), f"{path}.key")
    operator = toleration.get("operator") or ""
    value = toleration.get("value") or ""
    if operator == "Exists":
        if value:
            causes.append(_invalid(f"{path}.value", value, "must be empty for operator `Exists`"))
    elif operator == "Equal":
        causes += _label_value_causes(str(value), f"{path}.value")
    elif not operator:
        causes.append(cause("FieldValueRequired", f"{path}.operator", "Required value"))
    else:
        supported = ", ".join(go_value(o) for o in OPERATORS)
        causes.append(
            cause(
                "FieldValueNotSupported",
                f"{path}.operator",
                f"Unsupported value: {go_value(operator)}: supported values: {supported}",
            )
        )
    effect = toleration.get("effect") or ""
    if effect and effect not in EFFECTS:
        causes.append(_effect_not_supported(f"{path}.effect", effect))
    return causes


def _device_request_rules(request: dict[str, Any], where: str, *, sub: bool) -> list[dict]:
    causes: list[dict] = []
    name = request.get("name", "")
    if not DNS_LABEL.match(name):
        causes.append(
            cause(
                "FieldValueInvalid",
                f"{where}.name",
                f"Invalid value: {go_value(name)}: {LABEL_MESSAGE}",
            )
        )
    exact = request if sub else request.get("exactly")
    if not sub:
        present = [key for key in ("exactly", "firstAvailable") if request.get(key)]
        if len(present) != 1:
            causes.append(
                cause(
                    "FieldValueRequired" if not present else "FieldValueForbidden",
                    where,
                    "Required value: exactly one of `exactly` or `firstAvailable` is required"
                    if not present
                    else "Forbidden: exactly one of `exactly` or `firstAvailable` is required, "
                    "but multiple fields are set",
                )
            )
        for index, subrequest in enumerate(request.get("firstAvailable") or []):
            causes += _device_request_rules(
                subrequest, f"{where}.firstAvailable[{index}]", sub=True
            )
    if exact:
        prefix = where if sub else f"{where}.exactly"
        if not exact.get("deviceClassName"):
            causes.append(
                cause("FieldValueRequired", f"{prefix}.deviceClassName", "Required value")
            )
        elif not DNS_SUBDOMAIN.match(exact["deviceClassName"]):
            causes.append(
                cause(
                    "FieldValueInvalid",
                    f"{prefix}.deviceClassName",
                    f"Invalid value: {go_value(exact['deviceClassName'])}: {SUBDOMAIN_MESSAGE}",
                )
            )
        mode = exact.get("allocationMode", "ExactCount")
        if mode not in ("ExactCount", "All"):
            causes.append(
                cause(
                    "FieldValueNotSupported",
                    f"{prefix}.allocationMode",
                    f'Unsupported value: {go_value(mode)}: supported values: "All", "ExactCount"',
                )
            )
        count = exact.get("count")
        if mode == "ExactCount" and count is not None and count <= 0:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    f"{prefix}.count",
                    f"Invalid value: {count}: must be greater than zero",
                )
            )
        if mode == "All" and count:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    f"{prefix}.count",
                    f"Invalid value: {count}: must not be specified when allocationMode is 'All'",
                )
            )
        if len(exact.get("selectors") or []) > 32:
            causes.append(
                cause(
                    "FieldValueTooMany",
                    f"{prefix}.selectors",
                    "Too many: must have at most 32 items",
                )
            )
        for index, selector in enumerate(exact.get("selectors") or []):
            # validateSelector: a DeviceSelector's one member, cel, is required.
            if not isinstance(selector, dict) or selector.get("cel") is None:
                causes.append(
                    cause(
                        "FieldValueRequired", f"{prefix}.selectors[{index}].cel", "Required value"
                    )
                )
        tolerations = exact.get("tolerations") or []
        if len(tolerations) > MAX_TOLERATIONS:
            causes.append(_too_many(f"{prefix}.tolerations", len(tolerations), MAX_TOLERATIONS))
        for index, toleration in enumerate(tolerations):
            causes += _toleration_causes(toleration, f"{prefix}.tolerations[{index}]")
    return causes


def _resource_claim_rules(obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict]:
    spec = obj.get("spec") or {}
    if old is not None:
        if spec != (old.get("spec") or {}):
            return [_immutable("spec", spec)]
        return []
    return _claim_spec_causes(spec, "spec")


def _resource_claim_template_rules(obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict]:
    """A template's spec is immutable too; its claim spec is checked as a claim's, at
    spec.spec (validateResourceClaimTemplateSpec)."""
    spec = obj.get("spec") or {}
    if old is not None:
        if spec != (old.get("spec") or {}):
            return [_immutable("spec", spec)]
        return []
    return _claim_spec_causes(spec.get("spec") or {}, "spec.spec")


def _claim_spec_causes(spec: dict[str, Any], at: str) -> list[dict]:
    causes: list[dict] = []
    requests = (spec.get("devices") or {}).get("requests") or []
    if len(requests) > 32:
        causes.append(
            cause(
                "FieldValueTooMany",
                f"{at}.devices.requests",
                "Too many: must have at most 32 items",
            )
        )
    names: set[str] = set()
    for index, request in enumerate(requests):
        where = f"{at}.devices.requests[{index}]"
        causes += _device_request_rules(request, where, sub=False)
        if request.get("name") in names:
            causes.append(
                cause(
                    "FieldValueDuplicate",
                    f"{where}.name",
                    f"Duplicate value: {go_value(request.get('name'))}",
                )
            )
        names.add(request.get("name"))
    return causes


ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
ADMIN_ACCESS_KINDS = ("resourceclaims", "resourceclaimtemplates")


def admin_access_causes(rtype: ResourceType, obj: dict[str, Any], *, allowed: bool) -> list[dict]:
    """A Forbidden cause per request asking for adminAccess where the namespace lacks the
    label."""
    if allowed:
        return []
    spec = obj.get("spec") or {}
    at = "spec"
    if rtype.key == "resourceclaimtemplates":
        spec, at = spec.get("spec") or {}, "spec.spec"
    causes = []
    for index, request in enumerate((spec.get("devices") or {}).get("requests") or []):
        if (request.get("exactly") or {}).get("adminAccess"):
            causes.append(
                cause(
                    "FieldValueForbidden",
                    f"{at}.devices.requests[{index}].exactly.adminAccess",
                    "Forbidden: admin access to devices requires the "
                    f"`{ADMIN_ACCESS_LABEL}: true` label on the containing namespace",
                )
            )
    return causes


_SLICE_NODE_FIELDS = (
    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`"
)


def _resource_slice_rules(
    obj: dict[str, Any], old: dict[str, Any] | None, version: str
) -> list[dict]:
    spec = obj.get("spec") or {}
    causes: list[dict] = []
    selectors = [
        key
        for key in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
        if spec.get(key)
    ]
    if len(selectors) != 1:
        causes.append(
            cause(
                "FieldValueRequired" if not selectors else "FieldValueForbidden",
                "spec",
                f"Required value: {_SLICE_NODE_FIELDS} is required"
                if not selectors
                else f"Forbidden: {_SLICE_NODE_FIELDS} is required, but multiple fields are set",
            )
        )
    since_1_35 = at_least(version, "1.35")
    if since_1_35 and "sharedCounters" in spec and "devices" in spec:
        # A set field, even an empty list, as Go sees a non-nil slice.
        causes.append(_invalid("spec", "", "only one of `sharedCounters` or `devices` is allowed"))
    devices = spec.get("devices") or []
    tainted = any(d.get("taints") or d.get("consumesCounters") for d in devices)
    limit = MAX_DEVICES_WITH_TAINTS if tainted else MAX_DEVICES
    if len(devices) > limit:
        causes.append(_too_many("spec.devices", len(devices), limit))
    max_taints = MAX_TAINTS_PER_DEVICE if since_1_35 else MAX_TAINTS_PER_DEVICE_1_34
    for index, device in enumerate(devices):
        taints = device.get("taints") or []
        where = f"spec.devices[{index}].taints"
        if len(taints) > max_taints:
            causes.append(_too_many(where, len(taints), max_taints))
        for number, taint in enumerate(taints):
            causes += _taint_causes(taint, f"{where}[{number}]", version)
    counter_sets = spec.get("sharedCounters") or []
    causes += _counter_limits(counter_sets, devices) if since_1_35 else _same_slice_counters(spec)
    if (spec.get("pool") or {}).get("resourceSliceCount", 1) <= 0:
        causes.append(
            cause(
                "FieldValueInvalid",
                "spec.pool.resourceSliceCount",
                "Invalid value: must be greater than zero",
            )
        )
    if old is not None:
        old_spec = old.get("spec") or {}
        for key in ("driver", "nodeName"):
            if spec.get(key) != old_spec.get(key):
                causes.append(_immutable(f"spec.{key}", spec.get(key)))
    return causes


def _same_slice_counters(spec: dict[str, Any]) -> list[dict]:
    """1.34 (validateResourceSliceSpec of release-1.34): a device consumes counters of its own
    slice's sharedCounters only, which hold at most 32 counters over all sets. 1.35 lets a
    device draw on a set another slice of its pool publishes (k8s PR #134189, which says so
    in its release note), so the check is gone there."""
    causes: list[dict] = []
    sets = {
        counter_set.get("name"): set(counter_set.get("counters") or {})
        for counter_set in spec.get("sharedCounters") or []
    }
    total = sum(len(names) for names in sets.values())
    if total > MAX_SHARED_COUNTERS_1_34:
        causes.append(
            _invalid(
                "spec.sharedCounters",
                total,
                f"the total number of shared counters must not exceed {MAX_SHARED_COUNTERS_1_34}",
            )
        )
    for index, device in enumerate(spec.get("devices") or []):
        for number, consumption in enumerate(device.get("consumesCounters") or []):
            where = f"spec.devices[{index}].consumesCounters[{number}]"
            name = consumption.get("counterSet") or ""
            if name not in sets:
                causes.append(
                    _invalid(
                        f"{where}.counterSet",
                        name,
                        "must reference a counterSet defined in the ResourceSlice sharedCounters",
                    )
                )
                continue
            causes += [
                _invalid(
                    f"{where}.counters",
                    counter,
                    "must reference a counter defined in the ResourceSlice sharedCounters",
                )
                for counter in consumption.get("counters") or {}
                if counter not in sets[name]
            ]
    return causes


def _counter_limits(
    counter_sets: list[dict[str, Any]], devices: list[dict[str, Any]]
) -> list[dict]:
    """1.35 on: at most 8 counter sets of at most 32 counters each, at most 2 counter
    consumptions per device."""
    causes: list[dict] = []
    if len(counter_sets) > MAX_COUNTER_SETS:
        causes.append(_too_many("spec.sharedCounters", len(counter_sets), MAX_COUNTER_SETS))
    for index, counter_set in enumerate(counter_sets):
        counters = counter_set.get("counters") or {}
        if len(counters) > MAX_COUNTERS_PER_SET:
            causes.append(
                _too_many(
                    f"spec.sharedCounters[{index}].counters", len(counters), MAX_COUNTERS_PER_SET
                )
            )
    for index, device in enumerate(devices):
        consumptions = device.get("consumesCounters") or []
        if len(consumptions) > MAX_CONSUMPTIONS_PER_DEVICE:
            causes.append(
                _too_many(
                    f"spec.devices[{index}].consumesCounters",
                    len(consumptions),
                    MAX_CONSUMPTIONS_PER_DEVICE,
                )
            )
    return causes


def _device_taint_rule_rules(
    obj: dict[str, Any], old: dict[str, Any] | None, version: str
) -> list[dict]:
    """A DeviceTaintRule: a selector of driver, pool and device (in 1.34 also deviceClassName
    and CEL selectors, which 1.35 removed and its schema no longer has), each checked as where
    it comes from, and one taint."""
    spec = obj.get("spec") or {}
    causes: list[dict] = []
    selector = spec.get("deviceSelector")
    if selector is not None:
        path = "spec.deviceSelector"
        class_name = selector.get("deviceClassName")
        if class_name is not None and not (
            len(class_name) <= 253 and DNS_SUBDOMAIN.match(class_name)
        ):
            causes.append(_invalid(f"{path}.deviceClassName", class_name, SUBDOMAIN_MESSAGE))
        driver = selector.get("driver")
        if driver is not None:
            if not driver:
                causes.append(cause("FieldValueRequired", f"{path}.driver", "Required value"))
            elif len(driver) > 63:
                causes.append(
                    cause(
                        "FieldValueTooLong",
                        f"{path}.driver",
                        "Too long: may not be more than 63 bytes",
                    )
                )
            elif not DNS_SUBDOMAIN.match(driver.lower()):
                causes.append(_invalid(f"{path}.driver", driver, SUBDOMAIN_MESSAGE))
        pool = selector.get("pool")
        if pool is not None:
            if not pool:
                causes.append(cause("FieldValueRequired", f"{path}.pool", "Required value"))
            elif len(pool) > 253:
                causes.append(
                    cause(
                        "FieldValueTooLong",
                        f"{path}.pool",
                        "Too long: may not be more than 253 bytes",
                    )
                )
            else:
                causes += [
                    _invalid(f"{path}.pool", pool, SUBDOMAIN_MESSAGE)
                    for part in pool.split("/")
                    if not DNS_SUBDOMAIN.match(part)
                ]
        device = selector.get("device")
        if device is not None and not (len(device) <= 63 and DNS_LABEL.match(device)):
            causes.append(_invalid(f"{path}.device", device, LABEL_MESSAGE))
        selectors = selector.get("selectors") or []
        if len(selectors) > 32:
            causes.append(_too_many(f"{path}.selectors", len(selectors), 32))
        for index, entry in enumerate(selectors):
            where = f"{path}.selectors[{index}].cel"
            if not entry.get("cel"):
                causes.append(cause("FieldValueRequired", where, "Required value"))
                continue
            expression = entry["cel"].get("expression", "")
            try:
                compile_selector(expression)
            except CelCompileError as exc:
                detail = str(exc).removeprefix("CEL compile error: ")
                causes.append(
                    _invalid(f"{where}.expression", expression, f"compilation failed: {detail}")
                )
    causes += _taint_causes(spec.get("taint") or {}, "spec.taint", version)
    return causes


def _crd_rules(obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict]:
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    causes: list[dict] = []
    expected = f"{names.get('plural')}.{spec.get('group')}"
    if obj["metadata"].get("name") != expected:
        causes.append(
            cause(
                "FieldValueInvalid",
                "metadata.name",
                f"Invalid value: {go_value(obj['metadata'].get('name'))}: "
                'must be spec.names.plural+"."+spec.group',
            )
        )
    versions = spec.get("versions") or []
    if not versions:
        causes.append(
            cause(
                "FieldValueRequired",
                "spec.versions",
                "Required value: must have exactly one version marked as storage version",
            )
        )
    elif sum(1 for version in versions if version.get("storage")) != 1:
        causes.append(
            cause(
                "FieldValueInvalid",
                "spec.versions",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    for index, version in enumerate(versions):
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not schema:
            causes.append(
                cause(
                    "FieldValueRequired",
                    f"spec.versions[{index}].schema.openAPIV3Schema",
                    "Required value: schemas are required",
                )
            )
        elif schema.get("type") != "object" and not schema.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            causes.append(
                cause(
                    "FieldValueRequired",
                    f"spec.versions[{index}].schema.openAPIV3Schema.type",
                    "Required value: must not be empty at the root",
                )
            )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            cause(
                "FieldValueNotSupported",
                "spec.scope",
                f"Unsupported value: {go_value(spec.get('scope'))}: "
                'supported values: "Cluster", "Namespaced"',
            )
        )
    if old is not None:
        old_spec = old.get("spec") or {}
        if spec.get("scope") != old_spec.get("scope"):
            causes.append(_immutable("spec.scope", spec.get("scope")))
    return causes


_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_CONFIG_KEY_MESSAGE = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)


def _config_key_causes(obj: dict[str, Any], fields: tuple[str, ...]) -> list[dict]:
    causes = []
    for name in fields:
        for key in obj.get(name) or {}:
            if len(key) > 253 or not _CONFIG_KEY.match(key):
                causes.append(
                    cause(
                        "FieldValueInvalid",
                        f"{name}[{key}]",
                        f"Invalid value: {go_value(key)}: {_CONFIG_KEY_MESSAGE}",
                    )
                )
    return causes


def _immutable_data_causes(
    obj: dict[str, Any], old: dict[str, Any] | None, fields: tuple[str, ...]
) -> list[dict]:
    """`immutable: true` freezes the data (the message names no value: it may be a secret)."""
    if old is None or not old.get("immutable"):
        return []
    causes = [
        cause("FieldValueForbidden", name, "Forbidden: field is immutable when `immutable` is set")
        for name in fields
        if obj.get(name) != old.get(name)
    ]
    if not obj.get("immutable"):
        causes.append(
            cause(
                "FieldValueForbidden",
                "immutable",
                "Forbidden: field is immutable when `immutable` is set",
            )
        )
    return causes


def _secret_rules(obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict]:
    causes = _config_key_causes(obj, ("data",))
    if old is not None and obj.get("type") != old.get("type"):
        causes.append(_immutable("type", obj.get("type")))
    return causes + _immutable_data_causes(obj, old, ("data",))


def _config_map_rules(obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict]:
    fields = ("data", "binaryData")
    return _config_key_causes(obj, fields) + _immutable_data_causes(obj, old, fields)


def _service_rules(obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict]:
    spec = obj.get("spec") or {}
    service_type = spec.get("type", "ClusterIP")
    ports = spec.get("ports") or []
    causes: list[dict] = []
    headless = spec.get("clusterIP") == "None"
    if not ports and service_type != "ExternalName" and not headless:
        causes.append(cause("FieldValueRequired", "spec.ports", "Required value"))
    names: set[str] = set()
    for index, port in enumerate(ports):
        where = f"spec.ports[{index}]"
        name = port.get("name") or ""
        if len(ports) > 1 and not name:
            causes.append(cause("FieldValueRequired", f"{where}.name", "Required value"))
        elif name in names:
            causes.append(
                cause("FieldValueDuplicate", f"{where}.name", f"Duplicate value: {go_value(name)}")
            )
        names.add(name)
        number = port.get("port")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    f"{where}.port",
                    f"Invalid value: {go_value(number)}: must be between 1 and 65535, inclusive",
                )
            )
        if port.get("nodePort") and service_type == "ClusterIP":
            causes.append(
                cause(
                    "FieldValueForbidden",
                    f"{where}.nodePort",
                    "Forbidden: may not be used when `type` is 'ClusterIP'",
                )
            )
    return causes


def _pvc_rules(obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict]:
    spec = obj.get("spec") or {}
    causes: list[dict] = []
    if not spec.get("accessModes"):
        causes.append(
            cause(
                "FieldValueRequired",
                "spec.accessModes",
                "Required value: at least 1 access mode is required",
            )
        )
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        causes.append(cause("FieldValueRequired", "spec.resources[storage]", "Required value"))
    if old is None or causes:
        return causes
    old_spec = old.get("spec") or {}

    def frozen(value: dict[str, Any]) -> dict[str, Any]:
        view = copy.deepcopy(value)
        view.get("resources", {}).pop("requests", None)
        view.pop("volumeAttributesClassName", None)
        # The binder may fill these in on a claim that left them empty.
        for key in ("volumeName", "storageClassName"):
            if not old_spec.get(key):
                view.pop(key, None)
        return view

    if frozen(spec) != frozen(old_spec):
        causes.append(
            cause(
                "FieldValueForbidden",
                "spec",
                "Forbidden: spec is immutable after creation except resources.requests and "
                "volumeAttributesClassName for bound claims",
            )
        )
    return causes


_VOLUME_SOURCES = (
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "fc",
    "flexVolume", "flocker", "gcePersistentDisk", "glusterfs", "hostPath", "iscsi", "local",
    "nfs", "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos",
    "vsphereVolume",
)  # fmt: skip


def _pv_rules(obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict]:
    spec = obj.get("spec") or {}
    causes: list[dict] = []
    if not spec.get("accessModes"):
        causes.append(
            cause(
                "FieldValueRequired",
                "spec.accessModes",
                "Required value: must specify at least 1 access mode",
            )
        )
    if "storage" not in (spec.get("capacity") or {}):
        causes.append(cause("FieldValueRequired", "spec.capacity", "Required value"))
    sources = [key for key in _VOLUME_SOURCES if spec.get(key) is not None]
    if not sources:
        causes.append(
            cause("FieldValueRequired", "spec", "Required value: must specify a volume type")
        )
    elif len(sources) > 1:
        causes.append(
            cause(
                "FieldValueForbidden",
                f"spec.{sources[1]}",
                "Forbidden: may not specify more than 1 volume type",
            )
        )
    if old is not None and spec.get("volumeMode") != (old.get("spec") or {}).get("volumeMode"):
        causes.append(_immutable("spec.volumeMode", spec.get("volumeMode")))
    return causes


def _storage_class_rules(obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict]:
    causes: list[dict] = []
    if not obj.get("provisioner"):
        causes.append(cause("FieldValueRequired", "provisioner", "Required value"))
    if old is None:
        return causes
    for key in ("parameters", "provisioner", "reclaimPolicy", "volumeBindingMode"):
        if obj.get(key) != old.get(key):
            causes.append(
                cause("FieldValueForbidden", key, f"Forbidden: updates to {key} are forbidden.")
            )
    return causes


_KIND_RULES = {
    "pods": _pod_rules,
    "secrets": _secret_rules,
    "configmaps": _config_map_rules,
    "services": _service_rules,
    "persistentvolumeclaims": _pvc_rules,
    "persistentvolumes": _pv_rules,
    "storageclasses": _storage_class_rules,
    "resourceclaims": _resource_claim_rules,
    "resourceclaimtemplates": _resource_claim_template_rules,
    "customresourcedefinitions": _crd_rules,
}
# Rules that differ between emulated versions, given the version.
_VERSIONED_RULES = {
    "resourceslices": _resource_slice_rules,
    "devicetaintrules": _device_taint_rule_rules,
}


class CustomResourceSchema:
    """A CRD version's openAPIV3Schema: structural pruning, defaulting and validation."""

    def __init__(self, schema: dict[str, Any]):
        self.schema = schema
        body = _to_json_schema(schema)
        properties = dict(body.get("properties") or {})
        # metadata is validated as ObjectMeta, apiVersion/kind by the URL, never by the CRD.
        for key in ("metadata", "apiVersion", "kind"):
            properties.pop(key, None)
        body["properties"] = properties
        self.validator = jsonschema.Draft4Validator(body)

    def prune_and_default(self, obj: dict[str, Any]) -> list[str]:
        """Drop fields the schema does not declare, fill defaults; return the dropped paths,
        sorted as the apiserver's pruning (structuralpruning.PruneWithOptions) sorts them."""
        dropped: list[str] = []
        properties = self.schema.get("properties") or {}
        preserve = bool(self.schema.get("x-kubernetes-preserve-unknown-fields"))
        for key in list(obj):
            if key in ("apiVersion", "kind", "metadata"):
                continue
            if key in properties:
                _prune(obj[key], properties[key], [key], dropped)
            elif not preserve:
                dropped.append(key)
                del obj[key]
        _default_missing(obj, properties, skip={"apiVersion", "kind", "metadata"})
        return sorted(dropped)

    def causes(self, obj: dict[str, Any]) -> list[dict]:
        return _cr_causes(self.validator.iter_errors(obj))


def _prune(value: Any, schema: dict[str, Any], path: list[Any], dropped: list[str]) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or bool(
            schema.get("x-kubernetes-embedded-resource")
        )
        for key in list(value):
            if key in properties:
                _prune(value[key], properties[key], [*path, key], dropped)
            elif isinstance(additional, dict):
                _prune(value[key], additional, [*path, key], dropped)
            elif additional is True or preserve:
                continue
            else:
                dropped.append(field_path([*path, key]))
                del value[key]
        _default_missing(value, properties)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _prune(item, schema["items"], [*path, index], dropped)


def _default_missing(
    value: dict[str, Any], properties: dict[str, Any], skip: Collection[str] = ()
) -> None:
    for key, child in properties.items():
        if key not in value and key not in skip and "default" in child:
            value[key] = copy.deepcopy(child["default"])


_SCHEMA_KEYWORDS = (
    "type",
    "required",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "multipleOf",
    "minProperties",
    "maxProperties",
)


def _to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI v3.0 (as CRDs use it) to draft-4 JSON schema: nullable, int-or-string."""
    out: dict[str, Any] = {key: node[key] for key in _SCHEMA_KEYWORDS if key in node}
    if "properties" in node:
        out["properties"] = {
            key: _to_json_schema(child) for key, child in node["properties"].items()
        }
    if isinstance(node.get("items"), dict):
        out["items"] = _to_json_schema(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _to_json_schema(node["additionalProperties"])
    for combinator in ("allOf", "anyOf", "oneOf"):
        if combinator in node:
            out[combinator] = [_to_json_schema(child) for child in node[combinator]]
    if "not" in node:
        out["not"] = _to_json_schema(node["not"])
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def _cr_causes(errors: Iterable[jsonschema.ValidationError]) -> list[dict]:
    causes = []
    for error in errors:
        where = field_path(error.absolute_path)
        value = go_value(error.instance)
        if error.validator == "required":
            missing = re.match(r"'([^']*)' is a required property", error.message)
            name = field_path([*error.absolute_path, missing.group(1)]) if missing else where
            causes.append(cause("FieldValueRequired", name, "Required value"))
        elif error.validator == "type":
            wanted = error.validator_value
            wanted = [t for t in wanted if t != "null"] if isinstance(wanted, list) else [wanted]
            causes.append(
                cause(
                    "FieldValueTypeInvalid",
                    where,
                    f"Invalid value: {value}: {where} in body must be of type "
                    f"{' or '.join(wanted)}: {value}",
                )
            )
        elif error.validator == "enum":
            supported = ", ".join(go_value(v) for v in error.validator_value if v is not None)
            causes.append(
                cause(
                    "FieldValueNotSupported",
                    where,
                    f"Unsupported value: {value}: supported values: {supported}",
                )
            )
        elif error.validator in ("minimum", "maximum"):
            relation = "greater" if error.validator == "minimum" else "less"
            causes.append(
                cause(
                    "FieldValueInvalid",
                    where,
                    f"Invalid value: {value}: {where} in body should be {relation} than or "
                    f"equal to {error.validator_value}",
                )
            )
        elif error.validator == "pattern":
            causes.append(
                cause(
                    "FieldValueInvalid",
                    where,
                    f"Invalid value: {value}: {where} in body should match "
                    f"'{error.validator_value}'",
                )
            )
        elif error.validator in ("maxLength", "maxItems", "maxProperties"):
            causes.append(
                cause(
                    "FieldValueTooLong" if error.validator == "maxLength" else "FieldValueTooMany",
                    where,
                    f"Too long: may not be more than {error.validator_value}",
                )
            )
        else:
            causes.append(
                cause("FieldValueInvalid", where, f"Invalid value: {value}: {error.message}")
            )
    return causes


@lru_cache(maxsize=256)
def _compiled(schema_json: str) -> CustomResourceSchema:
    return CustomResourceSchema(json.loads(schema_json))


def custom_resource_schema(version: dict[str, Any]) -> CustomResourceSchema | None:
    """The compiled schema of a CRD version entry, cached by the schema's content."""
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    if not schema:
        return None
    return _compiled(json.dumps(schema, sort_keys=True))


def validate_custom(
    rtype: ResourceType, obj: dict[str, Any], *, creating: bool, schemas: BuiltinSchemas
) -> None:
    """Prune unknown fields, default, then validate (metadata as the ObjectMeta of the version
    `schemas` are of). What fieldValidation makes of the unknown fields the server has decided
    before (drop_unknown_custom_fields)."""
    assert rtype.crd is not None
    name = (obj.get("metadata") or {}).get("name") or ""
    causes = validate_metadata(rtype, obj, creating=creating)
    causes += _schema_causes(
        schemas.metadata_validator().iter_errors(obj.get("metadata") or {}), ["metadata"]
    )
    compiled = custom_resource_schema(rtype.crd)
    if compiled is not None:
        compiled.prune_and_default(obj)
        causes += compiled.causes(obj)
    if causes:
        raise ApiError.invalid(rtype.kind, name, causes, rtype.group)


def drop_unknown_custom_fields(
    rtype: ResourceType, obj: dict[str, Any], schemas: BuiltinSchemas
) -> list[str]:
    """Remove from a custom object what its decoder drops, and return the paths as a strict
    decode reports them: unknown metadata fields first (ObjectMeta of the version `schemas`
    are of), then the fields the CRD's schema prunes, sorted (the CRD handler's
    unstructuredSchemaCoercer.apply)."""
    assert rtype.crd is not None
    dropped = []
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        dropped = [f"metadata.{path}" for path in _drop_undeclared(metadata, schemas)]
    compiled = custom_resource_schema(rtype.crd)
    if compiled is not None:
        dropped += compiled.prune_and_default(obj)
    return dropped


def _drop_undeclared(metadata: dict[str, Any], schemas: BuiltinSchemas) -> list[str]:
    unknown: set[tuple[Any, ...]] = set()
    for error in schemas.metadata_validator().iter_errors(metadata):
        if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
            continue
        declared = set(error.schema.get("properties", {}))
        path = tuple(error.absolute_path)
        unknown.update((*path, extra) for extra in error.instance if extra not in declared)
    dropped: list[str] = []
    if unknown:
        _drop(metadata, (), unknown, dropped)
    return dropped


_OBJECT_META_REF = {"$ref": f"{_DEFS_PREFIX}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}


def undeclared_apply_fields(
    rtype: ResourceType, patch: dict[str, Any], schemas: BuiltinSchemas
) -> list[str]:
    """The fields of a server-side apply patch its kind's schema does not declare, as
    structured-merge-diff prints their paths (`.spec.foo`, `.spec.containers[name="main"].x`):
    the field manager types the patch against the schema before anything else, and a field it
    cannot place is an error whatever fieldValidation says (structuredMergeManager.Apply in
    k8s.io/apimachinery/pkg/util/managedfields/internal/structuredmerge.go). Built-ins are
    typed by the version's schemas, custom objects by their CRD's (with ObjectMeta for
    metadata and x-kubernetes-preserve-unknown-fields honoured)."""
    found: list[str] = []
    if rtype.crd is None:
        _undeclared(patch, schemas.root(rtype.kind, rtype.api_version), "", schemas, found)
        return found
    root = (rtype.crd.get("schema") or {}).get("openAPIV3Schema") or {}
    properties = root.get("properties") or {}
    for key, value in patch.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata":
            _undeclared(value, _OBJECT_META_REF, ".metadata", schemas, found)
        elif key in properties:
            _undeclared(value, properties[key], f".{key}", schemas, found)
        elif not root.get("x-kubernetes-preserve-unknown-fields"):
            found.append(f".{key}")
    return found


def _undeclared(
    value: Any, schema: dict[str, Any], path: str, schemas: BuiltinSchemas, found: list[str]
) -> None:
    node = schemas.resolve(schema) or {}
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        properties = node.get("properties")
        additional = node.get("additionalProperties")
        embedded = node.get("x-kubernetes-embedded-resource")
        for key, child in value.items():
            if properties is not None and key in properties:
                _undeclared(child, properties[key], f"{path}.{key}", schemas, found)
            elif isinstance(additional, dict):
                _undeclared(child, additional, f"{path}.{key}", schemas, found)
            elif embedded and key in ("apiVersion", "kind", "metadata"):
                continue
            elif properties is not None and additional is not True:
                found.append(f"{path}.{key}")
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for index, item in enumerate(value):
            _undeclared(
                item, node["items"], path + _list_element(node, item, index), schemas, found
            )


def _list_element(node: dict[str, Any], item: Any, index: int) -> str:
    """An element's path segment: `[name="main"]` in a map list (its keys sorted by name, as
    fieldpath.PathElement prints them), `[=value]` in a set, `[0]` otherwise."""
    kind = node.get("x-kubernetes-list-type")
    if kind == "map" and isinstance(item, dict):
        keys = sorted(k for k in node.get("x-kubernetes-list-map-keys") or () if k in item)
        rendered = ",".join(f"{k}={json.dumps(item[k], separators=(',', ':'))}" for k in keys)
        return f"[{rendered}]"
    if kind == "set":
        return f"[={json.dumps(item, separators=(',', ':'))}]"
    return f"[{index}]"

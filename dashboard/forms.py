"""Dashboard forms: the units filter, the order form and the edit form (which validate like
the API), and the forms of the tenant's resources (SSH keys, storages, reservations, secrets,
API keys, webhooks), whose services judge them."""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from django import forms
from django.conf import settings
from django.db.models import QuerySet
from django.utils.datastructures import MultiValueDict

from controlplane.validation import fold_case, format_duration
from dashboard import money
from dashboard.queries import ALL_PHASES, PackageRow
from runtime import actions, stopafter
from runtime.api.serializers import CreateUnitSerializer
from runtime.models import GPUUnit, StorageAccessMode, UnitPhase
from runtime.validation import (
    MAX_ITEMS,
    MAX_MOUNTS,
    MAX_PORTS,
    MAX_STRING,
    RESERVATION_NAME_MAX,
    SECRET_NAME_MAX,
    STORAGE_NAME_MAX,
    UNIT_NAME_MAX,
    secret_name,
)
from tenancy.models import Tenant
from tenancy.webhooks import ALL_EVENTS, EVENT_TYPES

# The API's field paths -> the order form's fields, so the API's messages land next to the
# right field; a path not listed is looked up by its parent (access.primaryPort -> access:
# the primary port is the first listed, so it is about what was typed in the ports field).
API_FIELDS = {
    "name": "name",
    "packageID": "package",
    "region": "region",
    "interruptible": "interruptible",
    "autoResume": "auto_resume",
    "reservation": "reservation",
    "image": "image",
    "access.scheme": "scheme",
    "access": "ports",
    "template.ports": "ports",
    "template.command": "command",
    "template.args": "args",
    "template.env": "env",
    "stopAfter": "stop_after",
    "storageMounts": "storage_mounts",
    "ssh": "ssh",
}
DASHBOARD_OPERATION_ID = re.compile(r"^dash-[0-9a-f]{32}$")
# Ports are listed one a line (the edit form), or comma-separated on one (the order form).
ENTRY_SEPARATOR = re.compile(r"[,\n]")
SCHEME_CHOICES = [
    ("http", "http: a web address"),
    ("https", "https: a web address; the container serves TLS itself"),
    ("tcp", "tcp: a host and port, for SSH, databases and other protocols"),
]
# One entry of the ports field: `name:port` or `name:port/UDP`.
PORT_ENTRY = re.compile(r"^([^\s:/]+)\s*:\s*(\d{1,9})\s*(?:/\s*([A-Za-z]+))?$")
# One entry of the storage mounts field: `name:/path` or `name:/path:ro` (a mount path has no
# ':', the API refuses one).
MOUNT_ENTRY = re.compile(r"^([^\s:]+)\s*:\s*([^:]+?)\s*(?::\s*(ro|rw))?$", re.IGNORECASE)

Declared = TypeVar("Declared", bound=forms.Field)


def new_operation_id() -> str:
    return f"dash-{uuid.uuid4().hex}"


def parse_ports(text: str) -> list[dict]:
    """`http:8080, metrics:9100/UDP` (or one a line) as template.ports. Only the syntax is
    checked here; names, numbers and duplicates are the API's validation's to judge, so both
    say the same."""
    ports = []
    for entry in (part.strip() for part in ENTRY_SEPARATOR.split(text)):
        if not entry:
            continue
        match = PORT_ENTRY.fullmatch(entry)
        if match is None:
            raise forms.ValidationError(
                f"“{entry}” is not a port: write each as name:number, or name:number/UDP for "
                "UDP, e.g. http:8080, metrics:9100/UDP."
            )
        name, number, protocol = match.groups()
        ports.append({"name": name, "port": int(number), "protocol": (protocol or "TCP").upper()})
    return ports


def parse_mounts(text: str) -> list[dict]:
    """`model-cache:/data, datasets:/datasets:ro` as storageMounts. Only the syntax is checked
    here; the API's validation and the order judge names, paths and the storages."""
    mounts = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        match = MOUNT_ENTRY.fullmatch(entry)
        if match is None:
            raise forms.ValidationError(
                f"“{entry}” is not a mount: write each as storage:/path, or storage:/path:ro "
                "to mount it read-only, e.g. model-cache:/data, datasets:/datasets:ro."
            )
        name, path, mode = match.groups()
        mounts.append({"name": name, "mountPath": path, "readOnly": (mode or "").lower() == "ro"})
    return mounts


def port_text(port: dict) -> str:
    protocol = port.get("protocol", "TCP")
    return f"{port['name']}:{port['port']}{'' if protocol == 'TCP' else '/' + protocol}"


def parse_env(text: str) -> list[dict]:
    """`NAME=value` lines as template.env; the value is everything after the first '=', as
    typed. Names and duplicates are the API's validation's to judge."""
    env = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        if not equals:
            raise forms.ValidationError(
                f"“{line.strip()}” is not NAME=value: write one variable a line, e.g. "
                "HF_HOME=/data/cache."
            )
        if reference := SECRET_REFERENCE.fullmatch(value.strip()):
            secret_ref = {"name": reference["name"], "key": reference["key"]}
            env.append({"name": name.strip(), "secretRef": secret_ref})
        else:
            env.append({"name": name.strip(), "value": value})
    return env


# NAME=${secret:<secret>/<key>} reads a key of one of the tenant's secrets (template.env's
# secretRef): the form shows and takes references, never a secret's value.
SECRET_REFERENCE = re.compile(r"\$\{secret:(?P<name>[^/}]*)/(?P<key>[^}]*)\}")


def env_text(env: list[dict]) -> str:
    return "\n".join(
        f"{entry['name']}=${{secret:{entry['secretRef']['name']}/{entry['secretRef']['key']}}}"
        if "secretRef" in entry
        else f"{entry['name']}={entry.get('value', '')}"
        for entry in env
    )


def parse_command(text: str) -> list[str]:
    """A command line as the container's command, split as a POSIX shell splits words (quotes
    keep spaces; nothing is expanded)."""
    try:
        return shlex.split(text)
    except ValueError as error:
        raise forms.ValidationError(
            f"The command cannot be split into words ({error}): close the quote, or escape "
            "it with a backslash."
        ) from None


def mount_text(mount: dict) -> str:
    return f"{mount['name']}:{mount['mountPath']}{':ro' if mount['readOnly'] else ''}"


def split_path(path: str) -> tuple[str, int | None]:
    """An API field path's field and the index of the list item it is about:
    `template.ports[1].name` -> (`template.ports`, 1); `image` -> (`image`, None)."""
    field, _, rest = path.partition("[")
    index = rest.partition("]")[0]
    return field, int(index) if index.isdigit() else None


def form_field(path: str, fields: dict[str, str]) -> tuple[str | None, int | None]:
    """The form field an API field path is about (its own entry in `fields`, else its
    parent's), and the index of the item; None for what the form has no field for."""
    field, index = split_path(path)
    while field:
        if field in fields:
            return fields[field], index
        field = field.rpartition(".")[0]
    return None, index


def about_item(
    message: str, index: int | None, typed: list[Any], text: Callable[[Any], str]
) -> str:
    """A problem's message, saying which of the items typed (`text` of one) it is about."""
    if index is not None and index < len(typed):
        shown = text(typed[index])
        return message if shown in message else f"{shown}: {message}"
    return message


def declared(form: forms.BaseForm, name: str, kind: type[Declared]) -> Declared:
    """The form's field `name`, as the kind of field the form declares it (its choices or
    queryset are set per form)."""
    field = form.fields[name]
    if not isinstance(field, kind):
        raise TypeError(f"{name} is a {type(field).__name__}, not a {kind.__name__}.")
    return field


class KeyNamesField(forms.MultipleChoiceField):
    """The tenant's keys to tick. A name not offered (a key deleted since the form was shown)
    goes on to the order, which says which key the tenant no longer has, as the API does."""

    def valid_value(self, value: str) -> bool:
        return True


class SummarisedForm(forms.Form):
    """A form whose errors the page sums up above it (templates/dashboard/_error_summary.html)."""

    def error_links(self) -> list[tuple[str, str]]:
        """(element id, what to fix) for each field with an error: the summary points at each
        problem, whose message is shown once, next to the field."""
        return [
            (bound.id_for_label, str(bound.label))
            for bound in self.visible_fields()
            if bound.errors
        ]

    def place(self, problems: Mapping[str, Any], fields: Mapping[str, str]) -> None:
        """Put a service's problems, keyed by API field path, next to the form fields `fields`
        maps them to (the rest above the form); a path below a field (`data.HF_TOKEN`) is
        named in its message."""
        for path, messages in problems.items():
            top, _, below = path.partition(".")
            field = fields.get(top)
            if field not in self.fields:
                field, below = None, path
            for message in messages if isinstance(messages, list) else [messages]:
                self.add_error(field, f"{below}: {message}" if below else message)

    def set_value(self, name: str, value: str) -> None:
        """Show `value` in the field `name` when the form is shown again (the data it was
        bound to, request.POST, cannot be changed in place)."""
        data = self.data.copy() if isinstance(self.data, MultiValueDict) else dict(self.data)
        data[name] = value
        self.data = data


class UnitFilterForm(forms.Form):
    phase = forms.ChoiceField(required=False)
    package = forms.ChoiceField(required=False)
    tenant = forms.ChoiceField(required=False)

    def __init__(
        self,
        *args: Any,
        package_ids: list[str],
        tenant_slugs: list[str] | None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        declared(self, "phase", forms.ChoiceField).choices = [
            ("", "Every phase but Terminated"),
            (ALL_PHASES, "Every phase, Terminated too"),
            *UnitPhase.choices,
        ]
        declared(self, "package", forms.ChoiceField).choices = [("", "All packages")] + [
            (p, p) for p in package_ids
        ]
        if tenant_slugs is None:
            del self.fields["tenant"]
        else:
            declared(self, "tenant", forms.ChoiceField).choices = [("", "All tenants")] + [
                (s, s) for s in tenant_slugs
            ]


class PackageOption:
    """A package choice: reads as one line of text, and gives the template its parts."""

    def __init__(self, row: PackageRow) -> None:
        self.row = row
        package = row.package
        self.contract = f"{row.gpu_text}, {package.cpu} CPU, {package.memory} memory"
        currency = settings.BILLING_CURRENCY
        self.price = f"{money.display(package.price, currency)} an hour on demand"
        if package.interruptible:
            self.price += f", {money.display(package.interruptible_price, currency)} interruptible"
        if row.placeable_now:
            self.room = f"{row.placeable_now} can start now"
        elif row.reason:
            self.room = f"none can start now: {row.reason}"
        else:
            self.room = "none can start now"

    def __str__(self) -> str:
        return f"{self.row.package.id} — {self.contract} — {self.price} — {self.room}"


def command_field() -> forms.CharField:
    """What the container runs, as one line (the order and the edit form)."""
    return forms.CharField(
        required=False,
        max_length=MAX_STRING,
        help_text=(
            "Optional: replaces the image's entrypoint, split into words as a shell would "
            "(quotes keep spaces together; nothing is expanded), e.g. python -m http.server "
            "8080. Empty: the image's own."
        ),
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )


def env_field() -> forms.CharField:
    return forms.CharField(
        label="Environment",
        required=False,
        strip=False,
        max_length=MAX_ITEMS * MAX_STRING,
        help_text=(
            f"Optional: one NAME=value a line, e.g. HF_HOME=/data/cache, or a key of one of "
            f"your secrets, e.g. HF_TOKEN=${{secret:hf/token}}. At most {MAX_ITEMS}."
        ),
        widget=forms.Textarea(
            attrs={"rows": 4, "autocomplete": "off", "spellcheck": "false", "wrap": "off"}
        ),
    )


def stop_after_field() -> forms.CharField:
    return forms.CharField(
        label="Auto-stop after",
        required=False,
        max_length=16,
        help_text=(
            "Optional: the unit stops by itself this long after each start, e.g. 45m, 8h, "
            "1h30m or 7d; empty: it runs until stopped."
        ),
        # No placeholder: a grey "8h" in an empty field reads as a limit the unit has.
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )


class UnitForm(SummarisedForm):
    """What the order and the edit form read alike: the operationID made when the form was
    shown (a forged or missing one gets a fresh one), and a command line, environment lines
    and port entries as the API's template parts."""

    def clean_operation_id(self) -> str:
        value = self.cleaned_data.get("operation_id") or ""
        return value if DASHBOARD_OPERATION_ID.match(value) else new_operation_id()

    def clean_command(self) -> list[str]:
        return parse_command(self.cleaned_data.get("command") or "")

    def clean_env(self) -> list[dict]:
        return parse_env(self.cleaned_data.get("env") or "")

    def clean_ports(self) -> list[dict]:
        return parse_ports(self.cleaned_data.get("ports") or "")


class UnitCreateForm(UnitForm):
    """A unit order. The operationID is made when the form is shown and travels in a hidden
    field, so a double submit replays the same order instead of placing a second one."""

    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.none(),
        empty_label="Choose a tenant",
        help_text="Staff order on behalf of this tenant; it uses the tenant's quota.",
    )
    package = forms.ChoiceField(
        widget=forms.RadioSelect,
        help_text=(
            "What the unit gets. Availability is as of the last inventory sync; a unit that "
            "cannot start yet waits as Pending."
        ),
    )
    region = forms.ChoiceField(
        required=False,
        help_text="Where the unit runs; any region: wherever the package has room. A unit "
        "stays in its region for good.",
    )
    interruptible = forms.BooleanField(
        label="Interruptible",
        required=False,
        help_text="Cheaper, for a package sold as interruptible (the Packages page shows its "
        "interruptible price): runs on free capacity and may be taken back, with the "
        "package's notice, when an on-demand unit needs its GPUs.",
    )
    auto_resume = forms.BooleanField(
        label="Start it again after a preemption",
        required=False,
        help_text="For an interruptible unit: once its GPUs were taken back, the control plane "
        "starts it again when its package fits again.",
    )
    reservation = forms.CharField(
        required=False,
        max_length=RESERVATION_NAME_MAX,
        help_text="Optional: the name of an active reservation of yours for this package (the "
        "Reservations page): the unit runs on GPUs it holds.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    name = forms.CharField(
        max_length=UNIT_NAME_MAX,
        help_text=(
            f"Lower-case letters, digits and '-', at most {UNIT_NAME_MAX} characters; "
            "unique among your live units."
        ),
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    image = forms.CharField(
        max_length=512,
        help_text='Container image, e.g. "python:3.12" or "ghcr.io/org/app:1.0".',
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    command = command_field()
    args = forms.CharField(
        label="Arguments",
        required=False,
        max_length=MAX_STRING,
        help_text=(
            "Optional: arguments to the command, or to the image's own entrypoint when there is "
            "no command, split as a shell would, e.g. --port 8080."
        ),
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    env = env_field()
    ports = forms.CharField(
        required=False,
        max_length=1024,
        help_text=(
            "Optional: ports the container listens on, as name:number, comma-separated; "
            "/UDP after a number for UDP, e.g. http:8080, metrics:9100/UDP. The first is the "
            f"primary port, reached at the unit's URL; the others inside the cluster. At most "
            f"{MAX_PORTS}."
        ),
        widget=forms.TextInput(
            attrs={"autocomplete": "off", "spellcheck": "false", "placeholder": "http:8080"}
        ),
    )
    scheme = forms.ChoiceField(
        label="Primary port's scheme",
        choices=SCHEME_CHOICES,
        initial="http",
        required=False,  # http when not sent, as the API defaults it
        help_text="How the primary port is reached; used only when there are ports.",
    )
    storage_mounts = forms.CharField(
        label="Storage mounts",
        required=False,
        max_length=4096,
        help_text=(
            "Optional: storages to mount, as storage:/path, comma-separated; :ro after a path "
            "mounts it read-only, e.g. model-cache:/data, datasets:/datasets:ro. The data "
            f"outlives the unit. At most {MAX_MOUNTS}."
        ),
        widget=forms.TextInput(
            attrs={"autocomplete": "off", "spellcheck": "false", "placeholder": "model-cache:/data"}
        ),
    )
    ssh = forms.BooleanField(
        label="Enable SSH with my registered keys",
        required=False,
        help_text=(
            "Log in to the unit with ssh, where its GPUs and storage are; the unit page shows "
            "the command."
        ),
    )
    ssh_keys = KeyNamesField(
        label="Keys to let in",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every key registered now.",
    )
    stop_after = stop_after_field()
    operation_id = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(
        self,
        *args: Any,
        packages: list[PackageRow],
        regions: list[str],
        tenants: QuerySet[Tenant] | None = None,
        storage_names: list[str] | None = None,
        ssh_key_names: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        declared(self, "package", forms.ChoiceField).choices = [
            (row.package.id, PackageOption(row)) for row in packages
        ]
        declared(self, "region", forms.ChoiceField).choices = [("", "Any region")] + [
            (name, name) for name in regions
        ]
        self.offered = [row.package.id for row in packages]  # in the order the choices show
        field = self.fields["storage_mounts"]
        if storage_names:
            field.help_text += f" Your storages: {', '.join(storage_names)}."
        elif storage_names is not None:
            field.help_text += " You have no storage to mount yet: create one on the Storage page."
        # None: the tenant is not known yet (staff pick it in the form); the order gives
        # the unit all the tenant's keys, and refuses when it has none.
        self.ssh_key_names = ssh_key_names
        if ssh_key_names:
            declared(self, "ssh_keys", KeyNamesField).choices = [
                (name, name) for name in ssh_key_names
            ]
        else:
            del self.fields["ssh_keys"]
        if tenants is None:
            del self.fields["tenant"]
        else:
            declared(self, "tenant", forms.ModelChoiceField).queryset = tenants

    @property
    def failed_package(self) -> str:
        """The chosen package when the package's error is about it (its quota, its being
        withdrawn), so the page marks that package alone; "" when none of those offered was
        chosen, and the error is about the choice as a whole."""
        if not self.is_bound or "package" not in self.errors:
            return ""
        chosen = self.data.get("package", "")
        return chosen if chosen in self.offered else ""

    def error_links(self) -> list[tuple[str, str]]:
        """(element id, what to fix) for each field with an error, for the summary above the
        form: it points at each problem, whose message is shown once, next to the field."""
        links = []
        for bound in self.visible_fields():
            if not bound.errors:
                continue
            if bound.name == "package" and self.failed_package:
                index = self.offered.index(self.failed_package)
                links.append((f"{bound.auto_id}_{index}", f"Package {self.failed_package}"))
            elif bound.name == "package":
                links.append((f"{bound.auto_id}_0", str(bound.label)))
            elif bound.name == "ssh_keys":
                links.append((f"{bound.auto_id}_0", "SSH keys to let in"))
            else:
                links.append((bound.id_for_label, str(bound.label)))
        return links

    def clean_args(self) -> list[str]:
        return parse_command(self.cleaned_data.get("args") or "")

    def clean_storage_mounts(self) -> list[dict]:
        return parse_mounts(self.cleaned_data.get("storage_mounts") or "")

    def clean_ssh_keys(self) -> list[str]:
        keys = self.cleaned_data.get("ssh_keys") or []
        if keys and not self.cleaned_data.get("ssh"):
            raise forms.ValidationError(
                "Tick “Enable SSH with my registered keys” to let these keys in, or untick them."
            )
        return keys

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        # The API's own input rules, so the browser and the API accept exactly the same orders;
        # judged even when a field could not be read (it is left out, and the rules' word on
        # it dropped), so every problem is told at once.
        unreadable = set(self.errors)
        order: dict[str, Any] = {
            "operationID": cleaned["operation_id"],
            "name": cleaned.get("name") or "x",
            "packageID": cleaned.get("package") or "x",
            "image": cleaned.get("image") or "x",
        }
        if cleaned.get("region"):
            order["region"] = cleaned["region"]
        if cleaned.get("interruptible"):
            order["interruptible"] = True
        if cleaned.get("auto_resume"):
            order["autoResume"] = True
        if cleaned.get("reservation"):
            order["reservation"] = cleaned["reservation"]
        parts = ("command", "args", "env", "ports")
        template = {key: cleaned[key] for key in parts if cleaned.get(key)}
        if template:
            order["template"] = template
        if cleaned.get("ports"):
            order["access"] = {"scheme": cleaned.get("scheme") or "http"}
        if cleaned.get("storage_mounts"):
            order["storageMounts"] = cleaned["storage_mounts"]
        if cleaned.get("ssh"):
            order["ssh"] = {"enabled": True, "keys": cleaned.get("ssh_keys") or None}
        if cleaned.get("stop_after"):
            order["stopAfter"] = cleaned["stop_after"]
        serializer = CreateUnitSerializer(data=order)
        if not serializer.is_valid():
            problems = {path: list(map(str, m)) for path, m in serializer.errors.items()}
            self.report(problems, skip=unreadable)
            return cleaned
        if self.errors:
            return cleaned
        cleaned["name"] = serializer.validated_data["name"]
        cleaned["package"] = serializer.validated_data["packageID"]
        cleaned["image"] = serializer.validated_data["image"]
        cleaned["region"] = serializer.validated_data.get("region", "")
        cleaned["interruptible"] = serializer.validated_data.get("interruptible", False)
        cleaned["auto_resume"] = serializer.validated_data.get("autoResume", False)
        cleaned["reservation"] = serializer.validated_data.get("reservation", "")
        cleaned["template"] = serializer.validated_data.get("template") or {}
        cleaned["access"] = serializer.validated_data.get("access") or {}
        cleaned["stop_after"] = serializer.validated_data.get("stopAfter")
        # Normalised and in the API's order, which the order service's problems index.
        cleaned["storage_mounts"] = serializer.validated_data.get("storageMounts") or []
        # {} when off; keys None for all the tenant's, resolved by the order.
        cleaned["ssh"] = serializer.validated_data.get("ssh") or {}
        return cleaned

    def report(self, problems: dict[str, list[str]], *, skip: Collection[str] = ()) -> None:
        """Put the problems the API's rules or the order service found, keyed by API field
        path, next to the fields they are about (the form as a whole when none is); not on a
        field in `skip`, which could not be read and says so already."""
        # add_error drops the field's value.
        ports = self.cleaned_data.get("ports") or []
        env = self.cleaned_data.get("env") or []
        mounts = self.cleaned_data.get("storage_mounts") or []
        keys = self.cleaned_data.get("ssh_keys") or []
        for path, messages in problems.items():
            field, index = form_field(path, API_FIELDS)
            if field in skip or (field is None and skip):
                continue
            for message in messages:
                if field == "env":
                    message = about_item(message, index, env, env_line)
                elif field == "ports":
                    message = about_item(message, index, ports, port_text)
                elif field == "storage_mounts":
                    message = about_item(message, index, mounts, mount_text)
                elif field == "ssh":
                    message = about_item(message, index, keys, str)
                self.add_error(field if field in self.fields else None, message)


# The API's field paths -> the edit form's fields.
EDIT_FIELDS = {
    "image": "image",
    "template.command": "command",
    "template.env": "env",
    "template.ports": "ports",
    "access.scheme": "scheme",
    "access": "ports",
    "stopAfter": "stop_after",
}


def env_line(variable: dict) -> str:
    return f"{variable['name'] or '(no name)'}=…"


class UnitEditForm(UnitForm):
    """A change to a unit's image, command, environment, ports and auto-stop. The form only
    reads what was typed: `patch()` is the change as a PATCH would send it, and
    actions.update_unit, the API's own update, judges and applies it. The unit's etag as shown
    and an operationID made when the form is shown travel in hidden fields: a unit changed
    meanwhile is refused rather than overwritten, and a double submit replays the update."""

    image = forms.CharField(
        max_length=512,
        help_text='Container image, e.g. "python:3.12" or "ghcr.io/org/app:1.0".',
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    command = command_field()
    env = env_field()
    ports = forms.CharField(
        required=False,
        max_length=1024,
        help_text=(
            "Optional: ports the container listens on, one name:number a line; /UDP after a "
            "number for UDP, e.g. http:8080 then metrics:9100/UDP. The first is the primary "
            f"port, reached at the unit's URL, unless the unit names another. At most "
            f"{MAX_PORTS}."
        ),
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"}),
    )
    scheme = forms.ChoiceField(
        label="Primary port's scheme",
        choices=SCHEME_CHOICES,
        required=False,
        help_text="How the primary port is reached; used only when there are ports.",
    )
    stop_after = stop_after_field()
    etag = forms.CharField(widget=forms.HiddenInput, max_length=64)
    operation_id = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, unit: GPUUnit, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unit = unit
        args_kept = (unit.template or {}).get("args") or []
        if args_kept:
            self.fields[
                "command"
            ].help_text += f" The image's arguments stay as they are: {shlex.join(args_kept)}."
        limit, who = stopafter.stop_after_limit(unit.tenant, unit.package_id)
        if limit is not None:
            self.fields["stop_after"].help_text = (
                "The unit stops by itself this long after each start, e.g. 45m, 8h or 1h30m: "
                f"at most {format_duration(limit)}, the maximum set for {who}, which also "
                "applies when this is empty."
            )

    @staticmethod
    def initial_for(unit: GPUUnit) -> dict:
        """The form filled in with the unit as it is now, a fresh operationID and its etag."""
        template = unit.template or {}
        return {
            "image": unit.image,
            "command": shlex.join(template.get("command") or []),
            "env": env_text(template.get("env") or []),
            "ports": "\n".join(port_text(port) for port in template.get("ports") or []),
            "scheme": (unit.access or {}).get("scheme") or "http",
            "stop_after": unit.stop_after,
            "etag": unit.etag,
            "operation_id": new_operation_id(),
        }

    def patch(self) -> dict:
        """The change as an API client would PATCH it (a JSON merge patch of the unit's
        changeable fields), from the fields the form could read: one it could not is left out,
        so it stays as the unit has it while the update's own rules judge all the others now,
        not one round trip at a time. The template's other parts (args) stay; the access
        follows the ports, keeping the unit's primary port while it is still listed."""
        cleaned = self.cleaned_data
        current = actions.current_spec(self.unit)
        patch: dict = {}
        if "image" in cleaned:
            patch["image"] = cleaned["image"]
        template = {key: cleaned[key] for key in ("command", "env", "ports") if key in cleaned}
        if template:
            patch["template"] = template
        ports = cleaned.get("ports", current["template"].get("ports") or [])
        if not ports:
            patch["access"] = None
        elif "scheme" in cleaned:
            primary = current["access"].get("primaryPort")
            listed = primary in {port.get("name") for port in ports}
            patch["access"] = {
                "scheme": cleaned["scheme"] or "http",
                "primaryPort": primary if listed else None,
            }
        if "stop_after" in cleaned:
            patch["stopAfter"] = cleaned["stop_after"]
        return patch

    def report(self, problems: dict[str, list[str]]) -> None:
        """Put the problems the update found, keyed by API field path, next to the fields
        they are about; those about what the form does not edit above it, named. A field the
        form could not read has its own error already."""
        ports = self.cleaned_data.get("ports") or []
        env = self.cleaned_data.get("env") or []
        unreadable = set(self.errors)
        for path, messages in problems.items():
            field, index = form_field(path, EDIT_FIELDS)
            if field in unreadable:
                continue
            for message in messages if isinstance(messages, list) else [messages]:
                if field == "ports":
                    message = about_item(message, index, ports, port_text)
                elif field == "env":
                    message = about_item(message, index, env, env_line)
                elif field is None and path:
                    message = f"{path}: {message}"
                self.add_error(field, message)


class SSHKeyForm(SummarisedForm):
    """A public key to register for the tenant; tenancy.services.add_ssh_key judges it."""

    name = forms.CharField(
        max_length=63,
        help_text="Lower-case letters, digits and '-', e.g. laptop; unique among your keys.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    public_key = forms.CharField(
        label="Public key",
        max_length=16 * 1024,
        help_text=(
            "The one line of your .pub file, e.g. ssh-ed25519 AAAA… you@laptop. Ed25519, "
            "ECDSA, or RSA of at least 3072 bits. Never the private key."
        ),
        widget=forms.Textarea(
            attrs={"rows": 4, "autocomplete": "off", "spellcheck": "false", "wrap": "soft"}
        ),
    )

    def clean_public_key(self) -> str:
        value = self.cleaned_data["public_key"]
        if "PRIVATE KEY" in value:
            # Not echoed back into the page: a secret pasted by mistake goes no further.
            self.set_value("public_key", "")
            raise forms.ValidationError(
                "This is a private key: it stays on your machine. Paste the public key, the "
                "line in the file ending .pub."
            )
        return value


class ReservationForm(SummarisedForm):
    """Devices to hold for a window; runtime.reservations.create_reservation judges it."""

    name = forms.CharField(
        max_length=RESERVATION_NAME_MAX,
        help_text=f"Lower-case letters, digits and '-', at most {RESERVATION_NAME_MAX} "
        "characters, e.g. training-week; units are ordered on it by this name.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    package = forms.ChoiceField(help_text="What each slot holds: one unit of this package.")
    count = forms.IntegerField(
        min_value=1, initial=1, help_text="How many units' worth of the package to hold."
    )
    start = forms.DateTimeField(
        help_text="UTC; now or later (a time in the last minutes means now).",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    end = forms.DateTimeField(
        help_text="UTC, after the start. Each slot is billed while it holds GPUs, used or not.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    region = forms.ChoiceField(required=False, help_text="Any region: where it fits best.")
    at_end = forms.ChoiceField(
        label="At its end",
        choices=[("keep", "Its units keep running, on demand"), ("stop", "Its units stop")],
        initial="keep",
    )

    def __init__(
        self, *args: Any, regions: list[str], package_ids: list[str], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        declared(self, "region", forms.ChoiceField).choices = [("", "Any region")] + [
            (name, name) for name in regions
        ]
        declared(self, "package", forms.ChoiceField).choices = [(p, p) for p in package_ids]


class StorageForm(SummarisedForm):
    """A storage to create for the tenant; runtime.storage.create_storage judges it."""

    name = forms.CharField(
        max_length=STORAGE_NAME_MAX,
        help_text=(
            f"Lower-case letters, digits and '-', at most {STORAGE_NAME_MAX} characters, e.g. "
            "model-cache; unique among your storages. Units mount it by this name."
        ),
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    size = forms.CharField(
        max_length=32,
        help_text='How much it holds, as Kubernetes writes it: "50Gi", "1Ti".',
        widget=forms.TextInput(
            attrs={"autocomplete": "off", "spellcheck": "false", "placeholder": "50Gi"}
        ),
    )
    storage_class = forms.CharField(
        label="Storage class",
        required=False,
        max_length=253,
        help_text="Optional: the cluster's StorageClass to provision from; empty for its default.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    access_mode = forms.ChoiceField(
        label="Access mode",
        choices=[
            (StorageAccessMode.READ_WRITE_ONCE, "ReadWriteOnce: one unit at a time"),
            (StorageAccessMode.READ_WRITE_ONCE_POD, "ReadWriteOncePod: one pod at a time"),
            (StorageAccessMode.READ_WRITE_MANY, "ReadWriteMany: several units, read-write"),
            (StorageAccessMode.READ_ONLY_MANY, "ReadOnlyMany: several units, read-only"),
        ],
        initial=StorageAccessMode.READ_WRITE_ONCE,
        help_text="The several-unit modes need a storage class that supports them.",
    )
    region = forms.ChoiceField(
        required=False,
        help_text="Where it lives, for good: units that mount it run there. Any region: the "
        "first taking new work.",
    )

    def __init__(self, *args: Any, regions: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        declared(self, "region", forms.ChoiceField).choices = [("", "Any region")] + [
            (name, name) for name in regions
        ]


# Only real line breaks end a secret's line: str.splitlines() would also split a value at a
# form feed or U+2028.
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def parse_secret_entries(text: str) -> dict[str, str]:
    """`KEY=value` lines as a secret's data: the value is everything after the first '=', as
    typed. Problems name the line and the key, never what follows the '=' (nor a line with
    no '=', which may be a value pasted alone). Keys, sizes and counts are the service's to
    judge, so the page and the API say the same."""
    entries: dict[str, str] = {}
    lines: dict[str, int] = {}
    problems = []
    for number, line in enumerate(LINE_BREAK.split(text), start=1):
        if not line.strip():
            continue
        key, equals, value = line.partition("=")
        key = key.strip()
        if not equals:
            problems.append(f"Line {number} has no '=': write one KEY=value a line.")
        elif not key:
            problems.append(f"Line {number} has no key before its '='.")
        elif key in entries:
            problems.append(
                f"Key {key} is on lines {lines[key]} and {number}: a secret holds each key once."
            )
        else:
            entries[key] = value
            lines[key] = number
    if problems:
        raise forms.ValidationError(problems)
    return entries


class WriteOnlyTextarea(forms.Textarea):
    """A textarea that never renders what was typed into it (a secret's values): a form shown
    again after an error comes back with it empty."""

    def format_value(self, value: Any) -> None:
        return None


class SecretForm(SummarisedForm):
    """A secret to create or replace for the tenant; runtime.tenant_secrets judges it."""

    name = forms.CharField(
        max_length=SECRET_NAME_MAX,
        help_text=(
            f"Lower-case letters, digits and '-', at most {SECRET_NAME_MAX} characters, e.g. hf. "
            "The name of a secret you hold replaces all its keys and values."
        ),
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    entries = forms.CharField(
        label="Keys and values",
        strip=False,
        help_text=(
            "One KEY=value a line, e.g. HF_TOKEN=hf_…; the value is the rest of the line, "
            "spaces included. Keys are letters, digits, '-', '_' and '.'; at most 64 keys and "
            "1 MiB in all. Values are never shown again."
        ),
        widget=WriteOnlyTextarea(
            attrs={
                "rows": 6,
                "autocomplete": "off",
                "autocapitalize": "off",
                "spellcheck": "false",
                "wrap": "off",
            }
        ),
    )

    def clean_name(self) -> str:
        # Judged here too (by the service's own rule), so a bad name and bad entries are both
        # reported at once.
        name = fold_case(self.cleaned_data["name"].strip())
        if problem := secret_name(name):
            raise forms.ValidationError(problem)
        return name

    def clean_entries(self) -> dict[str, str]:
        return parse_secret_entries(self.cleaned_data["entries"])

    @property
    def values_dropped(self) -> bool:
        """Whether the form comes back with errors after values were typed: the page says to
        enter them again, since it never shows them."""
        return bool(self.errors) and bool(str(self.data.get("entries", "")).strip())


class ApiKeyForm(SummarisedForm):
    """An API key the customer makes for itself (for gpuctl, a script); shown once."""

    name = forms.CharField(
        required=False,
        max_length=100,
        help_text="What it is for, e.g. laptop gpuctl or nightly CI; you see this, not the key.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )


class WebhookForm(SummarisedForm):
    """A webhook the customer adds: where events are sent and which ones; its signing secret
    is shown once."""

    url = forms.CharField(
        label="URL",
        max_length=2048,
        help_text="An https:// address of yours that answers POST with a 2xx.",
        widget=forms.URLInput(
            attrs={"autocomplete": "off", "spellcheck": "false", "placeholder": "https://"}
        ),
    )
    events = forms.MultipleChoiceField(
        choices=[(ALL_EVENTS, "Every event")] + [(name, name) for name in EVENT_TYPES],
        initial=[ALL_EVENTS],
        widget=forms.CheckboxSelectMultiple,
        help_text="Which events it is sent. Every event includes ones added later.",
    )
    description = forms.CharField(
        required=False,
        max_length=200,
        help_text="Optional: what receives them, e.g. the on-call bot.",
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )


class TenantPickForm(forms.Form):
    """Staff pick the tenant whose keys, storages or secrets they look at (customers have
    exactly one)."""

    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.none(), to_field_name="slug", empty_label="Choose a tenant"
    )

    def __init__(self, *args: Any, tenants: QuerySet[Tenant], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        declared(self, "tenant", forms.ModelChoiceField).queryset = tenants

"""Dashboard forms: the units filter, the order form (which validates like the API) and the
SSH key form."""

from __future__ import annotations

import re
import uuid

from django import forms
from django.db.models import QuerySet

from dashboard.queries import ALL_PHASES, PackageRow
from runtime.models import UnitPhase
from runtime.serializers import CreateUnitSerializer
from runtime.validation import MAX_PORTS, UNIT_NAME_MAX
from tenancy.models import Tenant

# The API's field names -> this form's, so the API's messages land next to the right field.
API_FIELDS = {"name": "name", "packageID": "package", "image": "image", "access.scheme": "scheme"}
# Every other problem with the ports or the access (template.ports[1].name, access.primaryPort:
# the primary port is the first listed) is about what was typed in the ports field.
PORT_PATH = re.compile(r"^template\.ports(?:\[(\d+)\])?|^access\b")
OPERATION_ID = re.compile(r"^dash-[0-9a-f]{32}$")
# One entry of the ports field: `name:port` or `name:port/UDP`.
PORT_ENTRY = re.compile(r"^([^\s:/]+)\s*:\s*(\d{1,9})\s*(?:/\s*([A-Za-z]+))?$")


def new_operation_id() -> str:
    return f"dash-{uuid.uuid4().hex}"


def parse_ports(text: str) -> list[dict]:
    """`http:8080, metrics:9100/UDP` as template.ports. Only the syntax is checked here; names,
    numbers and duplicates are the API's validation's to judge, so both say the same."""
    ports = []
    for entry in (part.strip() for part in text.split(",")):
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


def api_field(path: str) -> str | None:
    """The order form's field for an API field path; None for the form as a whole."""
    if path in API_FIELDS:
        return API_FIELDS[path]
    if PORT_PATH.match(path):
        return "ports"
    return None


def port_problem(path: str, message: str, ports: list[dict]) -> str:
    """The message of a problem with one port, saying which of those typed it is about."""
    match = PORT_PATH.match(path)
    if match and match.group(1) is not None and int(match.group(1)) < len(ports):
        port = ports[int(match.group(1))]
        suffix = "" if port["protocol"] == "TCP" else f"/{port['protocol']}"
        return f"{port['name']}:{port['port']}{suffix}: {message}"
    return message


class UnitFilterForm(forms.Form):
    phase = forms.ChoiceField(required=False)
    package = forms.ChoiceField(required=False)
    tenant = forms.ChoiceField(required=False)

    def __init__(self, *args, package_ids: list[str], tenant_slugs: list[str] | None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["phase"].choices = [
            ("", "Every phase but Terminated"),
            (ALL_PHASES, "Every phase, Terminated too"),
            *UnitPhase.choices,
        ]
        self.fields["package"].choices = [("", "All packages")] + [(p, p) for p in package_ids]
        if tenant_slugs is None:
            del self.fields["tenant"]
        else:
            self.fields["tenant"].choices = [("", "All tenants")] + [(s, s) for s in tenant_slugs]


class PackageOption:
    """A package choice: reads as one line of text, and gives the template its parts."""

    def __init__(self, row: PackageRow) -> None:
        self.row = row
        package = row.package
        self.contract = (
            f"{package.gpu}\N{MULTIPLICATION SIGN} {package.device_class_name}, {package.cpu} CPU, "
            f"{package.memory} memory"
        )
        if row.placeable_now:
            self.room = f"{row.placeable_now} can start now"
        elif row.reason:
            self.room = f"none can start now: {row.reason}"
        else:
            self.room = "none can start now"

    def __str__(self) -> str:
        return f"{self.row.package.id} — {self.contract} — {self.room}"


class UnitCreateForm(forms.Form):
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
        choices=[
            ("http", "http: a web address"),
            ("https", "https: a web address; the container serves TLS itself"),
            ("tcp", "tcp: a host and port, for SSH, databases and other protocols"),
        ],
        initial="http",
        required=False,  # http when not sent, as the API defaults it
        help_text="How the primary port is reached; used only when there are ports.",
    )
    operation_id = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(
        self,
        *args,
        packages: list[PackageRow],
        tenants: QuerySet[Tenant] | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.fields["package"].choices = [(row.package.id, PackageOption(row)) for row in packages]
        if tenants is None:
            del self.fields["tenant"]
        else:
            self.fields["tenant"].queryset = tenants

    @property
    def failed_package(self) -> str:
        """The chosen package when the package's error is about it (its quota, its being
        withdrawn), so the page marks that package alone; "" when none of those offered was
        chosen, and the error is about the choice as a whole."""
        if not self.is_bound or "package" not in self.errors:
            return ""
        chosen = self.data.get("package", "")
        return chosen if chosen in self._offered() else ""

    def error_links(self) -> list[tuple[str, str]]:
        """(element id, what to fix) for each field with an error, for the summary above the
        form: it points at each problem, whose message is shown once, next to the field."""
        links = []
        for bound in self.visible_fields():
            if not bound.errors:
                continue
            if bound.name == "package" and self.failed_package:
                index = self._offered().index(self.failed_package)
                links.append((f"{bound.auto_id}_{index}", f"Package {self.failed_package}"))
            elif bound.name == "package":
                links.append((f"{bound.auto_id}_0", str(bound.label)))
            else:
                links.append((bound.id_for_label, str(bound.label)))
        return links

    def _offered(self) -> list[str]:
        return [str(value) for value, _ in self.fields["package"].choices]

    def clean_operation_id(self) -> str:
        value = self.cleaned_data.get("operation_id") or ""
        return value if OPERATION_ID.match(value) else new_operation_id()

    def clean_ports(self) -> list[dict]:
        return parse_ports(self.cleaned_data.get("ports") or "")

    def clean(self) -> dict:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        # The API's own input rules, so the browser and the API accept exactly the same orders.
        order = {
            "operationID": cleaned["operation_id"],
            "name": cleaned["name"],
            "packageID": cleaned["package"],
            "image": cleaned["image"],
        }
        if cleaned["ports"]:
            order["template"] = {"ports": cleaned["ports"]}
            order["access"] = {"scheme": cleaned["scheme"] or "http"}
        serializer = CreateUnitSerializer(data=order)
        if not serializer.is_valid():
            self.report({path: list(map(str, m)) for path, m in serializer.errors.items()})
            return cleaned
        cleaned["name"] = serializer.validated_data["name"]
        cleaned["package"] = serializer.validated_data["packageID"]
        cleaned["image"] = serializer.validated_data["image"]
        cleaned["template"] = serializer.validated_data.get("template") or {}
        cleaned["access"] = serializer.validated_data.get("access") or {}
        return cleaned

    def report(self, problems: dict[str, list[str]]) -> None:
        """Put the problems the API's rules or the order service found, keyed by API field
        path, next to the fields they are about (the form as a whole when none is)."""
        ports = self.cleaned_data.get("ports") or []  # add_error drops the field's value
        for path, messages in problems.items():
            field = api_field(path)
            for message in messages:
                if field == "ports":
                    message = port_problem(path, message, ports)
                self.add_error(field if field in self.fields else None, message)


class SSHKeyForm(forms.Form):
    """A public key to register for the tenant; tenancy.services.add_ssh_key judges it."""

    # The API's field names -> this form's.
    API_FIELDS = {"name": "name", "publicKey": "public_key"}

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
            self.data = self.data.copy()
            self.data["public_key"] = ""
            raise forms.ValidationError(
                "This is a private key: it stays on your machine. Paste the public key, the "
                "line in the file ending .pub."
            )
        return value

    def report(self, problems: dict[str, list[str]]) -> None:
        """Put the service's problems, keyed by API field, next to the fields they are about."""
        for path, messages in problems.items():
            field = self.API_FIELDS.get(path)
            for message in messages if isinstance(messages, list) else [messages]:
                self.add_error(field, message)


class TenantPickForm(forms.Form):
    """Staff pick the tenant whose keys they look at (customers have exactly one)."""

    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.none(), to_field_name="slug", empty_label="Choose a tenant"
    )

    def __init__(self, *args, tenants: QuerySet[Tenant], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants

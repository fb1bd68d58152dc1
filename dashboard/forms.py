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
from runtime.validation import UNIT_NAME_MAX
from tenancy.models import Tenant

# The API's field names -> this form's, so the API's messages land next to the right field.
API_FIELDS = {"name": "name", "packageID": "package", "image": "image"}
OPERATION_ID = re.compile(r"^dash-[0-9a-f]{32}$")


def new_operation_id() -> str:
    return f"dash-{uuid.uuid4().hex}"


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

    def clean(self) -> dict:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        # The API's own input rules, so the browser and the API accept exactly the same orders.
        serializer = CreateUnitSerializer(
            data={
                "operationID": cleaned["operation_id"],
                "name": cleaned["name"],
                "packageID": cleaned["package"],
                "image": cleaned["image"],
            }
        )
        if not serializer.is_valid():
            for api_field, messages in serializer.errors.items():
                for message in messages:
                    self.add_error(API_FIELDS.get(api_field), str(message))
            return cleaned
        cleaned["name"] = serializer.validated_data["name"]
        cleaned["package"] = serializer.validated_data["packageID"]
        cleaned["image"] = serializer.validated_data["image"]
        return cleaned


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

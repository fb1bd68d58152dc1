"""The dashboard's generic pages of a tenant's resources: one list page (its rows refreshed
live, and the form making one), one delete (with a confirmation page, or straight from the
row) and one way of reporting a refusal, for every resource an app declares
(controlplane/resources.py). Each `Page` below adds only what the dashboard shows of it: its
form, its rows, its templates.

Adding a resource here: its declaration in its app, a `Page` in PAGES, a form, a rows
template (and, to confirm a delete, a confirmation template); the routes and the page come
from these."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django_htmx.http import HttpResponseStopPolling

from controlplane.errors import DomainError, InvalidRequest, NotFound
from controlplane.resources import Made, Resource
from dashboard import queries
from dashboard.forms import (
    ApiKeyForm,
    ReservationForm,
    SecretForm,
    SSHKeyForm,
    StorageForm,
    SummarisedForm,
    WebhookForm,
)
from dashboard.pages import HtmxHttpRequest, LivePage, TenantPage, updated_at
from runtime.models import StoragePhase
from runtime.resources import RESERVATIONS, SECRETS, STORAGE
from tenancy import audit
from tenancy.models import Tenant
from tenancy.resources import API_KEYS, SSH_KEYS, WEBHOOKS


@dataclass(frozen=True)
class Page:
    """A customer resource (its app's declaration) as the dashboard shows it.

    - `segment`: its address (/<segment>/, /<segment>/live/, /<segment>/<key>/<action>/);
    - `title`, `add`, `submit`, `not_done`: the page's heading, its form's heading and
      button, and the heading of a refused form's summary;
    - `form(data, initial)`: the form; `rows(tenant)`: what the table lists;
    - `template`: the page (extends dashboard/resource_list.html, for its introduction);
      `table`: its rows (refreshed live);
    - `confirm`: the delete's confirmation page (extends dashboard/resource_delete.html),
      with `row(tenant, key)` the row it shows and `blockers(row)` what keeps it from being
      deleted; none: the row's own form deletes it at once;
    - `deleting(row)`: its delete runs already; `action`: the delete's word in addresses;
    - `extra(tenant)`: more for the templates.
    """

    resource: Resource
    segment: str
    title: str
    add: str
    submit: str
    not_done: str
    form: Callable[..., SummarisedForm]
    rows: Callable[[Tenant], Collection[Any]]
    template: str
    table: str
    confirm: str = ""
    row: Callable[[Tenant, str], Any] = lambda tenant, key: None
    blockers: Callable[[Any], Sequence[Any]] = lambda row: ()
    deleting: Callable[[Any], bool] = lambda row: False
    action: str = "delete"
    extra: Callable[[Tenant], dict[str, Any]] = field(default=lambda tenant: {})

    def route(self, kind: str) -> str:
        return f"dashboard:{self.resource.name}-{kind}"


class ResourceView(TenantPage):
    """A page of one declared resource (`of`, given by the route)."""

    of: Page | None = None

    def setup(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super().setup(request, *args, **kwargs)
        assert self.of is not None, "a resource route names its page"
        self.declared = self.of
        self.list_route = self.of.route("list")
        self.what = self.of.resource.label


class ResourceListView(ResourceView, LivePage):
    """The tenant's rows of the resource, refreshed live, and the form making one."""

    def setup(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super().setup(request, *args, **kwargs)
        self.body_template = self.declared.table
        self.name = self.declared.resource.name

    def get(self, request: HtmxHttpRequest) -> HttpResponse:
        if not self.live:
            # A link may fill in the form (a secret's "Replace" names the secret).
            initial = {name: request.GET[name] for name in request.GET if name != "tenant"}
            return self.show(self.declared.form(initial=initial))
        tenant, _ = self.tenant_choice()
        if tenant is None:
            # A page of staff who chose no tenant has no table to poll.
            return HttpResponseStopPolling()
        return self.poll(self.table(tenant), f"{updated_at(self.declared.title)}.")

    def post(self, request: HtmxHttpRequest) -> HttpResponse:
        tenant, _ = self.tenant_choice()
        if tenant is None:
            return self.show(self.declared.form(), status=400)
        form = self.declared.form(request.POST)
        if not form.is_valid():
            return self.show(form)
        resource = self.declared.resource
        data = {
            api: form.cleaned_data[name]
            for api, name in resource.fields.items()
            if name in form.cleaned_data
        }
        try:
            made = resource.create(tenant, data)
        except DomainError as error:
            self.report(form, error)
            return self.show(form)
        audit.note(request, target_name=resource.key(made.thing))
        if made.shown_once:
            # Shown on this answer only: never in a redirect, a cookie or the session.
            return self.show(self.declared.form(), made=made)
        messages.success(request, resource.created(made))
        return HttpResponseRedirect(self.list_url(tenant))

    def report(self, form: SummarisedForm, error: DomainError) -> None:
        """Put the service's refusal on the form: next to the field it is about, else above."""
        fields = self.declared.resource.fields
        if isinstance(error, InvalidRequest) and error.details.get("fields"):
            form.place(error.details["fields"], fields)
            return
        about, says = self.declared.resource.refusal(error)
        target = fields.get(about) if about else None
        form.add_error(target if target in form.fields else None, says)

    def table(self, tenant: Tenant) -> dict[str, Any]:
        rows = self.declared.rows(tenant)
        live = self.region(
            {"tenant": tenant, "rows": rows, "page": self.declared, **self.declared.extra(tenant)},
            url=self.tenant_url(self.declared.route("live"), tenant),
        )
        live["count"] = len(rows)
        return live

    def show(
        self,
        form: SummarisedForm,
        *,
        status: int = 200,
        made: Made | None = None,
        says: str = "",
    ) -> HttpResponse:
        tenant, picker = self.tenant_choice()
        return self.page(
            self.declared.template,
            {
                "page": self.declared,
                "tenant": tenant,
                "picker": picker,
                "picker_action": reverse(self.list_route),
                "live": self.table(tenant) if tenant else None,
                "region_id": f"{self.declared.resource.name}-live",
                "form": form,
                "action": self.list_url(tenant) if tenant else "",
                "made": made,
                "made_says": says or (self.declared.resource.created(made) if made else ""),
                **(self.declared.extra(tenant) if tenant else {}),
            },
            status=status,
        )


class ResourceDeleteView(ResourceView):
    """Delete one: a confirmation page (when the page has one), then a POST."""

    acts = True

    def get(self, request: HtmxHttpRequest, key: str) -> HttpResponse:
        tenant = self.chosen_tenant()
        if not self.declared.confirm:
            return HttpResponseRedirect(self.list_url(tenant))
        row = self.found(self.declared.row(tenant, key), self.what)
        if self.declared.deleting(row):
            title = self.declared.resource.title
            messages.info(request, f"{title} {key} is already being deleted.")
            return HttpResponseRedirect(self.list_url(tenant))
        return self.page(
            self.declared.confirm,
            {
                "page": self.declared,
                "row": row,
                "key": key,
                "blockers": self.declared.blockers(row),
                "tenant": tenant,
                "back": self.list_url(tenant),
                "delete_url": self.tenant_url_for(tenant, key),
            },
        )

    def post(self, request: HtmxHttpRequest, key: str) -> HttpResponse:
        tenant = self.chosen_tenant()
        resource = self.declared.resource
        try:
            resource.delete(tenant, key)
        except NotFound:
            messages.info(request, resource.gone(key))
        except DomainError as error:
            messages.error(request, resource.refusal(error, key=key)[1])
        else:
            audit.note(request, target_name=key)
            messages.success(request, resource.deleted(key))
        return HttpResponseRedirect(self.list_url(tenant))

    def tenant_url_for(self, tenant: Tenant, key: str) -> str:
        """The delete's address for `key` (for staff, with the tenant they chose)."""
        url = reverse(self.declared.route(self.declared.action), kwargs={"key": key})
        return f"{url}?{urlencode({'tenant': tenant.slug})}" if self.scope.is_staff else url


# Its own actions (test, rotate, deliveries) are in dashboard/webhook_views.py.
WEBHOOK_PAGE = Page(
    resource=WEBHOOKS,
    segment="webhooks",
    title="Webhooks",
    add="Add a webhook",
    submit="Add webhook",
    not_done="The webhook was not added",
    form=lambda data=None, initial=None: WebhookForm(data, initial=initial),
    rows=queries.list_webhooks,
    template="dashboard/webhooks.html",
    table="dashboard/_webhook_table.html",
    confirm="dashboard/webhook_delete.html",
    row=queries.get_webhook,
)


PAGES = (
    Page(
        resource=RESERVATIONS,
        segment="reservations",
        title="Reservations",
        add="Reserve GPUs",
        submit="Reserve",
        not_done="The reservation was not made",
        form=lambda data=None, initial=None: ReservationForm(
            data,
            initial=initial,
            regions=queries.region_names(),
            package_ids=queries.reservable_package_ids(),
        ),
        rows=queries.list_reservations,
        template="dashboard/reservations.html",
        table="dashboard/_reservation_table.html",
        action="cancel",
    ),
    Page(
        resource=STORAGE,
        segment="storage",
        title="Storage",
        add="Create a storage",
        submit="Create storage",
        not_done="The storage was not created",
        form=lambda data=None, initial=None: StorageForm(
            data, initial=initial, regions=queries.region_names()
        ),
        rows=queries.list_storages,
        template="dashboard/storage.html",
        table="dashboard/_storage_table.html",
        confirm="dashboard/storage_delete.html",
        row=queries.get_storage_row,
        blockers=lambda row: row.mounted_by,
        deleting=lambda row: row.storage.phase == StoragePhase.TERMINATING,
    ),
    Page(
        resource=SSH_KEYS,
        segment="ssh-keys",
        title="SSH keys",
        add="Add a key",
        submit="Add key",
        not_done="The key was not added",
        form=lambda data=None, initial=None: SSHKeyForm(data, initial=initial),
        rows=queries.list_ssh_keys,
        template="dashboard/ssh_keys.html",
        table="dashboard/_ssh_key_table.html",
        confirm="dashboard/ssh_key_delete.html",
        row=lambda tenant, name: queries.list_ssh_keys(tenant).filter(name=name).first(),
    ),
    Page(
        resource=SECRETS,
        segment="secrets",
        title="Secrets",
        add="Create or replace a secret",
        submit="Save secret",
        not_done="The secret was not saved",
        form=lambda data=None, initial=None: SecretForm(data, initial=initial),
        rows=queries.list_secrets,
        template="dashboard/secrets.html",
        table="dashboard/_secret_table.html",
        confirm="dashboard/secret_delete.html",
        row=queries.get_secret_row,
        blockers=lambda row: row.used_by,
        extra=lambda tenant: {"limit": settings.SECRETS_PER_TENANT},
    ),
    Page(
        resource=API_KEYS,
        segment="api-keys",
        title="API keys",
        add="Make an API key",
        submit="Make key",
        not_done="The key was not made",
        form=lambda data=None, initial=None: ApiKeyForm(data, initial=initial),
        rows=queries.list_api_keys,
        template="dashboard/api_keys.html",
        table="dashboard/_api_key_table.html",
        confirm="dashboard/api_key_revoke.html",
        row=queries.get_active_api_key,
        action="revoke",
        extra=lambda tenant: {"limit": settings.API_KEYS_PER_TENANT},
    ),
    WEBHOOK_PAGE,
)


def audit_actions() -> dict[str, str]:
    """What each page's writes are called in the audit log, as the API calls them: its list
    and live addresses take its form (`storages_create`), its delete `storages_delete`."""
    actions: dict[str, str] = {}
    for page in PAGES:
        name, kind = page.resource.name, page.resource.plural.lower().replace(" ", "_")
        actions |= {
            f"{name}-list": f"{kind}_create",
            f"{name}-live": f"{kind}_create",
            f"{name}-{page.action}": f"{kind}_delete",
        }
    return actions


def routes(page: Page) -> list[URLPattern]:
    """The list page, its live rows, and the delete of one."""
    name = page.resource.name
    return [
        path(f"{page.segment}/", ResourceListView.as_view(of=page), name=f"{name}-list"),
        path(
            f"{page.segment}/live/",
            ResourceListView.as_view(of=page, live=True),
            name=f"{name}-live",
        ),
        path(
            f"{page.segment}/<str:key>/{page.action}/",
            ResourceDeleteView.as_view(of=page),
            name=f"{name}-{page.action}",
        ),
    ]

"""Dashboard pages: every view resolves the caller's scope first, then reads through
dashboard.queries and writes only through the runtime's and tenancy's services (orders,
lifecycle, storages, secrets, SSH keys), as the API does."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlencode
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.contrib.auth.views import redirect_to_login
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect, QueryDict
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import View
from django_htmx.http import HttpResponseClientRedirect, HttpResponseStopPolling
from django_htmx.middleware import HtmxDetails

from billing import periods, statements
from controlplane.errors import DomainError, NotFound, ServiceUnavailable
from dashboard import logtail, queries
from dashboard.access import (
    SESSION_TENANT,
    NoTenant,
    Scope,
    TenantNotChosen,
    linked_tenants,
    resolve_scope,
    sees_every_tenant,
)
from dashboard.addresses import unit_access, unit_ssh
from dashboard.charts import NARROW, usage_chart, utilisation_chart
from dashboard.forms import (
    DASHBOARD_OPERATION_ID,
    ReservationForm,
    SecretForm,
    SSHKeyForm,
    StorageForm,
    TenantPickForm,
    UnitCreateForm,
    UnitEditForm,
    UnitFilterForm,
    new_operation_id,
)
from dashboard.quota import quota_refusal
from dashboard.reasons import status_explanation
from inventory import selectors as inventory_selectors
from runtime import actions, lifecycle, manifests, orders, reservations, tenant_secrets
from runtime import storage as storage_service
from runtime.errors import (
    InsufficientCapacity,
    InvalidRequest,
    InvalidState,
    NameConflict,
    OperationConflict,
    PreconditionFailed,
    QuotaExceeded,
    RegionUnavailable,
    StorageInUse,
)
from runtime.models import GPUUnit, OperationKind, RunPolicy, StoragePhase, UnitPhase
from runtime.reservations import ReservationConflict
from runtime.storage import StorageConflict
from runtime.tenant_secrets import NamespaceNotReady, SecretConflict, SecretInUse
from tenancy import audit
from tenancy import services as tenancy_services
from tenancy.errors import LimitExceeded, SSHKeyConflict
from tenancy.models import Tenant

# How often open pages ask for fresh phases; tests shorten it.
POLL_SECONDS = 3
PAGE_SIZE = 50
# What a scope that may only read may send.
READING_METHODS = ("GET", "HEAD", "OPTIONS")

Found = TypeVar("Found")


def age(moment: datetime | None, now: datetime) -> str:
    """'just now', '12 seconds ago', '3 minutes ago', '2 hours ago', '4 days ago' (as
    dashboard.js words it while the page stays open)."""
    if moment is None:
        return ""
    seconds = age_seconds(moment, now)
    if seconds < 2:
        return "just now"
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second")):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'} ago"
    return ""


def age_seconds(moment: datetime, now: datetime) -> int:
    return max(0, int((now - moment).total_seconds()))


# The inventory's age as _freshness.html writes it: the number the browser counts on from,
# and the words it shows.
SYNC_AGE = re.compile(r'(data-age-seconds=")\d+(">)[^<]*')
# A form's CSRF token (masked afresh on every render) and its operationID (made per render):
# the form a poller holds works as well as a new one.
FORM_NONCE = re.compile(r'(name="(?:csrfmiddlewaretoken|operation_id)" value=")[^"]*')


def digest(html: str) -> str:
    """What a poller holds, named. The sync's age is left out: it reads differently every
    second and the browser ticks it on by itself, so a body is sent again (and announced to
    screen readers) only when a figure in it moved; so are the nonces of forms in it."""
    html = FORM_NONCE.sub(r"\1", SYNC_AGE.sub(r"\1\2", html))
    return hashlib.sha256(html.encode()).hexdigest()[:16]


def updated_at(what: str) -> str:
    """The start of a live region's announcement: '<what> updated at 12:00:03 UTC'."""
    return f"{what} updated at {timezone.now():%H:%M:%S} UTC"


def freshness_context(now: datetime) -> dict[str, Any]:
    """What _freshness.html needs: how old the inventory mirror is, and when that is stale."""
    freshness = inventory_selectors.freshness_of(
        inventory_selectors.cluster_states(now=now), now=now
    )
    return {
        "freshness": freshness,
        "sync_age": age(freshness.as_of, now),
        "sync_seconds": age_seconds(freshness.as_of, now) if freshness.as_of else 0,
        "stale_after": int(settings.INVENTORY_STALE_AFTER_SECONDS),
    }


class HtmxHttpRequest(HttpRequest):
    """A request as django_htmx's middleware leaves it (the subclass django-htmx's docs give
    for type checking: the middleware sets the attribute on every request)."""

    htmx: HtmxDetails


class NotVisible(Exception):
    """What the address names does not exist, or is not the caller's to see: the view ends
    with the not-found page about `what`."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class DashboardView(LoginRequiredMixin, View):
    """Signed-in pages: resolves `self.scope`, or explains why the user sees nothing. A scope
    that may only read gets 403 for whatever acts: any POST, and every request to a view that
    `acts` (its order, confirmation or edit form)."""

    request: HtmxHttpRequest
    scope: Scope
    acts = False

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return self.signed_out()
        try:
            self.scope = resolve_scope(request)
        except NoTenant:
            return render(request, "dashboard/no_tenant.html", status=403)
        except TenantNotChosen:
            target = f"{reverse('dashboard:choose-tenant')}?{urlencode({'next': self._page()})}"
            if self.request.htmx:
                return HttpResponseClientRedirect(target)
            return redirect(target)
        if self.scope.tenant is not None:
            audit.note(request, tenant=self.scope.tenant)
        if not self.scope.may_act and (self.acts or request.method not in READING_METHODS):
            return self.page("dashboard/forbidden.html", {}, status=403)
        try:
            return super().dispatch(request, *args, **kwargs)
        except NotVisible as missing:
            return self.not_found(missing.what)

    def _page(self) -> str:
        """The page the user looks at: for a poll, the page that sent it."""
        if self.request.htmx and self.request.htmx.current_url_abs_path:
            return self.request.htmx.current_url_abs_path
        return self.request.get_full_path()

    def signed_out(self) -> HttpResponseBase:
        """The answer to a request without a session: the login form."""
        if self.request.htmx:
            # A poll from a page whose session ended: move the whole page to the login form,
            # instead of swapping the login form into a table.
            return HttpResponseClientRedirect(redirect_to_login(self._page()).url)
        return self.handle_no_permission()

    def context(self, context: dict[str, Any]) -> dict[str, Any]:
        """What every dashboard template is given, and `context`."""
        return {"scope": self.scope, "poll_seconds": POLL_SECONDS, **context}

    def page(self, template: str, context: dict[str, Any], *, status: int = 200) -> HttpResponse:
        return render(self.request, template, self.context(context), status=status)

    def not_found(self, what: str) -> HttpResponse:
        return self.page("dashboard/not_found.html", {"what": what}, status=404)

    def found(self, thing: Found | None, what: str) -> Found:
        """`thing`, read within the caller's scope; when the read found nothing, the request
        ends here with the not-found page about `what`."""
        if thing is None:
            raise NotVisible(what)
        return thing


class UnitPage(DashboardView):
    """Pages about one unit, named by its uid in the address."""

    def get_unit(self, uid: UUID) -> GPUUnit:
        unit = self.found(queries.get_unit(self.scope, uid), "unit")
        audit.note(self.request, tenant=unit.tenant, target_name=unit.name)
        return unit


class LivePage(DashboardView):
    """A page with a region that refreshes itself. `live=True` serves the region's poll: 204
    while the body the poller holds (named by its digest in `since`) is still current, else
    the body with its new digest and an announcement for screen readers, as a 286 (swap this,
    then stop polling) once the region is done changing."""

    live = False
    body_template = ""
    name = ""  # the ids of the region's digest input and its announcement
    announces = True

    def region(
        self, context: dict[str, Any], *, url: str = "", done: bool = False
    ) -> dict[str, Any]:
        """The live region: its body rendered from `context`, the digest naming it, the ids
        the page and the poll's answer share, the URL it is polled at, and whether it is done
        changing (then the page does not poll it)."""
        body = render_to_string(self.body_template, self.context(context), self.request)
        return {
            "body": body,
            "digest": digest(body),
            "since_id": f"{self.name}-since",
            "announce_id": f"{self.name}-announce" if self.announces else "",
            "url": url,
            "done": done,
        }

    def poll(self, live: dict[str, Any], announcement: str = "") -> HttpResponse:
        """The answer to a poll of the region `live`."""
        if self.request.GET.get("since") == live["digest"]:
            return HttpResponse(status=204)
        live["announcement"] = announcement
        response = render(self.request, "dashboard/_live_body.html", {"live": live})
        if live["done"]:
            # Nothing changes any more: this answer is the last poll.
            response.status_code = HttpResponseStopPolling.status_code
        return response


class LiveBodyPage(LivePage):
    """A page whose whole body is its live region."""

    template = ""
    live_route = ""
    updated = ""  # what the announcement says was updated

    def body_context(self) -> dict[str, Any]:
        raise NotImplementedError

    def get(self, request: HtmxHttpRequest) -> HttpResponse:
        live = self.region(self.body_context(), url=reverse(self.live_route))
        if self.live:
            return self.poll(live, f"{updated_at(self.updated)}.")
        return self.page(self.template, {"live": live})


class OverviewView(LiveBodyPage):
    template = "dashboard/overview.html"
    body_template = "dashboard/_overview_body.html"
    name = "overview"
    live_route = "dashboard:overview-live"
    updated = "Figures"

    def body_context(self) -> dict[str, Any]:
        now = timezone.now()
        # A customer's own cost; staff act for no tenant and see every tenant's together.
        costs = queries.cost_summary(self.scope.tenant, now=queries.billing_now(now))
        chart = {
            "last_day": costs.last_day,
            "days": queries.USAGE_DAYS,
            "currency": settings.BILLING_CURRENCY,
        }
        context = {
            **freshness_context(now),
            "phases": queries.units_by_phase(self.scope.units()),
            "packages": queries.package_rows(self.scope),
            "regions": queries.region_rows(),
            "usage": queries.tenant_overview(self.scope.tenant) if self.scope.tenant else None,
            "costs": costs,
            "budget": queries.budget(self.scope.tenant, costs) if self.scope.tenant else None,
            "usage_chart": usage_chart(costs.by_package_day, **chart),
            "phone_usage_chart": usage_chart(
                costs.by_package_day, **chart, width=NARROW[0], height=NARROW[1]
            ),
            "device_classes": None,
            "nodes": None,
            "shared_devices": None,
            "chart": None,
        }
        if self.scope.sees_cluster:
            # The cluster's allocation (by class, by node, shared GPUs' shares, over time)
            # includes every tenant's units, so only ops see it; a customer sees its own usage
            # instead.
            samples = queries.utilisation_samples()
            context |= {
                "device_classes": queries.device_totals_by_class(),
                "nodes": queries.device_totals_by_node(),
                "shared_devices": queries.list_shared_devices(),
                "chart": utilisation_chart(samples),
                "phone_chart": utilisation_chart(samples, width=NARROW[0], height=NARROW[1]),
            }
        return context


class UnitListView(LivePage):
    """The units table, its rows live."""

    body_template = "dashboard/_unit_table.html"
    name = "units"

    def get(self, request: HtmxHttpRequest) -> HttpResponse:
        phase = request.GET.get("phase", "")
        filters = {
            "phase": phase if phase in (*UnitPhase.values, queries.ALL_PHASES) else "",
            "package": request.GET.get("package", "").strip().lower(),
            "tenant": request.GET.get("tenant", "").strip().lower() if self.scope.is_staff else "",
        }
        units = queries.list_units(
            self.scope,
            phase=filters["phase"],
            package_id=filters["package"],
            tenant_slug=filters["tenant"],
        )
        page = Paginator(units, PAGE_SIZE).get_page(request.GET.get("page"))
        shown = list(page.object_list)
        # One ledger read for the whole page, whatever its length.
        costs = queries.unit_costs(shown, now=queries.billing_now(timezone.now()))
        query: dict[str, str | int] = {key: value for key, value in filters.items() if value}
        if page.number > 1:
            query["page"] = page.number
        hidden = (
            0
            if filters["phase"]
            else queries.count_terminated(
                self.scope, package_id=filters["package"], tenant_slug=filters["tenant"]
            )
        )
        live = self.region(
            {
                "page_obj": page,
                "rows": [(unit, costs[unit.uid]) for unit in shown],
                "query": query,
                "terminated_hidden": hidden,
                "show_all": urlencode(
                    {key: value for key, value in filters.items() if value}
                    | {"phase": queries.ALL_PHASES}
                ),
            },
            url=f"{reverse('dashboard:unit-rows')}?{urlencode(query)}",
        )
        if self.live:
            counts = Counter(unit.phase for unit in shown)
            return self.poll(
                live,
                f"{updated_at('Units')}: "
                + (", ".join(f"{n} {phase}" for phase, n in counts.items()) or "no units")
                + ".",
            )
        form = UnitFilterForm(
            initial=filters,
            package_ids=queries.package_ids_in_use(self.scope),
            tenant_slugs=list(self.scope.visible_tenants().values_list("slug", flat=True))
            if self.scope.is_staff
            else None,
        )
        return self.page(
            "dashboard/units.html",
            {"form": form, "live": live, "filtered": any(filters.values()), "page_obj": page},
        )


class UnitDetailView(UnitPage, LivePage):
    """One unit; its changing part (phase, devices, timeline) live."""

    body_template = "dashboard/_unit_status.html"
    name = "unit"

    def get(self, request: HtmxHttpRequest, uid: UUID) -> HttpResponse:
        unit = self.get_unit(uid)
        ended = unit.phase in (UnitPhase.TERMINATING, UnitPhase.TERMINATED)
        live = self.region(
            {
                "unit": unit,
                "explanation": status_explanation(unit),
                "devices": (unit.dra or {}).get("devices") or [],
                "allocated": bool((unit.dra or {}).get("allocated")),
                "access": unit_access(unit),
                "ssh": unit_ssh(unit),
                "events": queries.list_events(unit),
                # Lifecycle buttons, live with the phase; an ending unit offers none.
                "actions": None if ended else queries.unit_actions(unit),
                "operation_id": new_operation_id(),
                # A change (update, stop, start) the cluster has not caught up with yet; a
                # unit still being created is not "rolling out" anything.
                "rolling_out": not ended
                and unit.generation > 1
                and unit.observed_generation < unit.generation,
            },
            url=reverse("dashboard:unit-live", args=[unit.uid]),
            # Nothing changes after Terminated.
            done=unit.phase == UnitPhase.TERMINATED,
        )
        if self.live:
            return self.poll(live, f"{unit.name} is {unit.phase}.")
        costs_to = queries.billing_now(timezone.now())
        return self.page(
            "dashboard/unit_detail.html",
            {
                "unit": unit,
                "live": live,
                "cost": queries.unit_costs([unit], now=costs_to)[unit.uid],
                "price": queries.unit_price(unit),
                "costs_to": costs_to,
                "pod_name": manifests.pod_name_for(unit.name),
                "can_delete": unit.phase in UnitPhase.LIVE and unit.phase != UnitPhase.TERMINATING,
                "mounts": queries.unit_mounts(unit),
                # A Terminated unit's log is gone (known without asking the cluster); any other
                # unit's is fetched by the log region once the page is shown, so the page
                # never waits for the cluster, nor fails with it.
                "log_tail": logtail.read_tail(unit) if live["done"] else None,
            },
        )


class UnitLogView(UnitPage, LivePage):
    """The last lines of a unit's log: a page of its own (what the unit page links to for
    browsers without JavaScript), and the live region the unit page and that page poll."""

    body_template = "dashboard/_unit_log.html"
    name = "unit-log"
    announces = False  # the log speaks for itself

    def get(self, request: HtmxHttpRequest, uid: UUID) -> HttpResponse:
        unit = self.get_unit(uid)
        live = self.region(
            {"unit": unit, "tail": logtail.read_tail(unit)},
            url=reverse("dashboard:unit-log-live", args=[unit.uid]),
            done=unit.phase == UnitPhase.TERMINATED,
        )
        if self.live:
            return self.poll(live)
        return self.page("dashboard/unit_log.html", {"unit": unit, "live": live})


class UnitCreateView(DashboardView):
    """The order form: tenant users order for their tenant; staff pick the tenant."""

    acts = True

    def form(
        self, data: QueryDict | None = None, initial: dict[str, Any] | None = None
    ) -> UnitCreateForm:
        # Staff act for no tenant: they pick it in the form, so there are no storages or keys
        # to name yet.
        tenant = self.scope.tenant
        return UnitCreateForm(
            data,
            initial=initial,
            packages=queries.package_rows(self.scope),
            regions=queries.region_names(),
            tenants=self.scope.visible_tenants() if self.scope.is_staff else None,
            storage_names=None
            if tenant is None
            else [
                row.storage.name
                for row in queries.list_storages(tenant)
                if row.storage.phase not in (StoragePhase.TERMINATING, StoragePhase.FAILED)
            ],
            ssh_key_names=None
            if tenant is None
            else list(queries.list_ssh_keys(tenant).values_list("name", flat=True)),
        )

    def get(self, request: HtmxHttpRequest) -> HttpResponse:
        initial = {"operation_id": new_operation_id(), "package": request.GET.get("package", "")}
        return self.page("dashboard/unit_form.html", {"form": self.form(initial=initial)})

    def post(self, request: HtmxHttpRequest) -> HttpResponse:
        form = self.form(data=request.POST)
        if form.is_valid():
            data = form.cleaned_data
            # Staff order for the tenant they picked in the form.
            tenant = self.scope.tenant or data["tenant"]
            audit.note(request, tenant=tenant)
            try:
                result = orders.create_unit(
                    tenant=tenant,
                    operation_id=data["operation_id"],
                    name=data["name"],
                    package_id=data["package"],
                    image=data["image"],
                    template=data["template"],
                    access=data["access"],
                    storage_mounts=data["storage_mounts"],
                    ssh=data["ssh"],
                    region=data["region"],
                    interruptible=data["interruptible"],
                    auto_resume=data["auto_resume"],
                    reservation=data["reservation"],
                )
            except DomainError as error:
                self.report(form, error)
            else:
                unit = result.unit
                audit.note(request, target_name=unit.name)
                if result.created:
                    messages.success(request, f"Unit {unit.name} ordered; it starts shortly.")
                return HttpResponseRedirect(reverse("dashboard:unit-detail", args=[unit.uid]))
        return self.page("dashboard/unit_form.html", {"form": form})

    @staticmethod
    def report(form: UnitCreateForm, error: DomainError) -> None:
        """Put the service's refusal next to the field it is about."""
        if isinstance(error, StorageInUse):
            units = error.details.get("units") or []
            form.add_error(
                "storage_mounts",
                f"{error.details.get('storage')} can be mounted by one live unit at a time, and "
                f"unit {', '.join(units)} mounts it. Delete that unit first, or mount another "
                "storage.",
            )
        elif isinstance(error, NameConflict):
            form.add_error(
                "name",
                f"A live unit named {error.details.get('name')} already exists. Choose another "
                "name, or delete that unit first.",
            )
        elif isinstance(error, QuotaExceeded):
            form.add_error("package", quota_refusal(error.details, asked="package"))
        elif isinstance(error, OperationConflict):
            # The hidden operationID already ordered something else (the form was reused after
            # editing): a fresh one lets the next submit go through.
            form.set_value("operation_id", new_operation_id())
            form.add_error(None, "This form was already used for another order; submit again.")
        elif isinstance(error, InvalidRequest) and error.details.get("fields"):
            form.report(
                {
                    path: problems if isinstance(problems, list) else [problems]
                    for path, problems in error.details["fields"].items()
                }
            )
        else:
            form.add_error(None, error.message)


class UnitDeleteView(UnitPage):
    """Delete in two steps: a confirmation page, then a POST."""

    acts = True

    def get(self, request: HtmxHttpRequest, uid: UUID) -> HttpResponse:
        unit = self.get_unit(uid)
        if unit.phase not in UnitPhase.LIVE or unit.phase == UnitPhase.TERMINATING:
            messages.info(request, f"Unit {unit.name} is already {unit.phase}.")
            return HttpResponseRedirect(reverse("dashboard:unit-detail", args=[unit.uid]))
        return self.page("dashboard/unit_delete.html", {"unit": unit})

    def post(self, request: HtmxHttpRequest, uid: UUID) -> HttpResponse:
        unit = self.get_unit(uid)
        if unit.phase in UnitPhase.LIVE:
            # By uid too: if this unit ends meanwhile, a newer one of its name is not touched.
            lifecycle.request_unit_deletion(tenant=unit.tenant, name=unit.name, uid=str(unit.uid))
            messages.success(request, f"Deletion of {unit.name} requested.")
        return HttpResponseRedirect(reverse("dashboard:unit-detail", args=[unit.uid]))


def unit_page(unit: GPUUnit) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("dashboard:unit-detail", args=[unit.uid]))


# Per action: its button's words, the confirmation page's (None: no confirmation), and what
# the unit does once it is asked.
ACTION_WORDS: dict[str, dict[str, str]] = {
    OperationKind.STOP: {
        "label": "Stop",
        "done": "stopped",
        "next": "It goes Stopping, then Stopped; its GPUs go back to the pool.",
        "confirm": (
            "Stopping removes the unit's pod, so whatever runs in it ends and what it keeps "
            "outside its storage is lost. Its {gpu} GPU{s} go back to the pool and its CPU and "
            "memory stop counting against the quota; its name, storage, SSH and access "
            "settings stay. Starting it again allocates GPUs afresh: when none are free then, "
            "it waits as Pending."
        ),
    },
    OperationKind.START: {
        "label": "Start",
        "done": "started",
        "next": "Its pod is created again and its GPUs allocated afresh.",
    },
    OperationKind.RESTART: {
        "label": "Restart",
        "done": "restarted",
        "next": "Its pod is replaced by a new one.",
        "confirm": (
            "Restarting replaces the unit's pod with a new one, so whatever runs in it is "
            "ended and starts over; what it keeps outside its storage is lost. The unit keeps "
            "its claim, and the new pod gets its {gpu} GPU{s} allocated afresh (a unit that "
            "failed on an unhealthy GPU lands on healthy ones)."
        ),
    },
}


class UnitActionView(UnitPage):
    """Stop, start or restart a unit: a POST from its page (stop and restart after a
    confirmation page, as deletion), carried out by actions.request_action under the
    operationID the page was rendered with, so a double submit is one action."""

    acts = True
    kind = ""

    def get(self, request: HtmxHttpRequest, uid: UUID) -> HttpResponse:
        unit = self.get_unit(uid)
        words = ACTION_WORDS[self.kind]
        if "confirm" not in words:
            return unit_page(unit)
        if refusal := actions.refusal(unit, self.kind):
            messages.info(request, f"{words['label']} is not possible now: {refusal}")
            return unit_page(unit)
        return self.page(
            "dashboard/unit_action.html",
            {
                "unit": unit,
                "kind": self.kind,
                "words": words,
                "consequences": words["confirm"].format(
                    gpu=unit.gpu, s="" if unit.gpu == 1 else "s"
                ),
                "operation_id": new_operation_id(),
            },
        )

    def post(self, request: HtmxHttpRequest, uid: UUID) -> HttpResponse:
        unit = self.get_unit(uid)
        words = ACTION_WORDS[self.kind]
        if unit.phase == UnitPhase.TERMINATED:
            # The runtime acts on a name: a newer unit of this name is not this page's.
            messages.error(request, f"{words['label']} refused: unit {unit.name} is Terminated.")
            return unit_page(unit)
        operation_id = request.POST.get("operation_id", "")
        if not DASHBOARD_OPERATION_ID.match(operation_id):
            operation_id = new_operation_id()
        try:
            result = actions.request_action(
                tenant=unit.tenant,
                name=unit.name,
                kind=self.kind,
                operation_id=operation_id,
                uid=str(unit.uid),  # this page's unit, never a newer one of its name
            )
        except QuotaExceeded as error:
            messages.error(request, quota_refusal(error.details, asked="start", unit=unit.name))
        except DomainError as error:
            messages.error(request, f"{words['label']} refused: {error.message}")
        else:
            if result.replayed:
                messages.info(
                    request,
                    f"{words['label']} of {unit.name} was already requested "
                    f"(operation {operation_id}).",
                )
            else:
                messages.success(
                    request,
                    f"{words['label']} of {unit.name} requested (operation {operation_id}). "
                    f"{words['next']}",
                )
        return unit_page(unit)


class UnitEditView(UnitPage):
    """Change a unit's image, command, environment, ports and auto-stop through
    actions.update_unit, as PATCH does: If-Match is the etag the form was shown with."""

    acts = True

    def get(self, request: HtmxHttpRequest, uid: UUID) -> HttpResponse:
        unit = self.get_unit(uid)
        if unit.phase in (UnitPhase.TERMINATING, UnitPhase.TERMINATED):
            messages.info(request, f"Unit {unit.name} is {unit.phase}: it cannot be changed.")
            return unit_page(unit)
        return self.show(unit, UnitEditForm(unit=unit, initial=UnitEditForm.initial_for(unit)))

    def post(self, request: HtmxHttpRequest, uid: UUID) -> HttpResponse:
        unit = self.get_unit(uid)
        if unit.phase in (UnitPhase.TERMINATING, UnitPhase.TERMINATED):
            messages.error(request, f"Unit {unit.name} is {unit.phase}: it was not changed.")
            return unit_page(unit)
        form = UnitEditForm(request.POST, unit=unit)
        readable = form.is_valid()
        try:
            if not readable:
                # What the form could read is still judged now, by the update's own rules.
                actions.check_update(unit=unit, patch=form.patch())
                return self.show(unit, form)
            result = actions.update_unit(
                tenant=unit.tenant,
                name=unit.name,
                operation_id=form.cleaned_data["operation_id"],
                patch=form.patch(),
                if_match=form.cleaned_data["etag"],
                uid=str(unit.uid),
            )
        except (PreconditionFailed, OperationConflict):
            # Changed since the form was shown (or the form was used for another change
            # already): nothing was saved; the form starts again from the unit as it is now.
            current = queries.get_unit(self.scope, uid) or unit
            return self.show(
                current,
                UnitEditForm(unit=current, initial=UnitEditForm.initial_for(current)),
                changed_meanwhile=True,
            )
        except InvalidRequest as error:
            form.report(error.details.get("fields") or {"": [error.message]})
            return self.show(unit, form)
        except DomainError as error:
            form.add_error(None, error.message)
            return self.show(unit, form)
        updated = result.unit
        if result.replayed:
            messages.info(
                request,
                f"This change of {unit.name} was already saved (operation "
                f"{result.operation.operation_id}).",
            )
        elif not result.changed:
            messages.info(request, f"Nothing to save: the form had no change for {unit.name}.")
        else:
            if updated.run_policy == RunPolicy.STOPPED:
                then = "The unit is stopped: the change takes effect when it is started."
            elif updated.phase == UnitPhase.PROVISIONING and updated.reason == "Updating":
                then = "Its pod is replaced with the new settings; the claim and its GPUs stay."
            else:
                then = "It needs no new pod."
            messages.success(
                request,
                f"Update of {unit.name} to generation {updated.generation} requested "
                f"(operation {result.operation.operation_id}). {then}",
            )
        return unit_page(unit)

    def show(
        self, unit: GPUUnit, form: UnitEditForm, *, changed_meanwhile: bool = False
    ) -> HttpResponse:
        return self.page(
            "dashboard/unit_edit.html",
            {
                "unit": unit,
                "form": form,
                "changed_meanwhile": changed_meanwhile,
                "refusal": actions.refusal(unit, OperationKind.UPDATE),
            },
        )


class PackageListView(LiveBodyPage):
    template = "dashboard/packages.html"
    body_template = "dashboard/_packages_body.html"
    name = "packages"
    live_route = "dashboard:package-live"
    updated = "Availability"

    def body_context(self) -> dict[str, Any]:
        return {
            "packages": queries.package_rows(self.scope, include_inactive=self.scope.is_staff),
            **freshness_context(timezone.now()),
        }


class UsageView(DashboardView):
    """Every tenant's cost this month and to date, for ops (as GET /operator/usage is for
    operator keys); anyone else gets the 404 of a page that is not theirs."""

    def get(self, request: HtmxHttpRequest) -> HttpResponse:
        if not self.scope.sees_cluster:
            return self.not_found("page")
        now = queries.billing_now(timezone.now())
        return self.page("dashboard/usage.html", {"costs": queries.list_tenant_costs(now=now)})


class TenantPage(DashboardView):
    """Pages about one tenant's things (SSH keys, storages): a customer's own tenant; for staff
    the tenant they chose (`?tenant=<slug>`), and none until they have."""

    list_route = ""
    what = ""  # what the page is about, as its not-found page names it

    def tenant_choice(self) -> tuple[Tenant | None, TenantPickForm | None]:
        if not self.scope.is_staff:
            return self.scope.tenant, None
        tenants = self.scope.visible_tenants()
        slug = self.request.GET.get("tenant", "")
        picker = TenantPickForm({"tenant": slug} if slug else None, tenants=tenants)
        chosen = picker.cleaned_data["tenant"] if picker.is_valid() else None
        audit.note(self.request, tenant=chosen)
        return chosen, picker

    def chosen_tenant(self) -> Tenant:
        """The tenant, for a page about one of its things: none chosen, there is no such
        thing to see."""
        return self.found(self.tenant_choice()[0], self.what)

    def tenant_url(self, route: str, tenant: Tenant) -> str:
        """The route's address for `tenant`: for staff, it carries the tenant they chose."""
        url = reverse(route)
        return f"{url}?{urlencode({'tenant': tenant.slug})}" if self.scope.is_staff else url

    def list_url(self, tenant: Tenant) -> str:
        return self.tenant_url(self.list_route, tenant)


class StatementView(TenantPage):
    """A tenant's monthly statement (GET /api/v1/usage/statements/{month}): its lines and
    total, the months before and after, and the same as CSV (`.csv`)."""

    list_route = "dashboard:statement"
    what = "statement"

    def get(self, request: HtmxHttpRequest, month: str = "", as_csv: bool = False) -> HttpResponse:
        now = queries.billing_now(timezone.now())
        start = statements.month_of(month) if month else periods.month_start(now)
        if start is None:
            return self.not_found("statement")
        tenant, picker = self.tenant_choice()
        found = statements.statement(tenant, start, now=now) if tenant else None
        if as_csv:
            if found is None:
                return self.not_found("statement")
            response = HttpResponse(
                "".join(statements.render_csv(found)), content_type="text/csv; charset=utf-8"
            )
            response["Content-Disposition"] = (
                f'attachment; filename="statement-{found.tenant.slug}-{start:%Y-%m}.csv"'
            )
            return response
        label = f"{start:%Y-%m}"
        return self.page(
            "dashboard/statement.html",
            {
                "tenant": tenant,
                "picker": picker,
                "statement": found,
                "month": label,
                "previous": f"{start - timedelta(days=1):%Y-%m}",
                "next": f"{periods.next_month(start):%Y-%m}",
                "csv_url": self._month_url(tenant, label, csv=True) if tenant else "",
                "previous_url": self._month_url(tenant, f"{start - timedelta(days=1):%Y-%m}"),
                "next_url": self._month_url(tenant, f"{periods.next_month(start):%Y-%m}"),
            },
        )

    def _month_url(self, tenant: Tenant | None, month: str, *, csv: bool = False) -> str:
        route = "dashboard:statement-csv" if csv else "dashboard:statement-month"
        url = reverse(route, kwargs={"month": month})
        if self.scope.is_staff and tenant is not None:
            return f"{url}?{urlencode({'tenant': tenant.slug})}"
        return url


class SSHKeyPage(TenantPage):
    list_route = "dashboard:ssh-key-list"
    what = "SSH key"


class SSHKeyListView(SSHKeyPage):
    """The tenant's keys and the form to add one."""

    def get(self, request: HtmxHttpRequest) -> HttpResponse:
        return self.show(SSHKeyForm())

    def post(self, request: HtmxHttpRequest) -> HttpResponse:
        tenant, _ = self.tenant_choice()
        if tenant is None:
            return self.show(SSHKeyForm(), status=400)
        form = SSHKeyForm(request.POST)
        if form.is_valid():
            try:
                key = tenancy_services.add_ssh_key(
                    tenant=tenant,
                    name=form.cleaned_data["name"],
                    public_key=form.cleaned_data["public_key"],
                )
            except InvalidRequest as error:
                form.report(error.details.get("fields") or {None: [error.message]})
            except SSHKeyConflict as error:
                if "fingerprint" in error.details:
                    form.add_error(
                        "public_key",
                        f"This key is already registered as {error.details['name']}.",
                    )
                else:
                    form.add_error(
                        "name",
                        f"A key named {error.details.get('name')} exists. Choose another name, "
                        "or delete that key first.",
                    )
            else:
                audit.note(request, target_name=key.name)
                messages.success(request, f"SSH key {key.name} added ({key.fingerprint}).")
                return HttpResponseRedirect(self.list_url(tenant))
        return self.show(form)

    def show(self, form: SSHKeyForm, *, status: int = 200) -> HttpResponse:
        tenant, picker = self.tenant_choice()
        return self.page(
            "dashboard/ssh_keys.html",
            {
                "tenant": tenant,
                "picker": picker,
                "keys": queries.list_ssh_keys(tenant) if tenant else None,
                "form": form,
                "action": self.list_url(tenant) if tenant else "",
            },
            status=status,
        )


class SSHKeyDeleteView(SSHKeyPage):
    """Delete a key in two steps: a confirmation page, then a POST."""

    acts = True

    def get(self, request: HtmxHttpRequest, name: str) -> HttpResponse:
        tenant = self.chosen_tenant()
        key = self.found(queries.list_ssh_keys(tenant).filter(name=name).first(), self.what)
        return self.page(
            "dashboard/ssh_key_delete.html",
            {"key": key, "tenant": tenant, "back": self.list_url(tenant)},
        )

    def post(self, request: HtmxHttpRequest, name: str) -> HttpResponse:
        tenant = self.chosen_tenant()
        try:
            tenancy_services.remove_ssh_key(tenant=tenant, name=name)
        except NotFound:
            messages.info(request, f"SSH key {name} was already deleted.")
        else:
            messages.success(request, f"SSH key {name} deleted.")
        return HttpResponseRedirect(self.list_url(tenant))


class SecretPage(TenantPage):
    list_route = "dashboard:secret-list"
    what = "secret"


class SecretListView(SecretPage):
    """The tenant's secrets (names and keys, never values), the units reading each, and the
    form to create or replace one."""

    def get(self, request: HtmxHttpRequest) -> HttpResponse:
        # "Replace" links name the secret, so the form comes with its name filled in.
        return self.show(SecretForm(initial={"name": request.GET.get("name", "")}))

    def post(self, request: HtmxHttpRequest) -> HttpResponse:
        tenant, _ = self.tenant_choice()
        if tenant is None:
            return self.show(SecretForm(), status=400)
        form = SecretForm(request.POST)
        if form.is_valid():
            try:
                secret, created = tenant_secrets.create_or_replace_secret(
                    tenant=tenant,
                    name=form.cleaned_data["name"],
                    data=form.cleaned_data["entries"],
                )
            except DomainError as error:
                self.report(form, error)
            else:
                audit.note(request, target_name=secret.name)
                keys = ", ".join(secret.keys)
                if created:
                    messages.success(request, f"Secret {secret.name} created with keys {keys}.")
                else:
                    messages.success(
                        request,
                        f"Secret {secret.name} replaced; its keys are now {keys}. Running units "
                        "read the new values from their next start or restart.",
                    )
                return HttpResponseRedirect(self.list_url(tenant))
        return self.show(form)

    @staticmethod
    def report(form: SecretForm, error: DomainError) -> None:
        """Put the service's refusal on the form: next to the field it is about, else above."""
        if isinstance(error, InvalidRequest) and error.details.get("fields"):
            form.report(error.details["fields"])
        elif isinstance(error, SecretConflict):
            form.add_error(
                "name",
                f"The tenant's namespace holds a Kubernetes Secret secret-"
                f"{error.details.get('name')} that this control plane does not manage. Choose "
                "another name.",
            )
        elif isinstance(error, LimitExceeded):
            form.add_error(
                None,
                f"The tenant holds as many secrets as it may ({error.details.get('hard')}). "
                "Delete one it no longer needs, or replace one it holds by giving its name.",
            )
        elif isinstance(error, NamespaceNotReady):
            form.add_error(
                None,
                "The tenant's namespace is being prepared: try again in a few seconds.",
            )
        else:
            form.add_error(None, error.message)

    def show(self, form: SecretForm, *, status: int = 200) -> HttpResponse:
        tenant, picker = self.tenant_choice()
        return self.page(
            "dashboard/secrets.html",
            {
                "tenant": tenant,
                "picker": picker,
                "rows": queries.list_secrets(tenant) if tenant else None,
                "limit": settings.SECRETS_PER_TENANT,
                "form": form,
                "action": self.list_url(tenant) if tenant else "",
            },
            status=status,
        )


class SecretDeleteView(SecretPage):
    """Delete a secret in two steps: a confirmation page, then a POST; refused while a live
    unit reads it."""

    acts = True

    def get(self, request: HtmxHttpRequest, name: str) -> HttpResponse:
        tenant = self.chosen_tenant()
        row = self.found(queries.get_secret_row(tenant, name), self.what)
        return self.page(
            "dashboard/secret_delete.html",
            {"row": row, "tenant": tenant, "back": self.list_url(tenant)},
        )

    def post(self, request: HtmxHttpRequest, name: str) -> HttpResponse:
        tenant = self.chosen_tenant()
        try:
            tenant_secrets.delete_secret(tenant=tenant, name=name)
        except NotFound:
            messages.info(request, f"Secret {name} was already deleted.")
        except SecretInUse as error:
            units = error.details.get("units") or []
            many = len(units) > 1
            messages.error(
                request,
                f"Secret {name} was not deleted: unit{'s' if many else ''} {', '.join(units)} "
                f"read{'' if many else 's'} it, and a unit's next start fails without it. "
                f"Delete {'those units' if many else 'that unit'}, or take the secret out of "
                f"{'their' if many else 'its'} environment, first.",
            )
        except ServiceUnavailable as error:
            messages.error(request, error.message)
        else:
            messages.success(request, f"Secret {name} deleted.")
        return HttpResponseRedirect(self.list_url(tenant))


class ReservationPage(TenantPage):
    list_route = "dashboard:reservation-list"
    what = "reservation"


class ReservationListView(ReservationPage, LivePage):
    """The tenant's reservations, what each holds, uses and has free (live), and the form to
    make one."""

    body_template = "dashboard/_reservation_table.html"
    name = "reservations"

    def form(self, data: Any = None) -> ReservationForm:
        return ReservationForm(
            data,
            regions=queries.region_names(),
            package_ids=queries.reservable_package_ids(),
        )

    def get(self, request: HtmxHttpRequest) -> HttpResponse:
        if not self.live:
            return self.show(self.form())
        tenant, _ = self.tenant_choice()
        if tenant is None:
            return HttpResponseStopPolling()
        return self.poll(self.table(tenant), f"{updated_at('Reservations')}.")

    def post(self, request: HtmxHttpRequest) -> HttpResponse:
        tenant, _ = self.tenant_choice()
        if tenant is None:
            return self.show(self.form(), status=400)
        form = self.form(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                made = reservations.create_reservation(
                    tenant=tenant,
                    name=data["name"],
                    package_id=data["package"],
                    count=data["count"],
                    start=data["start"],
                    end=data["end"],
                    region=data["region"],
                    at_end=data["at_end"],
                )
            except InvalidRequest as error:
                form.report(error.details.get("fields") or {None: [error.message]})
            except ReservationConflict as error:
                form.add_error("name", f"A reservation named {error.details.get('name')} exists.")
            except QuotaExceeded as error:
                form.add_error("count", quota_refusal(error.details, asked="package"))
            except (InsufficientCapacity, RegionUnavailable) as error:
                form.add_error("count", error.message)
            else:
                audit.note(request, target_name=made.name)
                messages.success(
                    request,
                    f"Reservation {made.name} made: {made.count} x {made.package_id} from "
                    f"{made.start:%Y-%m-%d %H:%M} to {made.end:%Y-%m-%d %H:%M} UTC.",
                )
                return HttpResponseRedirect(self.list_url(tenant))
        return self.show(form)

    def table(self, tenant: Tenant) -> dict[str, Any]:
        return self.region(
            {"tenant": tenant, "rows": queries.list_reservations(tenant)},
            url=self.tenant_url("dashboard:reservation-live", tenant),
        )

    def show(self, form: ReservationForm, *, status: int = 200) -> HttpResponse:
        tenant, picker = self.tenant_choice()
        return self.page(
            "dashboard/reservations.html",
            {
                "tenant": tenant,
                "picker": picker,
                "live": self.table(tenant) if tenant else None,
                "form": form,
                "action": self.list_url(tenant) if tenant else "",
            },
            status=status,
        )


class ReservationCancelView(ReservationPage):
    """Cancel a reservation that has not started (a POST from its row)."""

    acts = True

    def get(self, request: HtmxHttpRequest, name: str) -> HttpResponse:
        return HttpResponseRedirect(self.list_url(self.chosen_tenant()))

    def post(self, request: HtmxHttpRequest, name: str) -> HttpResponse:
        tenant = self.chosen_tenant()
        try:
            reservations.cancel_reservation(tenant=tenant, name=name)
        except NotFound:
            messages.info(request, f"Reservation {name} does not exist.")
        except InvalidState:
            messages.error(
                request,
                f"Reservation {name} has started: it holds its devices, and is billed, until "
                "its end.",
            )
        else:
            audit.note(request, target_name=name)
            messages.success(request, f"Reservation {name} cancelled: nothing is held or billed.")
        return HttpResponseRedirect(self.list_url(tenant))


class StoragePage(TenantPage):
    list_route = "dashboard:storage-list"
    what = "storage"


class StorageListView(StoragePage, LivePage):
    """The tenant's storages, their phases live (a new one is Pending until the cluster binds
    a volume), and the form to create one."""

    body_template = "dashboard/_storage_table.html"
    name = "storage"

    def get(self, request: HtmxHttpRequest) -> HttpResponse:
        if not self.live:
            return self.show(StorageForm(regions=queries.region_names()))
        tenant, _ = self.tenant_choice()
        if tenant is None:
            # A page of staff who chose no tenant has no table to poll.
            return HttpResponseStopPolling()
        return self.poll(self.table(tenant), f"{updated_at('Storages')}.")

    def post(self, request: HtmxHttpRequest) -> HttpResponse:
        tenant, _ = self.tenant_choice()
        if tenant is None:
            return self.show(StorageForm(regions=queries.region_names()), status=400)
        form = StorageForm(request.POST, regions=queries.region_names())
        if form.is_valid():
            data = form.cleaned_data
            try:
                storage = storage_service.create_storage(
                    tenant=tenant,
                    name=data["name"],
                    size=data["size"],
                    storage_class=data["storage_class"],
                    access_mode=data["access_mode"],
                    region=data["region"],
                )
            except InvalidRequest as error:
                form.report(error.details.get("fields") or {None: [error.message]})
            except StorageConflict as error:
                form.add_error(
                    "name",
                    f"A storage named {error.details.get('name')} exists. Choose another name, "
                    "or delete that storage first.",
                )
            except QuotaExceeded as error:
                # The size's quota is about the size; the count's, about the form as a whole.
                form.add_error(
                    "size" if error.details.get("limit") == "requests.storage" else None,
                    quota_refusal(error.details, asked="storage"),
                )
            else:
                audit.note(request, target_name=storage.name)
                messages.success(
                    request,
                    f"Storage {storage.name} ({storage.size}) created; it is Pending until the "
                    "cluster binds a volume to it.",
                )
                return HttpResponseRedirect(self.list_url(tenant))
        return self.show(form)

    def table(self, tenant: Tenant) -> dict[str, Any]:
        return self.region(
            {"tenant": tenant, "storages": queries.list_storages(tenant)},
            url=self.tenant_url("dashboard:storage-live", tenant),
        )

    def show(self, form: StorageForm, *, status: int = 200) -> HttpResponse:
        tenant, picker = self.tenant_choice()
        return self.page(
            "dashboard/storage.html",
            {
                "tenant": tenant,
                "picker": picker,
                "live": self.table(tenant) if tenant else None,
                "form": form,
                "action": self.list_url(tenant) if tenant else "",
            },
            status=status,
        )


class StorageDeleteView(StoragePage):
    """Delete a storage in two steps: a confirmation page, then a POST; refused while a live
    unit mounts it."""

    acts = True

    def get(self, request: HtmxHttpRequest, name: str) -> HttpResponse:
        tenant = self.chosen_tenant()
        row = self.found(queries.get_storage_row(tenant, name), self.what)
        if row.storage.phase == StoragePhase.TERMINATING:
            messages.info(request, f"Storage {name} is already being deleted.")
            return HttpResponseRedirect(self.list_url(tenant))
        return self.page(
            "dashboard/storage_delete.html",
            {"row": row, "tenant": tenant, "back": self.list_url(tenant)},
        )

    def post(self, request: HtmxHttpRequest, name: str) -> HttpResponse:
        tenant = self.chosen_tenant()
        try:
            storage_service.delete_storage(tenant=tenant, name=name)
        except NotFound:
            messages.info(request, f"Storage {name} was already deleted.")
        except StorageInUse as error:
            units = error.details.get("units") or []
            messages.error(
                request,
                f"Storage {name} was not deleted: unit{'s' if len(units) > 1 else ''} "
                f"{', '.join(units)} mount{'' if len(units) > 1 else 's'} it. Delete "
                f"{'those units' if len(units) > 1 else 'that unit'} first; the storage keeps "
                "its data until then.",
            )
        else:
            messages.success(
                request,
                f"Deletion of storage {name} requested: it goes, with its data, once the cluster "
                "has removed its volume claim.",
            )
        return HttpResponseRedirect(self.list_url(tenant))


class ChooseTenantView(LoginRequiredMixin, View):
    """A user linked to several tenants picks the one to act for (kept in the session)."""

    def next_url(self) -> str:
        target = self.request.POST.get("next") or self.request.GET.get("next") or ""
        if url_has_allowed_host_and_scheme(
            target, allowed_hosts={self.request.get_host()}, require_https=False
        ):
            return target
        return reverse("dashboard:overview")

    def get(self, request: HttpRequest) -> HttpResponse:
        tenants = linked_tenants(request.user)
        sees_all = sees_every_tenant(request.user)
        if not tenants and not sees_all:
            return render(request, "dashboard/no_tenant.html", status=403)
        return render(
            request,
            "dashboard/choose_tenant.html",
            {
                "sees_every_tenant": sees_all,
                "tenants": tenants,
                "current": request.session.get(SESSION_TENANT),
                "next": self.next_url(),
            },
        )

    def post(self, request: HttpRequest) -> HttpResponse:
        chosen = request.POST.get("tenant", "")
        for tenant in linked_tenants(request.user):
            if tenant.slug == chosen:
                audit.note(request, tenant=tenant, target_name=tenant.slug)
                request.session[SESSION_TENANT] = tenant.pk
                return HttpResponseRedirect(self.next_url())
        return self.get(request)

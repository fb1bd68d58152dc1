"""The unit pages, the overview, packages, usage and statements: every view resolves the
caller's scope first (dashboard/pages.py), then reads through dashboard.queries and writes only
through the runtime's services (orders, actions, lifecycle), as the API does. The pages of the
tenant's other resources are dashboard/resources.py's."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import View

from billing import periods, statements
from controlplane.errors import DomainError
from controlplane.validation import fold_case
from dashboard import logtail, queries
from dashboard.access import (
    SESSION_TENANT,
    linked_tenants,
    sees_every_tenant,
)
from dashboard.addresses import unit_access, unit_ssh
from dashboard.charts import NARROW, usage_chart, utilisation_chart
from dashboard.forms import (
    DASHBOARD_OPERATION_ID,
    UnitCreateForm,
    UnitEditForm,
    UnitFilterForm,
    new_operation_id,
)
from dashboard.pages import (
    PAGE_SIZE,
    DashboardView,
    HtmxHttpRequest,
    LiveBodyPage,
    LivePage,
    TenantPage,
    freshness_context,
    updated_at,
)
from dashboard.reasons import status_explanation
from runtime import actions, lifecycle, manifests, orders
from runtime.errors import (
    InvalidRequest,
    NameConflict,
    OperationConflict,
    PreconditionFailed,
    QuotaExceeded,
    StorageInUse,
)
from runtime.models import GPUUnit, OperationKind, RunPolicy, StoragePhase, UnitPhase
from tenancy import audit
from tenancy.models import Tenant


class UnitPage(DashboardView):
    """Pages about one unit, named by its uid in the address."""

    def get_unit(self, uid: UUID) -> GPUUnit:
        unit = self.found(queries.get_unit(self.scope, uid), "unit")
        audit.note(self.request, tenant=unit.tenant, target_name=unit.name)
        return unit


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


NAME_TAKEN = "A live unit named {} already exists. Choose another name, or delete that unit first."


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
        if not form.is_valid():
            self.check_name(form)
        else:
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
                    stop_after=data["stop_after"],
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
                    typed = request.POST.get("name", "").strip()
                    said = f"Unit {unit.name} ordered; it starts shortly."
                    if typed and typed != unit.name:
                        said += f" Names are lower-case: “{typed}” is written {unit.name}."
                    messages.success(request, said)
                return HttpResponseRedirect(reverse("dashboard:unit-detail", args=[unit.uid]))
        return self.page("dashboard/unit_form.html", {"form": form})

    def check_name(self, form: UnitCreateForm) -> None:
        """A form refused for other reasons still says that its name is taken, rather than
        only once the rest is right."""
        name = fold_case(form.cleaned_data.get("name") or "")
        tenant = self.scope.tenant or form.cleaned_data.get("tenant")
        if name and tenant and queries.live_unit_named(tenant, name):
            form.add_error("name", NAME_TAKEN.format(name))

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
            form.add_error("name", NAME_TAKEN.format(error.details.get("name")))
        elif isinstance(error, QuotaExceeded):
            form.add_error("package", error.message)  # tenancy.quota_words
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
            messages.error(request, error.message)  # tenancy.quota_words
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

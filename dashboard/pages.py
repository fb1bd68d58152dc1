"""The kinds of dashboard page every view is one of: a signed-in page in the caller's scope
(`DashboardView`), a page with a region that refreshes itself (`LivePage`, `LiveBodyPage`) and
a page about one tenant's things (`TenantPage`); and what they share (ages, digests of live
regions)."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.mixins import LoginRequiredMixin
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views import View
from django_htmx.http import HttpResponseClientRedirect, HttpResponseStopPolling
from django_htmx.middleware import HtmxDetails

from dashboard.access import NoTenant, Scope, TenantNotChosen, resolve_scope
from dashboard.forms import TenantPickForm
from inventory import selectors as inventory_selectors
from tenancy import audit
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

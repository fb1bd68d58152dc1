"""Who may call what: any tenant key, or an operator tenant's key."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework import permissions
from rest_framework.request import Request

from tenancy.auth import TenantPrincipal
from tenancy.models import Tenant

if TYPE_CHECKING:  # DRF's views import this module (DEFAULT_PERMISSION_CLASSES) as they load
    from rest_framework.views import APIView


def tenant_of(request: Request) -> Tenant | None:
    """The tenant an API request acts for, or None when it carries no key."""
    principal = request.user
    return principal.tenant if isinstance(principal, TenantPrincipal) else None


class IsTenant(permissions.BasePermission):
    message = "An API key is required."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return tenant_of(request) is not None


class IsOperator(IsTenant):
    message = "This endpoint needs an operator key."

    def has_permission(self, request: Request, view: APIView) -> bool:
        tenant = tenant_of(request)
        return tenant is not None and tenant.is_operator

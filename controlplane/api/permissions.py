"""Who may call what: any tenant key, or an operator tenant's key."""

from rest_framework import permissions


def _tenant(request):
    return getattr(request.user, "tenant", None)


class IsTenant(permissions.BasePermission):
    message = "An API key is required."

    def has_permission(self, request, view) -> bool:
        return _tenant(request) is not None


class IsOperator(IsTenant):
    message = "This endpoint needs an operator key."

    def has_permission(self, request, view) -> bool:
        tenant = _tenant(request)
        return tenant is not None and tenant.is_operator

"""The tenant's SSH keys: register once, used by every unit with SSH enabled."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.pagination import PageQuerySerializer, cursor_scope, page_by_name
from controlplane.api.renderers import EnvelopedResponse
from controlplane.api.schema import envelope, error_responses
from controlplane.api.views import ApiView
from controlplane.errors import NotFound
from controlplane.validation import fold_case
from tenancy import services
from tenancy.models import SSHKey, Tenant
from tenancy.permissions import IsTenant, tenant_of
from tenancy.serializers import CreateSSHKeySerializer, SSHKeySerializer


class TenantView(ApiView):
    """An API view acting for the tenant behind the request's key (the runtime's views too)."""

    permission_classes = [IsTenant]

    @property
    def tenant(self) -> Tenant:
        tenant = tenant_of(self.request)
        assert tenant is not None
        return tenant


class SSHKeyListView(TenantView):
    query_serializer = PageQuerySerializer
    query_methods = frozenset({"GET"})

    @extend_schema(
        summary="The tenant's SSH public keys, by name, a page at a time (meta.nextCursor)",
        parameters=[PageQuerySerializer],
        responses={
            200: envelope(SSHKeySerializer, name="SSHKeyList", many=True),
            **error_responses(400, 401),
        },
    )
    def get(self, request: Request) -> Response:
        return EnvelopedResponse(
            page_by_name(
                SSHKey.objects.filter(tenant=self.tenant),
                self.validated_query(request),
                scope=cursor_scope(self.tenant.pk, "ssh-keys"),
                serializer=SSHKeySerializer,
            )
        )

    @extend_schema(
        summary="Register an SSH public key",
        request=CreateSSHKeySerializer,
        responses={
            201: envelope(SSHKeySerializer, name="SSHKeyResponse"),
            **error_responses(400, 401, 409),
        },
    )
    def post(self, request: Request) -> Response:
        serializer = CreateSSHKeySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        key = services.add_ssh_key(
            tenant=self.tenant,
            name=serializer.validated_data["name"],
            public_key=serializer.validated_data["publicKey"],
        )
        return Response(SSHKeySerializer(key).data, status=201)


class SSHKeyDetailView(TenantView):
    def _key(self, name: str) -> SSHKey:
        key = SSHKey.objects.filter(tenant=self.tenant, name=fold_case(name.strip())).first()
        if key is None:
            raise NotFound(f"SSH key {name} not found.")
        return key

    @extend_schema(
        summary="One SSH key",
        responses={
            200: envelope(SSHKeySerializer, name="SSHKeyDetail"),
            **error_responses(401, 404),
        },
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(SSHKeySerializer(self._key(name)).data)

    @extend_schema(
        summary="Remove an SSH key (units using it lose it)",
        responses={204: None, **error_responses(401, 404)},
    )
    def delete(self, request: Request, name: str) -> Response:
        services.remove_ssh_key(tenant=self.tenant, name=name)
        return Response(status=204)

"""Read-only packages API: what customers can order, and how many units fit right now."""

from django.conf import settings
from django.utils.module_loading import import_string
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import viewsets
from rest_framework.response import Response

from catalog import selectors
from catalog.serializers import PackageSerializer
from controlplane.api.errors import NotFound
from controlplane.api.schema import envelope, error_responses


def _availability(request, packages) -> dict:
    # The provider lives above the catalog (it needs the inventory and the tenant's quota),
    # so it is named in settings rather than imported.
    return import_string(settings.PACKAGE_AVAILABILITY)(request, packages)


@extend_schema_view(
    list=extend_schema(
        summary="Active packages with availability",
        responses={
            200: envelope(PackageSerializer, name="PackageList", many=True),
            **error_responses(401),
        },
    ),
    retrieve=extend_schema(
        summary="One active package",
        responses={
            200: envelope(PackageSerializer, name="PackageDetail"),
            **error_responses(401, 404),
        },
    ),
)
class PackageViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = PackageSerializer
    lookup_value_regex = "[^/]+"

    def get_queryset(self):
        return selectors.list_active_packages()

    def get_object(self):
        package = selectors.get_active_package(self.kwargs["pk"])
        if package is None:
            raise NotFound(f'Package "{self.kwargs["pk"]}" does not exist or is not on sale.')
        return package

    def list(self, request, *args, **kwargs) -> Response:
        packages = list(self.get_queryset())
        context = {"availability": _availability(request, packages)}
        return Response(PackageSerializer(packages, many=True, context=context).data)

    def retrieve(self, request, *args, **kwargs) -> Response:
        package = self.get_object()
        context = {"availability": _availability(request, [package])}
        return Response(PackageSerializer(package, context=context).data)

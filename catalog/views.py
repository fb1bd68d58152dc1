"""Read-only packages API: what customers can order."""

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import viewsets

from catalog import selectors
from catalog.serializers import PackageSerializer
from controlplane.api.errors import NotFound
from controlplane.api.schema import envelope, error_responses


@extend_schema_view(
    list=extend_schema(
        summary="Active packages",
        responses={200: envelope(PackageSerializer, name="PackageList", many=True)},
    ),
    retrieve=extend_schema(
        summary="One active package",
        responses={
            200: envelope(PackageSerializer, name="PackageDetail"),
            **error_responses(404),
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

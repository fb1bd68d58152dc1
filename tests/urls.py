"""The real URLconf plus probe views that exercise the API plumbing in tests."""

from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.urls import handler404, handler500
from controlplane.urls import urlpatterns as real_urlpatterns


class EchoView(APIView):
    """Parses the JSON body the way every command endpoint does, and returns it."""

    authentication_classes: list = []
    permission_classes: list = []

    def post(self, request):
        return Response(request.data, status=201)


class BrokenView(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    def get(self, request):
        raise RuntimeError("boom")


urlpatterns = [
    path("api/v1/_test/echo", EchoView.as_view()),
    path("api/v1/_test/broken", BrokenView.as_view()),
    *real_urlpatterns,
]

__all__ = ["handler404", "handler500", "urlpatterns"]

"""The base of every API view: query parameters it does not define are refused, as unknown
body fields are, so a misspelt filter (`?packageId=`) never silently returns everything."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.views import APIView


class StrictQueryMixin:
    """Refuses query parameters outside `query_params` (or the fields of `query_serializer`,
    which `validated_query` checks them with) with a 400 in the envelope, once the request is
    authenticated and allowed (so a stranger still learns only 401)."""

    query_params: frozenset[str] = frozenset()
    query_serializer: type[serializers.Serializer] | None = None
    # The methods that take the query parameters, when not all: a list's GET pages and
    # filters, while its POST takes everything in its body.
    query_methods: frozenset[str] | None = None

    def allowed_query_params(self, request: Request) -> frozenset[str]:
        if self.query_methods is not None and request.method not in self.query_methods:
            return frozenset()
        if self.query_serializer is not None:
            return frozenset(self.query_serializer().fields)
        return self.query_params

    def validated_query(self, request: Request) -> dict[str, Any]:
        """The query parameters checked by `query_serializer` (a 400 naming each bad one)."""
        assert self.query_serializer is not None
        query = self.query_serializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return dict(query.validated_data)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        unknown = sorted(set(request.query_params) - self.allowed_query_params(request))
        if unknown:
            raise exceptions.ValidationError(
                {name: ["Unknown query parameter."] for name in unknown}
            )


class ApiView(StrictQueryMixin, APIView):
    """An APIView that refuses unknown query parameters."""


class NotJsonBodyMixin:
    """A view whose answer is not JSON (a log, an export): it is sent whatever the client
    accepts, and its refusals are still the JSON envelope."""

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        return super().perform_content_negotiation(request, force=True)  # type: ignore[misc]

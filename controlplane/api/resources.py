"""The API's generic edge of a declared resource (controlplane/resources.py): one list (a page
at a time, in key order, meta.nextCursor), one create, one read and one delete, each in the
error envelope, for every resource an `Endpoint` names. What is truly a resource's own (a
unit's actions, a webhook's secret rotation and deliveries) stays in its app's views."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.pagination import PageQuerySerializer, cursor_scope, paginate
from controlplane.api.renderers import EnvelopedResponse
from controlplane.api.schema import envelope, error_responses
from controlplane.api.views import ApiView
from controlplane.resources import Resource


@dataclass(frozen=True)
class Words:
    """What the OpenAPI document says of each operation."""

    list: str
    create: str
    one: str
    delete: str
    create_details: str = ""


@dataclass(frozen=True)
class Endpoint:
    """A declared resource as the API serves it at /<collection> and /<collection>/{key}.

    - `schema`: the stem of its OpenAPI components (<schema>List, <schema>Response, ...);
    - `output`, `input`: its serializers; `made_output` answers a create when that shows
      more (a secret shown once);
    - `rows(tenant)`: the tenant's, for the list; `one(tenant, key)`: the one an address
      names (NotFound else);
    - `context(tenant, page)`: what `output` needs for a page, read at once; `fresh(thing)`:
      what it needs for one just made or deleted, known without reading (nothing mounts a
      new storage);
    - `deleted`: the delete's status (204: no body; 200, 202: the thing as it is now);
    - `order`: the field the list is in order of, and its cursors name rows by;
    - `key`: the address's parameter;
    - the error statuses each operation documents.
    """

    resource: Resource
    schema: str
    output: type[serializers.Serializer]
    input: type[serializers.Serializer]
    rows: Callable[[Any], QuerySet]
    one: Callable[[Any, str], Any]
    words: Words
    made_output: type[serializers.Serializer] | None = None
    context: Callable[[Any, list[Any]], Mapping[str, Any]] = field(default=lambda tenant, page: {})
    fresh: Callable[[Any], Mapping[str, Any]] = field(default=lambda thing: {})
    deleted: int = 204
    order: str = "name"
    key: str = "name"
    create_errors: tuple[int, ...] = (400, 401, 409)
    delete_errors: tuple[int, ...] = (401, 404, 409)


def views(endpoint: Endpoint, *, base: type[ApiView]) -> tuple[type[ApiView], type[ApiView]]:
    """The list view (GET a page, POST a new one) and the detail view (GET, DELETE) of
    `endpoint`, on `base` (the view that knows the caller's tenant as `self.tenant`)."""
    name, words = endpoint.schema, endpoint.words
    made = endpoint.made_output or endpoint.output
    made_response = envelope(made, name=f"{name}Response")

    def page_of(view: Any, request: Request) -> Response:
        query = view.validated_query(request)
        page, next_cursor = paginate(
            endpoint.rows(view.tenant),
            cursor=query.get("cursor"),
            limit=query["limit"],
            scope=cursor_scope(view.tenant.pk, endpoint.resource.name),
            key=endpoint.order,
            position=endpoint.order,
            newest_first=False,
        )
        context = endpoint.context(view.tenant, page)
        return EnvelopedResponse(
            {
                "data": endpoint.output(page, many=True, context=context).data,
                "meta": {"nextCursor": next_cursor},
            }
        )

    def create(view: Any, request: Request) -> Response:
        given = endpoint.input(data=request.data)
        given.is_valid(raise_exception=True)
        result = endpoint.resource.create(view.tenant, given.validated_data)
        context = endpoint.fresh(result.thing)
        return Response(made(result.thing, context=context).data, status=201 if result.new else 200)

    def read(view: Any, request: Request, **address: str) -> Response:
        return Response(endpoint.output(endpoint.one(view.tenant, address[endpoint.key])).data)

    def delete(view: Any, request: Request, **address: str) -> Response:
        gone = endpoint.resource.delete(view.tenant, address[endpoint.key])
        if endpoint.deleted == 204:
            return Response(status=204)
        context = endpoint.fresh(gone)
        return Response(endpoint.output(gone, context=context).data, status=endpoint.deleted)

    created: dict[int | tuple[int, str], Any] = {201: made_response}
    if "replaces" in words.create_details:
        created[200] = OpenApiResponse(made_response, description="an existing one replaced")
    list_view = type(
        f"{name}ListView",
        (base,),
        {
            "query_serializer": PageQuerySerializer,
            "query_methods": frozenset({"GET"}),
            "__doc__": f"The tenant's {endpoint.resource.plural}, and making one.",
            "get": extend_schema(
                summary=words.list,
                parameters=[PageQuerySerializer],
                responses={
                    200: envelope(endpoint.output, name=f"{name}List", many=True),
                    **error_responses(400, 401),
                },
            )(page_of),
            "post": extend_schema(
                summary=words.create,
                description=words.create_details or None,
                request=endpoint.input,
                responses={**created, **error_responses(*endpoint.create_errors)},
            )(create),
        },
    )
    gone_response: Any = (
        None if endpoint.deleted == 204 else envelope(endpoint.output, name=f"{name}Deleted")
    )
    detail_view = type(
        f"{name}DetailView",
        (base,),
        {
            "__doc__": f"One of the tenant's {endpoint.resource.plural}.",
            "get": extend_schema(
                summary=words.one,
                responses={
                    200: envelope(endpoint.output, name=f"{name}Detail"),
                    **error_responses(401, 404),
                },
            )(read),
            "delete": extend_schema(
                summary=words.delete,
                responses={
                    endpoint.deleted: gone_response,
                    **error_responses(*endpoint.delete_errors),
                },
            )(delete),
        },
    )
    return list_view, detail_view

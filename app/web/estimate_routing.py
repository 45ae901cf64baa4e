"""`EstimateRoute`: the estimate routes' request handling without FastAPI's generic machinery
for the bodies it accepts.

A computed estimate costs a few hundred microseconds, and a third of it went to FastAPI's
generic path: the body parsed by `json.loads`, validated from Python objects, then every
dependency solved through its general resolver. An estimate route takes only a JSON body (one
pydantic model), the `Request`, dependencies that read `request.app.state`, and optional text
headers, so the route here parses the body once with the model's own JSON validator
(pydantic-core) and calls the endpoint with those. Whatever that validator refuses (malformed
JSON, an invalid field, another content type), and any route with another shape, goes down
FastAPI's generic path unchanged, so every error is the same problem+json as before; the
route's OpenAPI document is FastAPI's own, from the same signature.

It reads FastAPI's private `routing._effective_route_context_var` and its `Dependant` model,
checked against the releases of `app.web.dispatch.CHECKED_AGAINST` (pyproject.toml bounds
FastAPI and Starlette to them; tests/api/test_dispatch.py fails on another).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi import routing as fastapi_routing
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from app.web.middleware import replayed_receive
from app.web.schemas import NUL_FREE

__all__ = ["EstimateRoute"]

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
Call = Callable[[Request, BaseModel], Awaitable[Response]]
Parse = Callable[[Request], Awaitable[tuple[BaseModel | None, bytes | None]]]

_JSON = ("application/json", "application/json; charset=utf-8")
"""Content types the direct path takes; any other (`+json` suffixes, other parameters) goes
down FastAPI's generic path, which knows them all."""


class EstimateRoute(APIRoute):
    """An `APIRoute` that answers a valid JSON body of a route shaped as described above without
    FastAPI's generic request handling (dependency overrides, when any are set, go that way
    too)."""

    def get_route_handler(self) -> Handler:
        generic = super().get_route_handler()
        # Under `include_router` the handler is built for the route as included (with the
        # router's dependencies): the same dependant FastAPI's own handler solves.
        included = fastapi_routing._effective_route_context_var.get()
        dependant = included.dependant if included is not None else self.dependant
        if included is not None and included.original_route is not self:
            dependant = self.dependant
        direct = _direct_call(dependant)
        if direct is None:
            return generic
        model, call = direct

        async def parsed(request: Request) -> tuple[BaseModel | None, bytes | None]:
            """The body, when this route answers it directly; and the bytes read, if any."""
            if request.headers.get("content-type") not in _JSON or request.app.dependency_overrides:
                return None, None
            raw = await request.body()
            try:
                return model.model_validate_json(raw, context=_nul_context(raw)), raw
            except ValidationError:
                return None, raw  # FastAPI's path words the errors

        async def handle(request: Request) -> Response:
            body, _ = await parsed(request)
            return await (generic(request) if body is None else call(request, body))

        if included is None or included.original_route is self:
            self._direct_parts()[id(included)] = (included, parsed, call)
        return handle

    def _direct_parts(self) -> dict[int, tuple[Any, Parse, Call]]:
        parts: dict[int, tuple[Any, Parse, Call]] | None = self.__dict__.get("_direct")
        if parts is None:
            parts = self.__dict__["_direct"] = {}
        return parts

    def direct_app(self, context: Any) -> ASGIApp | None:
        """An ASGI app of this route as included in `context` (an effective route context; None:
        not included) that answers a body it takes without FastAPI's per-request wrapping (two
        exit stacks, for dependencies with `yield`, which it has none of, and a second exception
        wrapper: the application's catches the same), about 5 µs a request; everything else
        goes to the route's own app, the body read replayed to it. None when the route has no
        direct path or a body-size limit of FastAPI's own applies."""
        found = self._direct_parts().get(id(context))
        limit = self.max_body_size if context is None else getattr(context, "max_body_size", None)
        if found is None or found[0] is not context or limit is not None:
            return None
        _, parsed, call = found
        route = self

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            request = Request(scope, receive, send)
            body, raw = await parsed(request)
            if body is None:
                full: ASGIApp = route.app if context is None else context.app
                await full(scope, receive if raw is None else replayed_receive(raw, receive), send)
                return
            response = await call(request, body)
            await response(scope, receive, send)

        return app


def _nul_context(raw: bytes) -> dict[str, bool] | None:
    """`NUL_FREE` for a body that cannot hold a NUL (no `\\u0000` escape in it), else None:
    each text field is searched."""
    return None if b"\\u0000" in raw else NUL_FREE


def _direct_call(dependant: Dependant) -> tuple[type[BaseModel], Call] | None:
    """The body model and a call of the endpoint with the body, request, `request`-only
    dependencies and text headers; None for an endpoint of any other shape."""
    endpoint = dependant.call
    if (
        endpoint is None
        or not inspect.iscoroutinefunction(endpoint)
        or len(dependant.body_params) != 1
        or dependant.path_params
        or dependant.query_params
        or dependant.cookie_params
        or dependant.response_param_name
        or dependant.background_tasks_param_name
        or dependant.websocket_param_name
        or dependant.http_connection_param_name
        or dependant.security_scopes_param_name
    ):
        return None
    body_field = dependant.body_params[0]
    model = body_field.field_info.annotation
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    dependencies: list[tuple[str, Callable[[Request], Awaitable[Any]]]] = []
    for sub in dependant.dependencies:
        if sub.name is None or sub.call is None or not _reads_request_only(sub):
            return None
        dependencies.append((sub.name, sub.call))
    headers: list[tuple[str, str]] = []
    for header in dependant.header_params:
        info = header.field_info
        if info.annotation != (str | None) or info.default is not None or info.metadata:
            return None
        name = header.alias
        if getattr(info, "convert_underscores", True):
            name = name.replace("_", "-")
        headers.append((header.name, name.lower()))
    body_name, request_name = body_field.name, dependant.request_param_name

    async def call(request: Request, body: BaseModel) -> Response:
        values: dict[str, Any] = {body_name: body}
        if request_name is not None:
            values[request_name] = request
        for name, dependency in dependencies:
            values[name] = await dependency(request)
        request_headers = request.headers
        for name, header in headers:
            values[name] = request_headers.get(header)
        response: Response = await endpoint(**values)
        return response

    return model, call


def _reads_request_only(dependant: Dependant) -> bool:
    """A dependency that is an `async def` of the `Request` alone (`get_spec_cache`)."""
    call = dependant.call
    return (
        call is not None
        and inspect.iscoroutinefunction(call)
        and dependant.request_param_name is not None
        and not dependant.dependencies
        and not dependant.body_params
        and not dependant.path_params
        and not dependant.query_params
        and not dependant.header_params
        and not dependant.cookie_params
        and len(inspect.signature(call).parameters) == 1
    )

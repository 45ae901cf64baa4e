"""`StaticDispatch`: a request for a route without path parameters goes straight to that route.

FastAPI (0.16x) finds a request's route by walking its routers: the application's router asks
each included router whether it matches, the one that does matches again to pick its route, and
every comparison saves and restores keys in the request scope. For the estimate endpoints that
walk took ~30 µs of a ~180 µs request. Here every route whose path has no parameters is looked up
by (method, path) in one dict, and the request is handed to the same handler FastAPI would
call, with the scope keys FastAPI's own routing leaves (`route`, `endpoint`, `path_params`, the
effective route, the included router). A route enters the table only when nothing before it
could answer the same method and path (a parameterised route, a mount, an earlier duplicate),
so the answer is the one FastAPI's routing gives; every other request (parameters, 404, 405,
redirects) takes FastAPI's routing unchanged.

The table reads FastAPI's routing internals (`_get_fastapi_scope`, `_IncludedRouter`, the
effective-route context and telemetry hook), checked against FastAPI 0.165.0 and Starlette
1.10.0 (`CHECKED_AGAINST`; pyproject.toml bounds both to those releases). When they are not as
this module knows them (a release that renamed them), the table is empty and a warning is logged
once: requests are routed by FastAPI, as correct as ever and only slower;
`tests/api/test_dispatch.py` fails then, and on any other release, so an upgrade re-checks them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["CHECKED_AGAINST", "StaticDispatch", "install_static_dispatch"]

CHECKED_AGAINST = {"fastapi": "0.165.0", "starlette": "1.10.0"}
"""The releases whose private names this module and `app.web.estimate_routing` read."""

_log = logging.getLogger("ridgeline")

try:  # FastAPI's routing internals; see the module docstring.
    from fastapi.routing import (
        _FASTAPI_EFFECTIVE_ROUTE_CONTEXT_KEY,
        _FASTAPI_INCLUDED_ROUTER_KEY,
        _get_fastapi_scope,
        _IncludedRouter,
    )
    from fastapi.telemetry._api import _route_selected
except ImportError:  # pragma: no cover - exercised only by a FastAPI without them
    _INTERNALS = False
else:
    _INTERNALS = True


@dataclass(frozen=True, slots=True)
class _Target:
    """What FastAPI's routing would have selected for one (method, path)."""

    route: APIRoute
    endpoint: Callable[..., Any]
    included: Any
    """The `_IncludedRouter` the route was reached through."""
    context: Any
    """The route's `_EffectiveRouteContext`: its handler (`app`) as included."""
    path_format: str
    app: ASGIApp
    """What answers: the route's `direct_app` for this context where it has one (an estimate
    route: `app.web.estimate_routing`), else the context's handler."""


class StaticDispatch:
    """The application router's entry point: a table hit goes to its route's handler, anything
    else to `generic` (FastAPI's routing)."""

    def __init__(self, app: FastAPI, generic: ASGIApp) -> None:
        self.router = app.router
        self.generic = generic
        self.table = _table(app) if _INTERNALS else {}
        if not self.table:
            _log.warning("static route dispatch is off: FastAPI's routing internals changed")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Behind a proxy prefix (`root_path`) FastAPI matches the path less the prefix: its own
        # routing handles those.
        target = (
            self.table.get((scope["method"], scope["path"]))
            if scope["type"] == "http" and not scope.get("root_path")
            else None
        )
        if target is None:
            await self.generic(scope, receive, send)
            return
        if "router" not in scope:
            scope["router"] = self.router
        fastapi_scope = _get_fastapi_scope(scope)
        fastapi_scope[_FASTAPI_INCLUDED_ROUTER_KEY] = target.included
        fastapi_scope[_FASTAPI_EFFECTIVE_ROUTE_CONTEXT_KEY] = target.context
        scope["endpoint"] = target.endpoint
        scope["path_params"] = {}
        scope["route"] = target.route
        _route_selected(scope=scope, path=target.path_format)
        await target.app(scope, receive, send)


def install_static_dispatch(app: FastAPI) -> StaticDispatch:
    """Put a `StaticDispatch` in front of `app`'s router, over the routes it has now (routes
    added later are routed by FastAPI)."""
    dispatch = StaticDispatch(app, app.router.middleware_stack)
    app.router.middleware_stack = dispatch
    return dispatch


def _table(app: FastAPI) -> dict[tuple[str, str], _Target]:
    """(method, path) -> target, for the API routes without path parameters that FastAPI's
    routing would select for exactly that method and path."""
    table: dict[tuple[str, str], _Target] = {}
    if app.router.form_limits:
        return table  # form limits applied on the way down: not replayed here
    earlier: list[Callable[[Scope], tuple[Match, Scope]]] = []
    for route in app.router.routes:
        if not isinstance(route, _IncludedRouter):
            earlier.append(route.matches)
            continue
        if route.include_context.form_limits:
            return {}  # form limits applied on the way down: not replayed here
        for context in route.effective_route_contexts():
            original = context.original_route
            endpoint = context.endpoint
            static = not getattr(context, "param_convertors", True) and context.app is not None
            if isinstance(original, APIRoute) and endpoint is not None and static:
                path = context.path_format
                for method in sorted(context.methods or ()):
                    probe = {"type": "http", "method": method, "path": path, "root_path": ""}
                    if (method, path) in table or any(
                        matches(probe)[0] is Match.FULL for matches in earlier
                    ):
                        continue
                    direct = getattr(original, "direct_app", None)
                    # `static` above: the context's app is set.
                    handler = (direct(context) if direct is not None else None) or context.app
                    table[method, path] = _Target(
                        original,
                        endpoint,
                        route,
                        context,
                        context.path_format,
                        cast(ASGIApp, handler),
                    )
            earlier.append(context.matches)
    return table

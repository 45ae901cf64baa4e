"""The app's routes as one flat table of (path template, methods), for the answers that need
every route at a path: the `Allow` header of a 405, and the route template a refused request
(413, 414, 415: never routed) is counted on."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts

__all__ = ["RouteEntry", "allowed_methods", "route_table", "template_of"]


@dataclass(frozen=True, slots=True)
class RouteEntry:
    path: str
    pattern: re.Pattern[str]
    methods: frozenset[str]


def route_table(app: FastAPI) -> tuple[RouteEntry, ...]:
    """Every route of `app` (included routers flattened), built once per app."""
    table: tuple[RouteEntry, ...] | None = getattr(app.state, "route_table", None)
    if table is None:
        entries = []
        for context in iter_route_contexts(app.routes):
            path = getattr(context, "path", None)
            pattern = getattr(context, "path_regex", None)
            if isinstance(path, str) and pattern is not None:
                methods = frozenset(getattr(context, "methods", None) or ())
                entries.append(RouteEntry(path, pattern, methods))
        table = tuple(entries)
        app.state.route_table = table
    return table


def template_of(app: FastAPI, path: str) -> str | None:
    """The path template of the first route matching `path`, or None."""
    return next((entry.path for entry in route_table(app) if entry.pattern.match(path)), None)


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method some route serves at `path`, sorted. A route of that literal path
    (`/v1/models/hf-import`) speaks for it alone: the templated routes it also matches
    (`/v1/models/{entry_id}`) serve no entry there (such ids are reserved)."""
    matching = [entry for entry in route_table(app) if entry.pattern.match(path)]
    literal = [entry for entry in matching if "{" not in entry.path]
    methods: set[str] = set()
    for entry in literal or matching:
        methods |= entry.methods
    return sorted(methods)

"""RFC 9457 problem documents: the one shape every error of the API takes.

Every handler here ends in `problem_response`; a route never builds an error body by hand.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import DomainError, FieldProblem
from app.logs import REQUEST_ID
from app.web.route_table import allowed_methods

__all__ = [
    "PROBLEM_CONTENT_TYPE",
    "PROBLEM_TYPES",
    "ApiProblem",
    "install_problem_handlers",
    "is_busy",
    "is_sqlite_busy",
    "problem_body",
    "problem_response",
]

PROBLEM_CONTENT_TYPE = "application/problem+json"
_log = logging.getLogger("ridgeline.errors")

# slug -> (title, what it means); served at /problems/{slug}, named by each document's `type`.
PROBLEM_TYPES: dict[str, tuple[str, str]] = {
    "validation-error": ("Invalid request", "A field has the wrong type, range or shape."),
    "invalid-input": ("Invalid input", "Well-formed, but physically or logically impossible."),
    "malformed-json": ("Malformed JSON", "The body is not valid JSON."),
    "unsupported-media-type": ("Unsupported media type", "Send application/json."),
    "payload-too-large": ("Payload too large", "The body exceeds the server's limit."),
    "bad-request": ("Bad request", "The request cannot be read as sent."),
    "uri-too-long": ("URI too long", "The request target exceeds the server's limit."),
    "bad-etag": ("Bad ETag", "If-Match must hold quoted entity tags, as ETag returns them."),
    "unauthenticated": ("Authentication required", "Writes need an API key."),
    "forbidden": ("Forbidden", "The API key is not one this service accepts."),
    "not-found": ("Not found", "No such resource."),
    "method-not-allowed": ("Method not allowed", "The resource does not support that method."),
    "not-acceptable": ("Not acceptable", "The resource cannot answer in the media type asked."),
    "already-exists": ("Already exists", "An entry with that id exists."),
    "conflict": ("Conflict", "The change collides with the current state."),
    "precondition-failed": ("Precondition failed", "If-Match names a stale version."),
    "database-unavailable": ("Service unavailable", "The database cannot be reached."),
    "busy": (
        "Busy",
        "Other writers hold what this request needs (a row lock, the SQLite write lock, every "
        "pooled connection); retry after the Retry-After seconds.",
    ),
    "client-closed-request": (
        "Client closed request",
        "The client disconnected before the answer; its work was stopped.",
    ),
    "too-many-requests": (
        "Too many requests",
        "The server's heavy-work capacity is taken; retry after the Retry-After seconds.",
    ),
    "internal-error": ("Internal server error", "An unexpected error; the request id tells."),
}

_STATUS_SLUGS = {
    400: "bad-request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    409: "conflict",
    412: "precondition-failed",
    413: "payload-too-large",
    414: "uri-too-long",
    415: "unsupported-media-type",
    422: "validation-error",
    429: "too-many-requests",
    503: "database-unavailable",
}


class ApiProblem(DomainError):
    """An error of the HTTP layer itself (authentication, headers, media types)."""

    def __init__(
        self,
        status: int,
        slug: str,
        detail: str,
        errors: tuple[FieldProblem, ...] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail, errors)
        self.status = status
        self.slug = slug
        self.title = PROBLEM_TYPES[slug][0]
        self.headers = headers or {}


def problem_body(
    status: int,
    slug: str,
    detail: str,
    instance: str,
    *,
    errors: Iterable[FieldProblem] = (),
    title: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": f"/problems/{slug}",
        "title": title or PROBLEM_TYPES.get(slug, ("Error", ""))[0],
        "status": status,
        "detail": detail,
        "instance": instance,
    }
    request_id = REQUEST_ID.get()
    if request_id is not None:
        body["request_id"] = request_id
    error_list = [{"field": e.field, "location": e.location, "message": e.message} for e in errors]
    if error_list or status == 422:
        body["errors"] = error_list
    return body


def problem_response(
    request: Request,
    status: int,
    slug: str,
    detail: str,
    *,
    errors: Iterable[FieldProblem] = (),
    headers: dict[str, str] | None = None,
    title: str | None = None,
) -> JSONResponse:
    return JSONResponse(
        problem_body(status, slug, detail, request.url.path, errors=errors, title=title),
        status_code=status,
        media_type=PROBLEM_CONTENT_TYPE,
        headers=headers,
    )


# A cross-field validator names the field it refuses at the head of its message:
# "p10_ms: must not exceed median_ms" or "points[0].prompt_tokens: ...".
_NAMED_FIELD = re.compile(r"^([A-Za-z_][\w]*(?:(?:\.[A-Za-z_]\w*)|\[\d+\])*): (.+)$", re.S)
_LOCATIONS = {"body", "query", "path", "header"}
# Raised by a member's own validators: about its content, not about the value's type.
_VALIDATOR_ERRORS = {"value_error", "assertion_error"}


@dataclass(frozen=True, slots=True)
class _Located:
    """Where in the request one validation error points, union-member tags taken out."""

    location: str
    path: tuple[str, ...]
    member_mismatch: bool
    """The error only says the value is not of one member's type (not a `str`, of
    `str | Model`)."""
    unions: frozenset[tuple[str, ...]]
    """Paths of the unions whose member this error went into."""


_ABSENT = object()


def _child(node: Any, part: str | int) -> Any:
    """`node[part]` where the decoded body has it, else `_ABSENT`."""
    if isinstance(node, dict):
        return node.get(part, _ABSENT)
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return _ABSENT


def _locate(loc: Sequence[Any], body: Any, error_type: str) -> _Located:
    """Pydantic puts the name of each union member it tried into `loc` (`model.ModelArchitecture.
    num_layers` for `model: str | ModelArchitecture`). Walking the body along `loc` tells a
    member name, which the body does not hold, from a key or an index, which it does."""
    parts = [str(part) if not isinstance(part, int) else part for part in loc]
    location = parts[0] if parts and parts[0] in _LOCATIONS else "body"
    rest = parts[1:] if parts and parts[0] == location else parts
    if location != "body" or not isinstance(body, dict | list):
        return _Located(location, tuple(str(p) for p in rest), False, frozenset())
    node: Any = body
    path: list[str] = []
    unions: set[tuple[str, ...]] = set()
    mismatch = False
    for index, part in enumerate(rest):
        last = index == len(rest) - 1
        child = _child(node, part)
        if child is _ABSENT and not (last and error_type == "missing"):
            unions.add(tuple(path))  # `part` names the union member being tried
            mismatch = last and error_type not in _VALIDATOR_ERRORS
            continue
        node = child
        path.append(str(part))
    return _Located(location, tuple(path), mismatch, frozenset(unions))


def _field_problems(errors: Sequence[Any], body: Any = None) -> list[FieldProblem]:
    """One `FieldProblem` per validation error, at its field's dotted path in the request. Where
    a value matched no member of a union, only the errors inside the member it was meant for
    are kept (an object sent as `model` is not also "not a valid string")."""
    located = [
        (error, _locate(error.get("loc", ()), body, error.get("type", ""))) for error in errors
    ]
    entered = {union for _, where in located if not where.member_mismatch for union in where.unions}
    problems = []
    for error, where in located:
        if where.member_mismatch and where.path in entered:
            continue
        path = list(where.path)
        message = str(error.get("msg", "invalid"))
        if error.get("type") == "extra_forbidden":
            message = "unknown field"
        elif error.get("type") == "value_error":
            message = message.removeprefix("Value error, ")
            if named := _NAMED_FIELD.match(message):
                inner = named.group(1).replace("[", ".").replace("]", "").split(".")
                if path[-len(inner) :] != inner:  # a field validator's own name is not repeated
                    path = [*path, *inner]
                message = named.group(2)
        problems.append(FieldProblem(".".join(path) or where.location, message, where.location))
    return problems


_INDEX = re.compile(r"\[(\d+)\]")


def _dotted(problem: FieldProblem) -> FieldProblem:
    """`run_ids[0]`, as a service names a field, in the dotted form every problem's `field`
    takes (`run_ids.0`, as validation errors have it)."""
    field = _INDEX.sub(r".\1", problem.field)
    return problem if field == problem.field else replace(problem, field=field)


async def _domain_error(request: Request, exc: DomainError) -> JSONResponse:
    headers = getattr(exc, "headers", None)
    return problem_response(
        request,
        exc.status,
        exc.slug,
        exc.detail,
        errors=[_dotted(problem) for problem in exc.errors],
        headers=headers,
        title=exc.title,
    )


async def _request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(error.get("type") == "json_invalid" for error in errors):
        ctx = next(e for e in errors if e.get("type") == "json_invalid").get("ctx", {})
        reason = ctx.get("error", "cannot be parsed")
        return problem_response(request, 400, "malformed-json", f"Body is not JSON: {reason}.")
    problems = _field_problems(errors, exc.body)
    detail = "; ".join(f"{p.field}: {p.message}" for p in problems[:5])
    return problem_response(request, 422, "validation-error", detail, errors=problems)


async def _pydantic_validation(request: Request, exc: ValidationError) -> JSONResponse:
    # Raised by a service re-validating a merged document (PATCH); fields are body fields.
    problems = _field_problems([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()])
    detail = "; ".join(f"{p.field}: {p.message}" for p in problems[:5])
    return problem_response(request, 422, "validation-error", detail, errors=problems)


async def _http_exception(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    slug = _STATUS_SLUGS.get(exc.status_code, "bad-request")
    detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"No route for {request.method} {request.url.path}."
    headers = dict(exc.headers) if exc.headers else {}
    if exc.status_code == 405:
        # Starlette names only the first matching route's methods; RFC 9110 15.5.6 wants all.
        allowed = allowed_methods(request.app, request.url.path)
        headers["Allow"] = ", ".join(allowed)
        detail = f"{request.method} is not served at {request.url.path}; use {', '.join(allowed)}."
    return problem_response(request, exc.status_code, slug, detail, headers=headers or None)


# SQLSTATEs of contention, not outage: lock_timeout (55P03), statement_timeout or a cancel
# (57014), serialization failure (40001), deadlock detected (40P01).
_BUSY_SQLSTATES = frozenset({"55P03", "57014", "40001", "40P01"})


def is_sqlite_busy(error: DBAPIError) -> bool:
    """SQLite's "database is locked": another writer held the lock past the busy timeout."""
    return "database is locked" in str(error.orig) or "database table is locked" in str(error.orig)


def is_busy(error: Exception) -> bool:
    """Whether a database error is contention (retry shortly) rather than an outage."""
    if isinstance(error, PoolTimeout):
        return True
    if not isinstance(error, DBAPIError):
        return False
    sqlstate = getattr(error.orig, "sqlstate", None)
    return sqlstate in _BUSY_SQLSTATES or is_sqlite_busy(error)


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    if is_busy(exc):
        _log.warning("database busy: %s", type(getattr(exc, "orig", exc)).__name__)
        return problem_response(
            request,
            503,
            "busy",
            "The database is busy with other writers; retry shortly.",
            headers={"Retry-After": "1"},
        )
    _log.error("database unavailable", exc_info=exc)
    return problem_response(
        request,
        503,
        "database-unavailable",
        "The database cannot be reached; retry shortly.",
        headers={"Retry-After": "5"},
    )


def install_problem_handlers(app: FastAPI) -> None:
    handlers: list[tuple[type[Exception], Callable[[Request, Any], Awaitable[JSONResponse]]]] = [
        (DomainError, _domain_error),
        (RequestValidationError, _request_validation),
        (ValidationError, _pydantic_validation),
        (StarletteHTTPException, _http_exception),
        (OperationalError, _database_error),
        (PoolTimeout, _database_error),
    ]
    for exc_type, handler in handlers:
        app.add_exception_handler(exc_type, handler)

"""The OpenAPI document as the API behaves: every error a problem document, every status an
operation can answer declared, and each request body's example where Swagger UI looks for it.

FastAPI documents its own validation errors as `application/json` `HTTPValidationError`; the
API answers them, like every error, as `application/problem+json` (`app.web.problems`). Beyond
the statuses a route declares, any operation can answer 414 (a long target), 500 and 503 (the
database, or a busy one), and one with a body 400, 413, 415 and 422 (`app.web.middleware`).
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

__all__ = ["install_openapi"]

_PROBLEM = {"$ref": "#/components/schemas/Problem"}
_REASONS = {
    304: "Not modified: the ETag in If-None-Match is current.",
    400: "Malformed: the body is not JSON, or a header cannot be read.",
    401: "No API key.",
    403: "An API key this service does not accept.",
    404: "No such resource.",
    405: "Method not allowed.",
    409: "Conflicts with the current state.",
    412: "If-Match names no current version.",
    413: "The body exceeds the size limit.",
    414: "The request target exceeds the size limit.",
    415: "The body is not JSON.",
    422: "A field has the wrong type, range or shape, or the input is impossible.",
    429: "The heavy-work capacity is taken; retry after Retry-After seconds.",
    500: "An unexpected error; the request id tells.",
    503: "The database is unreachable or busy; retry after Retry-After seconds.",
}
_EVERY_OPERATION = (414, 500, 503)
_WITH_INPUT = (400, 413, 415, 422)
_FASTAPI_OWN = ("HTTPValidationError", "ValidationError")


def _problem(status: int) -> dict[str, Any]:
    return {
        "description": _REASONS.get(status, "An error."),
        "content": {"application/problem+json": {"schema": _PROBLEM}},
    }


def _refine(document: dict[str, Any]) -> dict[str, Any]:
    schemas = document.get("components", {}).get("schemas", {})
    for path_item in document.get("paths", {}).values():
        for operation in path_item.values():
            responses: dict[str, Any] = operation.setdefault("responses", {})
            takes_input = "requestBody" in operation or bool(operation.get("parameters"))
            statuses = {int(status) for status in responses if status.isdigit()}
            statuses |= set(_EVERY_OPERATION)
            if "requestBody" in operation:
                statuses |= set(_WITH_INPUT)
            elif takes_input:
                statuses.add(422)
            for status in sorted(statuses):
                if status >= 400:
                    responses[str(status)] = _problem(status)
                elif status == 304:
                    responses["304"] = {"description": _REASONS[304]}
            operation["responses"] = dict(sorted(responses.items()))
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None and "example" not in body:
                example = _schema_example(body.get("schema", {}), schemas)
                if example is not None:
                    body["example"] = example
    for name in _FASTAPI_OWN:
        schemas.pop(name, None)
    return document


def _schema_example(schema: dict[str, Any], schemas: dict[str, Any]) -> Any:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        schema = schemas.get(ref.rsplit("/", 1)[-1], {})
    examples = schema.get("examples")
    return deepcopy(examples[0]) if examples else None


def install_openapi(app: FastAPI) -> None:
    """Serve (and let `ridgeline openapi` write) the refined document."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _refine(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    summary=app.summary,
                    description=app.description,
                    routes=app.routes,
                    tags=app.openapi_tags,
                )
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

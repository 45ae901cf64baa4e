"""One pure-ASGI middleware for what every request needs: a request id, a size limit on bodies,
a Prometheus observation by route template, and one JSON access-log line.

Pure ASGI rather than `BaseHTTPMiddleware`: this runs on the scheduler's hot path, and the
difference is measurable (see scripts/bench_api.py).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import PROBLEM_CONTENT_TYPE, problem_body
from app.logs import REQUEST_ID

__all__ = ["HttpMetrics", "ObservabilityMiddleware"]

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")
_JSON_TYPE = re.compile(r"^application/([a-z0-9.+-]*\+)?json\s*(;.*)?$", re.IGNORECASE)
_BODY_METHODS = {b"POST", b"PUT", b"PATCH"}
_access_log = logging.getLogger("ridgeline.access")
_error_log = logging.getLogger("ridgeline.errors")

# Estimates answer in about a millisecond; catalog writes in a few.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class HttpMetrics:
    """The request counter and latency histogram, in a registry of the app's own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "ridgeline_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "ridgeline_http_request_duration_seconds",
            "Time from the request's arrival to the end of its response, by route template.",
            ["method", "route"],
            buckets=_BUCKETS,
            registry=self.registry,
        )


class _BodyTooLarge(HTTPException):
    """Raised from `receive` when a body without Content-Length outgrows the limit. An
    HTTPException, so FastAPI's body reader passes it on to the 413 problem handler."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"Bodies are limited to {limit} bytes.")


class ObservabilityMiddleware:
    def __init__(self, app: ASGIApp, metrics: HttpMetrics, max_body_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = dict(scope["headers"])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        token = REQUEST_ID.set(request_id)
        status = 500
        started_response = False
        id_header = (b"x-request-id", request_id.encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            nonlocal status, started_response
            if message["type"] == "http.response.start":
                status = message["status"]
                started_response = True
                message["headers"] = [*message.get("headers", []), id_header]
            await send(message)

        try:
            refusal = self._refuse(scope, headers)
            if refusal is not None:
                await self._send_problem(scope, send_with_id, *refusal)
            else:
                await self.app(scope, self._limited(receive), send_with_id)
        except _BodyTooLarge:
            await self._send_problem(scope, send_with_id, *self._too_large())
        except Exception:
            # Here rather than in Starlette's outermost handler, so the 500 still carries the
            # request id (header, body and log line) and never a traceback.
            _error_log.exception("unhandled error")
            if started_response:
                raise
            await self._send_problem(
                scope,
                send_with_id,
                500,
                "internal-error",
                "An unexpected error occurred; quote the request id when reporting it.",
            )
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope["method"]
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(elapsed)
            _access_log.info(
                "%s %s %s",
                method,
                scope["path"],
                status,
                extra={"route": template, "status": status, "duration_ms": elapsed * 1e3},
            )
            REQUEST_ID.reset(token)

    def _refuse(self, scope: Scope, headers: dict[bytes, bytes]) -> tuple[int, str, str] | None:
        """A problem to answer before the app sees the request, or None."""
        if scope["method"].encode() not in _BODY_METHODS:
            return None
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            return self._too_large()
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        has_body = length is None or length != b"0"
        if has_body and content_type and not _JSON_TYPE.match(content_type):
            return (
                415,
                "unsupported-media-type",
                f"Content-Type {content_type!r} is not JSON; send application/json.",
            )
        return None

    def _too_large(self) -> tuple[int, str, str]:
        return 413, "payload-too-large", f"Bodies are limited to {self.max_body_bytes} bytes."

    def _limited(self, receive: Receive) -> Receive:
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise _BodyTooLarge(self.max_body_bytes)
            return message

        return limited_receive

    @staticmethod
    async def _send_problem(scope: Scope, send: Send, status: int, slug: str, detail: str) -> None:
        body: dict[str, Any] = problem_body(status, slug, detail, scope["path"])
        payload = json.dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", PROBLEM_CONTENT_TYPE.encode()),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})

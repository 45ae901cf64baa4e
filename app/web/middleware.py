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
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.logs import REQUEST_ID
from app.web.heavy import HeavyWork
from app.web.problems import PROBLEM_CONTENT_TYPE, problem_body
from app.web.route_table import template_of

__all__ = ["HttpMetrics", "ObservabilityMiddleware"]

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")
_JSON_TYPE = re.compile(r"^application/([a-z0-9.+-]*\+)?json\s*(;.*)?$", re.IGNORECASE)
_BODY_METHODS = {b"POST", b"PUT", b"PATCH"}
_access_log = logging.getLogger("ridgeline.access")
_error_log = logging.getLogger("ridgeline.errors")

# Estimates answer in about a millisecond, catalog writes in a few; simulations and plans take
# seconds, up to the heavy-work timeout.
_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip


class _HeavyWorkCollector(Collector):
    """The heavy-work pool's admission and outcomes, read when Prometheus scrapes."""

    def __init__(self, heavy: HeavyWork) -> None:
        self.heavy = heavy

    def collect(self) -> Iterator[Metric]:
        jobs = CounterMetricFamily(
            "ridgeline_heavy_jobs",
            "Heavy jobs (simulations, plans, charts) by outcome: done, failed (raised or "
            "timed out), refused (429), cancelled (client gone).",
            labels=["outcome"],
        )
        for outcome, count in self.heavy.outcomes.items():
            jobs.add_metric([outcome], count)
        yield jobs
        yield GaugeMetricFamily(
            "ridgeline_heavy_jobs_admitted",
            "Heavy jobs running or queued now.",
            value=self.heavy.admitted,
        )
        yield GaugeMetricFamily(
            "ridgeline_heavy_jobs_capacity",
            "Heavy jobs admitted at once before a 429.",
            value=self.heavy.capacity,
        )


class HttpMetrics:
    """The request counter and latency histogram, process metrics and the heavy-work pool's
    figures, in a registry of the app's own."""

    def __init__(self, heavy: HeavyWork | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        if heavy is not None:
            self.registry.register(_HeavyWorkCollector(heavy))
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


MAX_TARGET_BYTES = 8192
"""Longest request target (path and query) answered; longer gets a 414 problem document."""


class ObservabilityMiddleware:
    def __init__(
        self, app: ASGIApp, metrics: HttpMetrics, max_body_bytes: int, fastapi_app: FastAPI
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.fastapi_app = fastapi_app

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
            template = getattr(route, "path", None) or self._template(scope)
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

    def _template(self, scope: Scope) -> str:
        """The route template of a request the app never routed (refused here: 413, 414,
        415), so its metrics count on the route it was meant for."""
        if len(scope.get("raw_path") or b"") > MAX_TARGET_BYTES:
            return "unmatched"
        return template_of(self.fastapi_app, scope["path"]) or "unmatched"

    def _refuse(self, scope: Scope, headers: dict[bytes, bytes]) -> tuple[int, str, str] | None:
        """A problem to answer before the app sees the request, or None."""
        target = len(scope.get("raw_path") or scope["path"].encode()) + len(
            scope.get("query_string", b"")
        )
        if target > MAX_TARGET_BYTES:
            return (
                414,
                "uri-too-long",
                f"The request target is {target} bytes; at most {MAX_TARGET_BYTES} are read.",
            )
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

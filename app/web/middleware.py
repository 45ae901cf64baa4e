"""One pure-ASGI middleware for what every request needs: a request id, a size limit on bodies,
a Prometheus observation by route template, and one JSON access-log line.

Pure ASGI rather than `BaseHTTPMiddleware`: this runs on the scheduler's hot path, and the
difference is measurable (see scripts/bench_api.py).
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.logs import REQUEST_ID
from app.web.deps import not_modified
from app.web.memo import ResponseMemo, raw_key
from app.web.metrics import HttpMetrics
from app.web.problems import PROBLEM_CONTENT_TYPE, problem_body
from app.web.request_log import RequestLog
from app.web.route_table import template_of

__all__ = ["ObservabilityMiddleware", "ObservedFastAPI", "replayed_receive"]

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")
_JSON_TYPE = re.compile(r"^application/([a-z0-9.+-]*\+)?json\s*(;.*)?$", re.IGNORECASE)
_BODY_METHODS = {"POST", "PUT", "PATCH"}
_error_log = logging.getLogger("ridgeline.errors")


class _BodyTooLarge(HTTPException):
    """Raised from `receive` when a body without Content-Length outgrows the limit. An
    HTTPException, so FastAPI's body reader passes it on to the 413 problem handler."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"Bodies are limited to {limit} bytes.")


_ID_PREFIX = uuid.uuid4().hex[:16]
_ID_COUNTER = itertools.count(1)


def _request_id(given: bytes | None) -> str:
    """The caller's `X-Request-ID` when it is well formed; else 32 hex digits unique per
    request: a random per-process prefix and a counter (a fresh `uuid4` costs a system call
    for its randomness on every request)."""
    if given is not None:
        text = given.decode("latin-1")
        if _REQUEST_ID.match(text):
            return text
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016x}"


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replayed_receive(body: bytes, receive: Receive) -> Receive:
    """`receive` with the body already read given back first."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


class KeptAnswer(Protocol):
    """An answer the app sent and keeps (a catalog read: `app.catalog.representations`)."""

    @property
    def body(self) -> bytes: ...
    @property
    def etag(self) -> str | None: ...
    @property
    def route(self) -> str: ...


KeptAnswers = Callable[[str, bytes], KeptAnswer | None]
"""The kept answer to a GET of (path, query string), or None: what `create_app` hands the
middleware, so that the web layer reads no catalog of its own."""


async def _send_kept(send: Send, kept: KeptAnswer, if_none_match: bytes | None) -> None:
    """A kept catalog answer as the route sends it: 200 with its ETag, or 304 while the
    client's `If-None-Match` names it."""
    headers = [(b"etag", kept.etag.encode())] if kept.etag is not None else []
    if kept.etag is not None and not_modified(
        None if if_none_match is None else if_none_match.decode("latin-1"), kept.etag
    ):
        await send({"type": "http.response.start", "status": 304, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    await _send_json(send, kept.body, headers)


async def _send_json(
    send: Send, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-length", str(len(body)).encode()),
                (b"content-type", b"application/json"),
                *(headers or ()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


MAX_TARGET_BYTES = 8192
"""Longest request target (path and query) answered; longer gets a 414 problem document."""


class ObservabilityMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        metrics: HttpMetrics,
        max_body_bytes: int,
        fastapi_app: FastAPI,
        kept_answers: KeptAnswers | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.fastapi_app = fastapi_app
        self.kept_answers = kept_answers
        self.request_log = RequestLog(metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            try:
                await self.app(scope, receive, send)
            finally:
                self.request_log.flush()  # at shutdown (lifespan), requests still waiting
            return
        started = time.perf_counter()
        headers = dict(scope["headers"])
        request_id = _request_id(headers.get(b"x-request-id"))
        token = REQUEST_ID.set(request_id)
        status = 500
        started_response = False
        template: str | None = None
        id_header = (b"x-request-id", request_id.encode("latin-1"))

        # A plain function returning `send`'s awaitable, not a coroutine of its own: one frame
        # less on every message.
        def send_with_id(message: Message) -> Awaitable[None]:
            nonlocal status, started_response
            if message["type"] == "http.response.start":
                status = message["status"]
                started_response = True
                message["headers"] = [*message.get("headers", []), id_header]
            return send(message)

        try:
            refusal = self._refuse(scope, headers)
            if refusal is not None:
                await self._send_problem(scope, send_with_id, *refusal)
            else:
                method = scope["method"]
                if method == "GET":
                    kept = self._kept(scope)
                    if kept is not None:
                        await _send_kept(send_with_id, kept, headers.get(b"if-none-match"))
                        template = kept.route
                elif method in _BODY_METHODS:
                    receive = self._limited(receive)  # (bodies of other methods go unread)
                    template, receive = await self._memo_answer(
                        scope, headers, receive, send_with_id
                    )
                if template is None:
                    await self.app(scope, receive, send_with_id)
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
            self._record(scope, template, status, time.perf_counter() - started, request_id)
            REQUEST_ID.reset(token)

    def _record(
        self, scope: Scope, template: str | None, status: int, elapsed_s: float, request_id: str
    ) -> None:
        """The request's metrics and its access-log line, on the route template it was
        answered on before routing (`template`), else the one it was routed to."""
        if template is None:
            template = getattr(scope.get("route"), "path", None) or self._template(scope)
        state = scope.get("state")
        principal = state.get("principal") if state else None  # set by app.web.deps.caller
        self.request_log.add(
            scope["method"], scope["path"], status, template, elapsed_s, request_id, principal
        )

    def _kept(self, scope: Scope) -> KeptAnswer | None:
        """A read the app itself answered while nothing it depends on changed (`kept_answers`),
        to answer again before routing; else None."""
        if self.kept_answers is None:
            return None
        return self.kept_answers(scope["path"], scope["query_string"])

    async def _memo_answer(
        self, scope: Scope, headers: dict[bytes, bytes], receive: Receive, send: Send
    ) -> tuple[str | None, Receive]:
        """Answer a byte-identical repeat of an estimate before routing, from what the app
        sent for it while nothing it depends on changed (`app.web.memo`). The route template
        it counts on when answered, else None; and the `receive` the app is to read the
        request from."""
        state = self.fastapi_app.state
        memo: ResponseMemo | None = getattr(state, "response_memo", None)
        if memo is None or scope["method"] != "POST" or scope["path"] not in memo.raw_paths:
            return None, receive
        body = await _read_body(receive)
        answer = memo.get_raw(raw_key(scope, headers, body), state.spec_cache.generations)
        if answer is None:
            return None, replayed_receive(body, receive)
        await _send_json(send, answer)
        return scope["path"], receive  # the memo's routes have no path parameters

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
        if scope["method"] not in _BODY_METHODS:
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


class ObservedFastAPI(FastAPI):
    """FastAPI whose outermost layer, Starlette's `ServerErrorMiddleware`, is left out while an
    `ObservabilityMiddleware` is installed: that one already answers every unhandled error
    with a 500 (a problem document with the request id) before the outer layer could, so the
    outer one only cost each request a frame and a wrapped `send`. Without the middleware (or
    should FastAPI's stack no longer start with that layer) the stack is FastAPI's own."""

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        observed = any(cast(object, m.cls) is ObservabilityMiddleware for m in self.user_middleware)
        if observed and type(stack) is ServerErrorMiddleware and not self.debug:
            return stack.app
        return stack

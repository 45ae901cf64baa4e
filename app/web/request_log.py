"""What every answered request leaves behind: its Prometheus observation and its JSON
access-log line (`RequestLog`).

Both are settled in batches, at most 50 ms (256 requests) after the request. The request
itself only appends its fields to a list: observing and formatting then run together, one
request after another, where their code stays in the CPU's caches: on `/healthz`, served
beside the same middleware doing both per request, the middleware's share of the request fell
from 17-23 % to 15-17 % (medians of three runs; scripts/bench_api.py measures it). A scrape
of `/metrics` settles what is waiting first, so it never misses a request answered before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from app.logs import JsonFormatter, iso_utc_ms
from app.web.metrics import HttpMetrics

__all__ = ["RequestLog", "access_lines"]

_access_log = logging.getLogger("ridgeline.access")
_ENCODER = json.JSONEncoder()

_FLUSH_S = 0.05
"""The longest a request's metrics and line wait."""
_FLUSH_REQUESTS = 256
"""The most requests waiting: their lines are written in one write."""

_Finished = tuple[float, str, str, int, str, float, str, str | None]
"""A request's (wall-clock time at its end, method, path, status, route template, seconds it
took, request id, the name of the principal whose key it sent: `app.principals`)."""


class RequestLog:
    """Each answered request's observation in `metrics` and its line on the `ridgeline.access`
    logger.

    Where that logger ends in the handler `configure_logging` installs, the line is made here,
    exactly as its formatter would make it (`access_lines`), and both wait for the batch: a
    record through `logging` costs about 15 us a request. Where the lines go is looked up as
    a batch starts, so a change of handlers reaches lines from the next batch on. Anywhere
    else (a test capturing records, another configuration), each request is settled at once,
    its record through `logging`, in the request's context."""

    def __init__(self, metrics: HttpMetrics) -> None:
        self.metrics = metrics
        self._waiting: list[_Finished] = []
        self._handler: logging.StreamHandler[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        metrics.before_collect = self.flush

    def add(  # noqa: PLR0917 - the request's fields, positional on the hot path
        self,
        method: str,
        path: str,
        status: int,
        route: str,
        elapsed_s: float,
        request_id: str,
        principal: str | None = None,
    ) -> None:
        waiting = self._waiting
        if not waiting:  # a batch starts: where its lines go, and when it is settled
            self._handler = _plain_handler()
            self._timer = _flush_later(self.flush) if self._handler is not None else None
        waiting.append((time.time(), method, path, status, route, elapsed_s, request_id, principal))
        if self._timer is None or len(waiting) >= _FLUSH_REQUESTS:
            self.flush()

    def flush(self) -> None:
        """Settle the requests waiting: observe each, and write their lines in one write."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, []
        if not waiting:
            return
        observe = self.metrics.observe
        for _, method, _, status, route, elapsed_s, _, _ in waiting:
            observe(method, route, status, elapsed_s)
        if not _access_log.isEnabledFor(logging.INFO):
            return
        handler = self._handler
        if handler is None:
            for finished in waiting:
                _log_record(finished)
            return
        text = access_lines(waiting)
        with handler.lock or contextlib.nullcontext():
            handler.stream.write(text)
            handler.flush()


def _log_record(finished: _Finished) -> None:
    """A request's access record through `logging` (its formatter reads the request id from
    the request's context)."""
    _, method, path, status, route, elapsed_s, _, principal = finished
    extra: dict[str, object] = {"route": route, "status": status}
    if principal is not None:
        extra["principal"] = principal
    extra["duration_ms"] = round(elapsed_s * 1e6) / 1e3
    _access_log.handle(
        _access_log.makeRecord(
            _access_log.name,
            logging.INFO,
            __file__,
            0,
            "%s %s %s",
            (method, path, status),
            None,
            extra=extra,
        )
    )


def _flush_later(flush: Callable[[], None]) -> asyncio.TimerHandle | None:
    """`flush` called `_FLUSH_S` from now on the running event loop; None outside one."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop.call_later(_FLUSH_S, flush)


def access_lines(finished: list[_Finished]) -> str:
    """The access-log lines `JsonFormatter` writes for these requests' records, made directly,
    one after another. A request id is one the middleware gave: letters, digits and
    `._:/+=-`, nothing to escape."""
    lines = []
    last_ms, stamp = -1, ""
    for created, method, path, status, route, elapsed_s, request_id, principal in finished:
        ms = int(created * 1000)
        if ms != last_ms:  # at 10,000 requests a second, ten share each millisecond's stamp
            last_ms, stamp = ms, iso_utc_ms(ms)
        parts = _LINE_PARTS.get((method, path, status, route))
        if parts is None:
            parts = _line_parts(method, path, status, route)
        # The duration to the microsecond: a float of few digits, whose shortest repr (the
        # line's number) costs a fraction of a full-precision one's.
        # A principal's name is [a-z0-9._-] (`app.principals`): nothing to escape.
        who = "" if principal is None else f'"principal": "{principal}", '
        lines.append(
            f'{{"time": "{stamp}", {parts[0]}"request_id": "{request_id}", '
            f'{parts[1]}{who}"duration_ms": {round(elapsed_s * 1e6) / 1e3!r}}}\n'
        )
    return "".join(lines)


def _line_parts(method: str, path: str, status: int, route: str) -> tuple[str, str]:
    """The parts of a request's line before and after its request id that depend on its
    method, path, status and route alone, kept in `_LINE_PARTS` for short paths."""
    parts = (
        f'"level": "INFO", "logger": "{_access_log.name}", '
        f'"message": {_json_string(f"{method} {path} {status}")}, ',
        f'"route": {_json_string(route)}, "status": {status}, ',
    )
    if len(path) <= _LINE_PARTS_PATH:
        if len(_LINE_PARTS) >= _LINE_PARTS_KEPT:
            _LINE_PARTS.clear()
        _LINE_PARTS[method, path, status, route] = parts
    return parts


_LINE_PARTS: dict[tuple[str, str, int, str], tuple[str, str]] = {}
"""The parts of an access-log line that depend on the request's method, path, status and
route alone, by those: a service answers the same few paths again and again."""
_LINE_PARTS_KEPT = 4096
"""At most this many kept (all dropped at once past it: paths may be many, e.g. scanners')."""
_LINE_PARTS_PATH = 256
"""Kept only for paths this short (a few MB at most; a target may be 8 KB)."""


def _json_string(text: str) -> str:
    """`text` as a JSON string, as `json` writes it (ASCII only): printable ASCII without a
    quote or backslash, almost every path and route, is written as it is, without the
    encoder's escaping pass."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return _ENCODER.encode(text)


def _plain_handler() -> logging.StreamHandler[Any] | None:
    """The one handler access records reach when it is what `configure_logging` installs (a
    StreamHandler with a `JsonFormatter`, nothing filtering on the way), else None."""
    handlers: list[logging.Handler] = []
    logger: logging.Logger | None = _access_log
    while logger is not None:
        if logger.filters:
            return None
        handlers.extend(logger.handlers)
        logger = logger.parent if logger.propagate else None
    if len(handlers) != 1:
        return None
    handler = handlers[0]
    if (
        type(handler) is not logging.StreamHandler
        or type(handler.formatter) is not JsonFormatter
        or handler.filters
        or handler.level > logging.INFO
    ):
        return None
    return handler

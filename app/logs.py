"""JSON log lines, each with the id of the request it belongs to."""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime

__all__ = ["REQUEST_ID", "JsonFormatter", "configure_logging", "iso_utc", "iso_utc_ms"]

REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)

# Attributes every LogRecord has; anything else was passed in `extra=` and goes into the line.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


# One encoder for every line (json.dumps with `default=` builds a new one per call), and the
# timestamp's date and time to the second formatted once per second: an access-log line is
# written per request, on the event loop.
_ENCODER = json.JSONEncoder(default=str)
_SECOND: list[tuple[int, str]] = [(-1, "")]
_MILLIS = tuple(f".{ms:03d}+00:00" for ms in range(1000))
"""The timestamp's tail by its millisecond: a lookup costs less than half of formatting it."""


def iso_utc(created: float) -> str:
    """ISO 8601 in UTC to the millisecond, as `datetime.isoformat(timespec="milliseconds")`."""
    return iso_utc_ms(int(created * 1000))


def iso_utc_ms(ms: int) -> str:
    """`iso_utc` of a time in whole milliseconds since the epoch."""
    second, milli = divmod(ms, 1000)
    cached_second, text = _SECOND[0]
    if cached_second != second:
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _SECOND[0] = (second, text)
    return text + _MILLIS[milli]


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = REQUEST_ID.get()
        if request_id is not None:
            line["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return _ENCODER.encode(line)


def configure_logging(level: str) -> None:
    """Route the root logger, uvicorn's and ours, through one JSON handler on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # our middleware logs each request

"""Catalog answers cached per process as the bytes sent, with their ETags.

A scheduler reads the same few entries many times a second; reading the row, shaping it and
serialising it again on every request cost 90 % of a catalog GET. Each answer (an entry, or one
page of a list) is kept under its request target (path and query) as the JSON bytes sent and the
ETag, until a catalog write of its kind commits: through this process, the commit drops them at
once (`app.catalog.invalidation`); through another replica on PostgreSQL, its NOTIFY does within
milliseconds; `ttl_s` bounds how long an answer may outlive a write that no notification
announced (SQLite with several processes, or a listener that lost its connection).

Kept by target, a repeat is answered by the middleware before routing (`app.web.middleware`):
exactly the bytes and ETag the route sent for that target, while nothing of its kind changed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Representation", "Representations", "target_of"]


@dataclass(frozen=True, slots=True)
class Representation:
    body: bytes
    """The JSON sent."""
    etag: str | None = None
    """The entry's strong ETag (`"3"`); None for a list page."""
    route: str = ""
    """The route template that made it (`/v1/gpus/{entry_id}`), for the metrics of repeats."""


class Representations:
    """Safe to share between the event loop (which reads) and the thread pool (which fills):
    a fill that read the database while a catalog write committed is answered but not kept, so
    no committed write hides behind an answer read before it."""

    def __init__(
        self, ttl_s: float, max_entries: int = 2048, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._entries: dict[str, tuple[float, str, Representation]] = {}
        self._drops = 0  # invalidations so far; a fill that saw it change is not kept
        self._lock = threading.Lock()
        self.hits = 0
        self.fills = 0
        self.filling: dict[tuple[str, int], asyncio.Future[Representation]] = {}
        """Fills under way, by target and `token()`: the event loop's alone (`cached_read`)."""

    def get(self, target: str) -> Representation | None:
        """The answer kept for request `target` (`/v1/gpus/l4-24gb`, `/v1/gpus?limit=50`)
        while it is fresh, else None."""
        hit = self._entries.get(target)
        if hit is None or hit[0] <= self._clock():
            return None
        self.hits += 1
        return hit[2]

    def token(self) -> int:
        """Take before reading the database for a fill; `put` keeps the answer only when no
        catalog write committed since."""
        return self._drops

    def put(self, kind: str, target: str, answer: Representation, token: int) -> None:
        """Keep `answer` to `target`, an answer about catalog `kind` (`gpu`, `model`)."""
        with self._lock:
            if self._drops != token:
                return
            self.fills += 1
            self._entries.pop(target, None)
            self._entries[target] = (self._clock() + self._ttl_s, kind, answer)
            while len(self._entries) > self._max_entries:  # the oldest fill goes first
                del self._entries[next(iter(self._entries))]

    def invalidate(self, kind: str, _entry_id: str | None = None) -> None:
        """Drop every answer of `kind`: the entry itself, and every list page it may be on."""
        with self._lock:
            self._drops += 1
            for target in [t for t, (_, k, _) in self._entries.items() if k == kind]:
                del self._entries[target]

    def clear(self) -> None:
        """Drop everything (a listener that reconnects may have missed notifications)."""
        with self._lock:
            self._drops += 1
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def target_of(path: str, query_string: bytes) -> str:
    """The request target a representation is kept under."""
    return f"{path}?{query_string.decode('latin-1')}" if query_string else path

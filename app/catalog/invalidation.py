"""How a committed catalog write reaches every cache that holds what it changed.

Writes note what they changed (`app.catalog.service.record_change`). When the transaction
commits, every cache of this process drops those entries at once (the spec cache, and with it the
estimate memo keyed by its generations; the representation cache of catalog reads). On
PostgreSQL the same transaction also sends `pg_notify('ridgeline_catalog', ...)`, which the
database delivers at commit to every replica's listener (`app.db.notify`): other processes drop
the entries within milliseconds. Caches keep their TTL as a safety net for a notification that
never arrived (a listener reconnecting, or SQLite, which has none).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Protocol

from anyio import to_thread
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.catalog.representations import Representations
from app.catalog.service import changes, forget_changes_at_end
from app.catalog.spec_cache import SpecCache
from app.db.notify import NotificationListener, listens

__all__ = ["CHANNEL", "Cache", "CatalogInvalidation", "catalog_caches", "watch_catalog"]

CHANNEL = "ridgeline_catalog"
_log = logging.getLogger("ridgeline.catalog")


class Cache(Protocol):
    def invalidate(self, kind: str, entry_id: str) -> None: ...

    def clear(self) -> None: ...


class CatalogInvalidation:
    """The caches of one process, and the announcements of its writes to the others."""

    def __init__(self) -> None:
        self._drops: list[Callable[[str, str], None]] = []
        self._clears: list[Callable[[], None]] = []
        self.origin = uuid.uuid4().hex[:16]
        """Names this process in its notifications: it has applied its own writes at commit."""
        self.received = 0
        """Notifications from other processes applied so far."""

    def add(self, drop: Callable[[str, str], None], clear: Callable[[], None]) -> None:
        """A cache: `drop(kind, entry_id)` forgets one entry, `clear()` everything."""
        self._drops.append(drop)
        self._clears.append(clear)

    def drop(self, kind: str, entry_id: str) -> None:
        for drop in self._drops:
            drop(kind, entry_id)

    def clear(self) -> None:
        for clear in self._clears:
            clear()

    def watch(self, session_factory: sessionmaker[Session], *, publish: bool) -> None:
        """Drop what each committed transaction of `session_factory` wrote, when it commits;
        with `publish` (PostgreSQL), also announce it to other processes in that transaction."""

        def committed(session: Session) -> None:
            for kind, entry_id in changes(session):
                self.drop(kind, entry_id)

        def announce(session: Session) -> None:
            for kind, entry_id in sorted(changes(session)):
                payload = f"{self.origin} {kind} {entry_id}"
                session.execute(select(func.pg_notify(CHANNEL, payload)))

        if publish:
            event.listen(session_factory, "before_commit", announce)
        event.listen(session_factory, "after_commit", committed)
        forget_changes_at_end(session_factory)

    def receive(self, payload: str) -> None:
        """Apply a notification (`origin kind entry_id`) from another process."""
        origin, _, rest = payload.partition(" ")
        kind, _, entry_id = rest.partition(" ")
        if not kind or not entry_id:
            _log.warning("ignored a malformed catalog notification: %r", payload[:200])
            return
        if origin == self.origin:
            return
        self.received += 1
        self.drop(kind, entry_id)

    @asynccontextmanager
    async def listening(self, database_url: str) -> AsyncIterator[NotificationListener | None]:
        """While the block runs, apply other processes' notifications (PostgreSQL; None and
        nothing to do elsewhere). Each (re)connection clears every cache first."""
        if not listens(database_url):
            yield None
            return
        listener = NotificationListener(database_url, CHANNEL, self.receive, self.clear)
        await to_thread.run_sync(listener.start)
        try:
            yield listener
        finally:
            await to_thread.run_sync(listener.stop)


def watch_catalog(
    session_factory: sessionmaker[Session], database_url: str, *caches: Cache
) -> CatalogInvalidation:
    """Drop from `caches` what each committed transaction of `session_factory` wrote; on
    PostgreSQL, announce it to other processes too (their `listening` applies it)."""
    invalidation = CatalogInvalidation()
    for cache in caches:
        invalidation.add(cache.invalidate, cache.clear)
    invalidation.watch(session_factory, publish=listens(database_url))
    return invalidation


def catalog_caches(
    session_factory: sessionmaker[Session], database_url: str, ttl_s: float
) -> tuple[CatalogInvalidation, SpecCache, Representations]:
    """A process's catalog caches (specs for estimates, answers for reads), each entry kept at
    most `ttl_s`, watched by one `CatalogInvalidation` over `session_factory`."""
    spec_cache = SpecCache(session_factory, ttl_s)
    representations = Representations(ttl_s)
    return (
        watch_catalog(session_factory, database_url, spec_cache, representations),
        spec_cache,
        representations,
    )

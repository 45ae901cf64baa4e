"""A thread that LISTENs on a PostgreSQL channel and hands each notification's payload on.

PostgreSQL delivers a `NOTIFY` (or `pg_notify`) sent inside a transaction when, and only if, that
transaction commits, to every session then listening on the channel, in commit order
(https://www.postgresql.org/docs/current/sql-notify.html). One listening connection per process
turns a write through any replica into an invalidation in every other one within milliseconds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sqlalchemy.engine import make_url

__all__ = ["NotificationListener", "listens", "postgres_conninfo"]

_log = logging.getLogger("ridgeline.notify")


def listens(database_url: str) -> bool:
    """True for a database that can push notifications (PostgreSQL)."""
    return make_url(database_url).get_backend_name() == "postgresql"


def postgres_conninfo(database_url: str) -> str:
    """The libpq URI of a SQLAlchemy PostgreSQL URL (`postgresql+psycopg://…`)."""
    url = make_url(database_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class NotificationListener:
    """Listens on `channel` from a daemon thread of its own, with its own connection (never a
    pooled one: a listening session must stay open). `on_message(payload)` runs on that thread.
    `on_connect()` runs each time the listener (re)connects, once `LISTEN` is in force:
    notifications sent while it was away are lost, so what it guards must be dropped then."""

    def __init__(
        self,
        database_url: str,
        channel: str,
        on_message: Callable[[str], None],
        on_connect: Callable[[], None],
        *,
        poll_s: float = 0.5,
        retry_s: float = 1.0,
    ) -> None:
        self._conninfo = postgres_conninfo(database_url)
        self._channel = channel
        self._on_message = on_message
        self._on_connect = on_connect
        self._poll_s = poll_s
        self._retry_s = retry_s
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"listen-{channel}", daemon=True)

    @property
    def listening(self) -> bool:
        """True while `LISTEN` is in force on an open connection."""
        return self._listening.is_set()

    def start(self, wait_s: float = 5.0) -> None:
        """Start listening; wait up to `wait_s` for the first connection (a database that does
        not answer yet is retried every `retry_s` in the background)."""
        self._thread.start()
        self._listening.wait(wait_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self._poll_s + 5.0)

    def _run(self) -> None:
        import psycopg  # noqa: PLC0415  (PostgreSQL only)
        from psycopg import sql  # noqa: PLC0415

        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                    self._on_connect()
                    self._listening.set()
                    while not self._stop.is_set():
                        for notification in conn.notifies(timeout=self._poll_s):
                            self._on_message(notification.payload)
            except Exception:  # a lost connection, or a handler's bug: never the thread
                self._listening.clear()
                if not self._stop.is_set():
                    _log.warning(
                        "notification listener lost its connection; retrying", exc_info=True
                    )
                    self._stop.wait(self._retry_s)
            self._listening.clear()

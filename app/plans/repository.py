"""Stored capacity plans, and every query on them, their jobs' states included.

A plan keeps the request as validated, the answer as returned, and the versions of the catalog
entries it was computed from, so a deployment tool can show later why a plan said what it said
(and tell whether the catalog has moved on since). Documents are JSON.

A plan row is also the record of its job, whatever carries the job to a worker: `queued` when
asked for, `running` while a worker holds it (`lease_owner`: one attempt of one worker), then
`done` (with its answer), `failed` (with the problem) or `cancelled`. A worker's progress
writes and its verdict only land while it still holds the plan, so a plan taken over is never
written by two workers.

How a worker comes to hold a plan (`app.plans.queue`): on PostgreSQL procrastinate delivers the
job and the worker `start`s the plan, taking it over from any earlier attempt; on SQLite an
in-process worker `claim`s the oldest queued plan, or a running one whose lease expired (its
worker died), in one conditional update (SQLite has one writer at a time), and renews the
leases of the plans it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    Float,
    Integer,
    String,
    and_,
    case,
    cast,
    column,
    exists,
    func,
    or_,
    select,
    table,
    update,
)
from sqlalchemy.orm import Mapped, Session, load_only, mapped_column

from app.catalog.orm import utcnow
from app.db.session import Base, UtcDateTime

__all__ = ["Claim", "PlanRepository", "PlanRow", "PlanStatus"]


class PlanStatus(StrEnum):
    QUEUED = "queued"  # asked for, no worker holds it yet
    RUNNING = "running"  # a worker holds it
    DONE = "done"  # the answer is stored
    FAILED = "failed"  # `error` says why
    CANCELLED = "cancelled"  # DELETE stopped it before it finished

    @property
    def finished(self) -> bool:
        return self in (PlanStatus.DONE, PlanStatus.FAILED, PlanStatus.CANCELLED)


class PlanRow(Base):
    __tablename__ = "plans"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)
    model_id: Mapped[str] = mapped_column(String(64), index=True)
    """The catalog model id, or `inline`."""
    owner: Mapped[str | None] = mapped_column(String(64), index=True, nullable=True)
    """The principal whose key created it (`app.principals`); None before owners."""
    requests_per_s: Mapped[float] = mapped_column(Float)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The request body as validated (defaults filled in)."""
    response: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The answer: plans, pruned candidates, the disaggregated option, notes (when done)."""
    catalog_versions: Mapped[dict[str, Any]] = mapped_column(JSON)
    """{"gpus": {id: version}, "models": {id: version}} of the entries the plan used."""
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The best plan in brief, for lists (which do not load the documents); when done."""
    status: Mapped[str] = mapped_column(String(16), index=True, server_default=PlanStatus.DONE)
    """A `PlanStatus`."""
    progress: Mapped[float] = mapped_column(Float, server_default="1")
    """Candidates with their verdict over candidates, 0-1."""
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """When failed: the problem (`status`, `type`, `title`, `detail`, `errors`)."""
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    """Times a worker started it (more than one: a worker died running it)."""
    lease_owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """The worker attempt running it (while running)."""
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    """SQLite: another worker may take it over after this, unless its worker renews the lease
    (on PostgreSQL, procrastinate's worker heartbeats say when a worker died)."""
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)


@dataclass(frozen=True, slots=True)
class Claim:
    """A plan a worker took: its id and how many times it has been started (this one included)."""

    plan_id: str
    attempts: int


_SUMMARY_COLUMNS = (
    PlanRow.id,
    PlanRow.created_at,
    PlanRow.model_id,
    PlanRow.requests_per_s,
    PlanRow.summary,
    PlanRow.status,
    PlanRow.progress,
)


class PlanRepository:
    """Adds, reads and moves plans through their states. Writes flush; the caller commits."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, row: PlanRow) -> None:
        self.session.add(row)
        self.session.flush()

    def get(self, plan_id: str) -> PlanRow | None:
        return self.session.get(PlanRow, plan_id, populate_existing=True)

    def delete(self, row: PlanRow) -> None:
        self.session.delete(row)
        self.session.flush()

    def recent(
        self, *, limit: int, offset: int, model_id: str | None = None, owner: str | None = None
    ) -> tuple[Sequence[PlanRow], int]:
        """One page, newest first, and how many plans match in all (of `owner`'s, when given);
        the request and response documents are not loaded."""
        where = [PlanRow.model_id == model_id] if model_id is not None else []
        if owner is not None:
            where.append(PlanRow.owner == owner)
        total = self.session.scalar(select(func.count()).select_from(PlanRow).where(*where))
        rows = self.session.scalars(
            select(PlanRow)
            .options(load_only(*_SUMMARY_COLUMNS))
            .where(*where)
            .order_by(PlanRow.created_at.desc(), PlanRow.id.desc())
            .limit(limit)
            .offset(offset)
        ).all()
        return rows, int(total or 0)

    def waiting(self) -> int:
        """Jobs queued or running."""
        statuses = (PlanStatus.QUEUED, PlanStatus.RUNNING)
        count = self.session.scalar(
            select(func.count()).select_from(PlanRow).where(PlanRow.status.in_(statuses))
        )
        return int(count or 0)

    def claim(self, owner: str, lease_s: float) -> Claim | None:
        """SQLite: take the oldest queued plan, or a running one whose lease has expired, for
        `owner` for `lease_s` seconds; None when there is none (or another worker took it
        first: the update is conditional)."""
        now = utcnow()
        claimable = or_(
            PlanRow.status == PlanStatus.QUEUED,
            and_(PlanRow.status == PlanStatus.RUNNING, PlanRow.lease_expires_at < now),
        )
        plan_id = self.session.scalar(
            select(PlanRow.id).where(claimable).order_by(PlanRow.created_at, PlanRow.id).limit(1)
        )
        if plan_id is None:
            return None
        taken = self.session.execute(
            update(PlanRow)
            .where(PlanRow.id == plan_id, claimable)
            .values(
                status=PlanStatus.RUNNING,
                lease_owner=owner,
                lease_expires_at=now + timedelta(seconds=lease_s),
                attempts=PlanRow.attempts + 1,
            )
            .returning(PlanRow.attempts)
        ).scalar_one_or_none()
        return Claim(plan_id, int(taken)) if taken is not None else None

    def start(self, plan_id: str, owner: str) -> Claim | None:
        """Take a queued or running plan for `owner` (a job for it was delivered to `owner`:
        whoever ran it before is gone); None when it is finished, cancelled or deleted."""
        taken = self.session.execute(
            update(PlanRow)
            .where(
                PlanRow.id == plan_id,
                PlanRow.status.in_((PlanStatus.QUEUED, PlanStatus.RUNNING)),
            )
            .values(
                status=PlanStatus.RUNNING,
                lease_owner=owner,
                lease_expires_at=None,
                attempts=PlanRow.attempts + 1,
            )
            .returning(PlanRow.attempts)
        ).scalar_one_or_none()
        return Claim(plan_id, int(taken)) if taken is not None else None

    def unqueued(self, older_than: datetime) -> list[str]:
        """PostgreSQL: plans queued or running since before `older_than` that no procrastinate
        job is waiting for or running (`lock` is the plan id): their job was never deferred
        (the database went away after the POST's commit) or ended without a verdict."""
        jobs = table("procrastinate_jobs", column("lock", String), column("status"))
        has_job = exists().where(
            jobs.c.lock == PlanRow.id,
            cast(jobs.c.status, String).in_(("todo", "doing")),  # an enum of procrastinate's
        )
        return list(
            self.session.scalars(
                select(PlanRow.id)
                .where(
                    PlanRow.status.in_((PlanStatus.QUEUED, PlanStatus.RUNNING)),
                    PlanRow.created_at < older_than,
                    ~has_job,
                )
                .order_by(PlanRow.created_at, PlanRow.id)
            )
        )

    def _held(self, plan_id: str, owner: str, attempt: int | None) -> Any:
        """`owner` holds the plan, in its attempt `attempt` when given: an earlier attempt
        under the same owner name (a worker that took its own plan back, a process left running
        when its parent died) writes nothing."""
        held = and_(
            PlanRow.id == plan_id,
            PlanRow.status == PlanStatus.RUNNING,
            PlanRow.lease_owner == owner,
        )
        return held if attempt is None else and_(held, PlanRow.attempts == attempt)

    def renew(self, plan_ids: Sequence[str], owner: str, lease_s: float) -> None:
        """SQLite: extend `owner`'s leases of `plan_ids` (those it still holds) by `lease_s`
        from now."""
        if not plan_ids:
            return
        self.session.execute(
            update(PlanRow)
            .where(
                PlanRow.id.in_(plan_ids),
                PlanRow.status == PlanStatus.RUNNING,
                PlanRow.lease_owner == owner,
            )
            .values(lease_expires_at=utcnow() + timedelta(seconds=lease_s))
        )

    def report(self, plan_id: str, owner: str, progress: float, attempt: int | None = None) -> bool:
        """Store `progress` while `owner` (in `attempt`) holds the job, never below what was
        stored (a later attempt starts again from nothing: pollers see its progress once it
        passes the earlier's); False when it no longer holds it (the job was cancelled or
        deleted, or taken over)."""
        result = self.session.execute(
            update(PlanRow)
            .where(self._held(plan_id, owner, attempt))
            .values(progress=case((PlanRow.progress < progress, progress), else_=PlanRow.progress))
        )
        return bool(getattr(result, "rowcount", 0))

    def finish(
        self, plan_id: str, owner: str, values: dict[str, Any], attempt: int | None = None
    ) -> bool:
        """Close `owner`'s job (its attempt `attempt`) with `values` (status and what goes with
        it); False when it no longer holds it."""
        result = self.session.execute(
            update(PlanRow)
            .where(self._held(plan_id, owner, attempt))
            .values(lease_owner=None, lease_expires_at=None, finished_at=utcnow(), **values)
        )
        return bool(getattr(result, "rowcount", 0))

    def close_queued(self, plan_id: str, values: dict[str, Any]) -> bool:
        """Close a plan no worker holds yet with `values` (status and what goes with it);
        False when it is not queued."""
        result = self.session.execute(
            update(PlanRow)
            .where(PlanRow.id == plan_id, PlanRow.status == PlanStatus.QUEUED)
            .values(finished_at=utcnow(), **values)
        )
        return bool(getattr(result, "rowcount", 0))

    def release(self, plan_id: str, owner: str, attempt: int | None = None) -> None:
        """Put `owner`'s plan back in the queue untried (it could not run here now, or its
        worker is stopping)."""
        self.session.execute(
            update(PlanRow)
            .where(self._held(plan_id, owner, attempt))
            .values(
                status=PlanStatus.QUEUED,
                lease_owner=None,
                lease_expires_at=None,
                attempts=PlanRow.attempts - 1,
            )
        )

    def cancel(self, plan_id: str) -> bool:
        """Mark a queued or running job cancelled; False when it was neither."""
        result = self.session.execute(
            update(PlanRow)
            .where(
                PlanRow.id == plan_id,
                PlanRow.status.in_((PlanStatus.QUEUED, PlanStatus.RUNNING)),
            )
            .values(
                status=PlanStatus.CANCELLED,
                lease_owner=None,
                lease_expires_at=None,
                finished_at=utcnow(),
            )
        )
        return bool(getattr(result, "rowcount", 0))

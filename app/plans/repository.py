"""Stored capacity plans, and every query on them.

A plan keeps the request as validated, the answer as returned, and the versions of the catalog
entries it was computed from, so a deployment tool can show later why a plan said what it said
(and tell whether the catalog has moved on since). Documents are JSON; a plan is never updated.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Float, String, func, select
from sqlalchemy.orm import Mapped, Session, load_only, mapped_column

from app.catalog.orm import utcnow
from app.db.session import Base, UtcDateTime

__all__ = ["PlanRepository", "PlanRow"]


class PlanRow(Base):
    __tablename__ = "plans"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)
    model_id: Mapped[str] = mapped_column(String(64), index=True)
    """The catalog model id, or `inline`."""
    requests_per_s: Mapped[float] = mapped_column(Float)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The request body as validated (defaults filled in)."""
    response: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The answer: plans, pruned candidates, the disaggregated option, notes."""
    catalog_versions: Mapped[dict[str, Any]] = mapped_column(JSON)
    """{"gpus": {id: version}, "models": {id: version}} of the entries the plan used."""
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The best plan in brief, for lists (which do not load the documents)."""


class PlanRepository:
    """Adds and reads plans. Adds flush; the request's session commits."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, row: PlanRow) -> None:
        self.session.add(row)
        self.session.flush()

    def get(self, plan_id: str) -> PlanRow | None:
        return self.session.get(PlanRow, plan_id)

    def recent(
        self, *, limit: int, offset: int, model_id: str | None = None
    ) -> tuple[Sequence[PlanRow], int]:
        """One page, newest first, and how many plans match in all; the request and response
        documents are not loaded."""
        where = [PlanRow.model_id == model_id] if model_id is not None else []
        total = self.session.scalar(select(func.count()).select_from(PlanRow).where(*where))
        rows = self.session.scalars(
            select(PlanRow)
            .options(
                load_only(
                    PlanRow.id,
                    PlanRow.created_at,
                    PlanRow.model_id,
                    PlanRow.requests_per_s,
                    PlanRow.summary,
                )
            )
            .where(*where)
            .order_by(PlanRow.created_at.desc(), PlanRow.id.desc())
            .limit(limit)
            .offset(offset)
        ).all()
        return rows, int(total or 0)

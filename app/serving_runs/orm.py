"""Uploaded serving-benchmark results, with the validation made when they were stored."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.session import Base, UtcDateTime

__all__ = ["ServingRunRow"]


def _now() -> datetime:
    return datetime.now(UTC)


class ServingRunRow(Base):
    __tablename__ = "serving_runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    gpu_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("gpus.id", ondelete="CASCADE"), index=True
    )
    model_id: Mapped[str] = mapped_column(String(64))
    tool: Mapped[str] = mapped_column(String(16))
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The upload as given, result file included."""
    validation: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=_now, index=True)

"""Tables of measured benchmark runs, their points, and the calibrations fitted to them.

A run keeps the whole uploaded document as JSON (so a read returns exactly what was uploaded,
with the id the service assigned), and its points again as rows, so queries and validation read
them without parsing documents. A run names its GPU by catalog id as a plain column, not a
foreign key: a run may name a GPU the catalog does not have (yet), and outlives catalog edits.

A calibration belongs to a catalog GPU (deleted with it) and keeps the values before and after,
their errors and the runs it was fitted to: the history of the GPU's efficiency.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.catalog.orm import utcnow
from app.db.session import Base, UtcDateTime

__all__ = ["BenchmarkPointRow", "BenchmarkRunRow", "CalibrationRow"]


class BenchmarkRunRow(Base):
    __tablename__ = "benchmark_runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    origin: Mapped[str] = mapped_column(String(16), default="user")
    """`bundled` (shipped in app/formats/reference/) or `user` (uploaded)."""
    bundled_digest: Mapped[str | None] = mapped_column(String(64), default=None)
    gpu_id: Mapped[str | None] = mapped_column(String(64), index=True)
    model_id: Mapped[str | None] = mapped_column(String(64), index=True)
    device_name: Mapped[str] = mapped_column(String(200), index=True)
    device_kind: Mapped[str] = mapped_column(String(16))
    dtype: Mapped[str] = mapped_column(String(16))
    tp: Mapped[int] = mapped_column(Integer)
    provenance_kind: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    """The document's `created_at`: when the run started."""
    stored_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)
    document: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The run document as uploaded (JSON), `id` set to this row's id."""

    points: Mapped[list[BenchmarkPointRow]] = relationship(
        back_populates="run",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="BenchmarkPointRow.position",
    )


class BenchmarkPointRow(Base):
    """One point of a run, at its position in the document's `points`."""

    __tablename__ = "benchmark_points"

    run_id: Mapped[str] = mapped_column(
        ForeignKey("benchmark_runs.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    phase: Mapped[str] = mapped_column(String(16))
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    batch_size: Mapped[int] = mapped_column(Integer)
    context_tokens: Mapped[int | None] = mapped_column(Integer)
    median_ms: Mapped[float | None] = mapped_column(Float)
    p10_ms: Mapped[float | None] = mapped_column(Float)
    p90_ms: Mapped[float | None] = mapped_column(Float)
    repeats: Mapped[int] = mapped_column(Integer)
    skipped_reason: Mapped[str | None] = mapped_column(Text)

    run: Mapped[BenchmarkRunRow] = relationship(back_populates="points")


class CalibrationRow(Base):
    __tablename__ = "calibrations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpu_id: Mapped[str] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    run_ids: Mapped[list[str]] = mapped_column(JSON)
    parameters: Mapped[list[str]] = mapped_column(JSON)
    points: Mapped[int] = mapped_column(Integer)
    """Measured points the fit used."""
    before: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The efficiency the fit started from (the GPU's stored one, or the generic default)."""
    after: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The efficiency fields the calibration wrote."""
    before_mape_pct: Mapped[float] = mapped_column(Float)
    after_mape_pct: Mapped[float] = mapped_column(Float)
    before_mape_pct_by_phase: Mapped[dict[str, float]] = mapped_column(JSON)
    after_mape_pct_by_phase: Mapped[dict[str, float]] = mapped_column(JSON)
    gpu_version_before: Mapped[int] = mapped_column(Integer)
    gpu_version_after: Mapped[int] = mapped_column(Integer)

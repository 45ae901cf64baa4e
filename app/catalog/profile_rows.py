"""Profiles users uploaded (`POST /v1/profiles`). The bundled ones are package data
(`app/catalog/data/profiles/`), never rows: they are large and read-only."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.session import Base, UtcDateTime

__all__ = ["ProfileRow"]


def _now() -> datetime:
    return datetime.now(UTC)


class ProfileRow(Base):
    __tablename__ = "profiles"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    gpu_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("gpus.id", ondelete="CASCADE"), index=True
    )
    engine: Mapped[str] = mapped_column(String(16))
    version: Mapped[str] = mapped_column(String(64))
    is_default: Mapped[bool] = mapped_column(Boolean, default=False)
    document: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=_now)

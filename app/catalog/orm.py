"""Tables of the GPU and model catalogs.

Every entry carries `version` (optimistic concurrency: an UPDATE names the version it read, so of
two racing writers exactly one matches) and created/updated timestamps. `origin` says whether the
row came from the bundled catalog or from a user; `user_modified` protects a user's edit of a
bundled row from the next catalog load.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, declared_attr, mapped_column

from app.db.session import Base, UtcDateTime

__all__ = [
    "CatalogChange",
    "CatalogEntry",
    "CatalogLastVersion",
    "CatalogTombstone",
    "GpuExpectedError",
    "GpuRow",
    "ModelRow",
    "utcnow",
]


def utcnow() -> datetime:
    return datetime.now(UTC)


class CatalogEntry(Base):
    """Columns every catalog entry has."""

    __abstract__ = True

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    origin: Mapped[str] = mapped_column(String(16), default="user")
    user_modified: Mapped[bool] = mapped_column(Boolean, default=False)
    bundled_digest: Mapped[str | None] = mapped_column(String(64), default=None)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)

    @declared_attr.directive
    def __mapper_args__(cls) -> dict[str, Any]:  # noqa: N805
        # UPDATE ... WHERE version = :read_version; zero rows matched raises StaleDataError.
        return {"version_id_col": cls.__table__.c.version}


class GpuRow(CatalogEntry):
    __tablename__ = "gpus"

    name: Mapped[str] = mapped_column(String(200))
    vendor: Mapped[str] = mapped_column(String(32), index=True)
    architecture: Mapped[str | None] = mapped_column(String(32))
    form_factor: Mapped[str | None] = mapped_column(String(32))
    memory_bytes: Mapped[int] = mapped_column(BigInteger, index=True)
    memory_type: Mapped[str | None] = mapped_column(String(32))
    memory_bandwidth_bytes_per_s: Mapped[float] = mapped_column(Float)
    peak_flops_per_s: Mapped[dict[str, float]] = mapped_column(JSON)
    interconnect: Mapped[dict[str, Any]] = mapped_column(JSON)
    tdp_watts: Mapped[float | None] = mapped_column(Float)
    aliases: Mapped[list[str]] = mapped_column(JSON, default=list)
    price_per_gpu_hour_usd: Mapped[float | None] = mapped_column(Float)
    price_note: Mapped[str | None] = mapped_column(Text)
    efficiency: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    sources: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)


class ModelRow(CatalogEntry):
    __tablename__ = "models"

    name: Mapped[str] = mapped_column(String(200))
    family: Mapped[str] = mapped_column(String(32), index=True)
    hf_repo: Mapped[str | None] = mapped_column(String(200))
    architecture: Mapped[dict[str, Any]] = mapped_column(JSON)
    """`app.formats.specs.spec_document` of the model's `ModelSpec`: one JSON document, so a
    field added to the spec needs no new column."""
    params_total: Mapped[int] = mapped_column(BigInteger, index=True)
    params_active: Mapped[int] = mapped_column(BigInteger)
    published_params: Mapped[int | None] = mapped_column(BigInteger)
    sources: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)

    def fields(self) -> dict[str, Any]:
        """What a client writes of this entry, flat: its architecture and what it is."""
        return {
            **self.architecture,
            "name": self.name,
            "family": self.family,
            "hf_repo": self.hf_repo,
            "published_params": self.published_params,
            "sources": self.sources,
        }


class GpuExpectedError(Base):
    """How far estimates on a GPU are to be trusted: by phase, the RMS of the validation error
    of the stored benchmark runs of the GPU under its current figures and efficiency. Written
    by the runs package whenever a run, a calibration or the GPU itself changes
    (`app.runs.validation.refresh_expected_errors`); read by the spec cache. A table of its
    own, so that keeping it current never bumps the GPU's version (its ETag)."""

    __tablename__ = "gpu_expected_errors"

    gpu_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("gpus.id", ondelete="CASCADE"), primary_key=True
    )
    expected_error_pct: Mapped[dict[str, float]] = mapped_column(JSON, default=dict)
    computed_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)


class CatalogTombstone(Base):
    """A bundled entry a user deleted: the catalog load must not bring it back."""

    __tablename__ = "catalog_tombstones"

    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    deleted_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class CatalogLastVersion(Base):
    """The version a deleted entry had: the same id created again continues from it, so a
    version (an ETag, a plan's `catalog_versions`) never names two different entries."""

    __tablename__ = "catalog_last_versions"

    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    last_version: Mapped[int] = mapped_column(Integer, nullable=False)


class CatalogChange(Base):
    """One write of a catalog entry: what was done, the version it left (or deleted), and the
    principal whose key did it (None for the bundled catalog's load). The entry's history."""

    __tablename__ = "catalog_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))
    entry_id: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(16))
    principal: Mapped[str | None] = mapped_column(String(64), nullable=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)

"""Every catalog query lives here. Repositories add and flush; they never commit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from sqlalchemy import ColumnElement, delete, func, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.catalog.orm import (
    CatalogChange,
    CatalogEntry,
    CatalogLastVersion,
    CatalogTombstone,
    GpuExpectedError,
    GpuRow,
    ModelRow,
)
from app.principals import PRINCIPAL

__all__ = ["CatalogRepository", "GpuRepository", "ModelRepository"]

RowT = TypeVar("RowT", bound=CatalogEntry)


class CatalogRepository(Generic[RowT]):
    """Reads and writes one catalog table, with the tombstones of deleted bundled entries."""

    row_type: type[RowT]
    kind: str

    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, entry_id: str) -> RowT | None:
        return self.session.get(self.row_type, entry_id)

    def all(self) -> Sequence[RowT]:
        """Every entry, by id."""
        return self.session.scalars(select(self.row_type).order_by(self.row_type.id)).all()

    def names(self) -> tuple[list[str], dict[str, str]]:
        """Every id, and every other name an entry answers to (`other_names`), lower-cased,
        mapped to its entry's id."""
        ids: list[str] = []
        others: dict[str, str] = {}
        for row in self.session.scalars(select(self.row_type)):
            ids.append(row.id)
            for name in self.other_names(row):
                others.setdefault(name.lower(), row.id)
        return ids, others

    def other_names(self, row: RowT) -> list[str]:
        return []

    def get_for_update(self, entry_id: str) -> RowT | None:
        """The row, read fresh from the database (not from the session's identity map) and
        locked until the transaction ends (`SELECT ... FOR UPDATE` on PostgreSQL; SQLite has
        one writer at a time anyway). Writers of one row queue here instead of racing, so a
        patch without `If-Match` applies to the latest version, and an `If-Match` writer that
        waited sees the version its predecessor committed."""
        return self.session.get(
            self.row_type, entry_id, populate_existing=True, with_for_update=True
        )

    def page(
        self, where: Sequence[ColumnElement[bool]], *, limit: int, offset: int
    ) -> tuple[Sequence[RowT], int]:
        """One page ordered by id, and how many rows match in all."""
        total = self.session.scalar(select(func.count()).select_from(self.row_type).where(*where))
        rows = self.session.scalars(
            select(self.row_type)
            .where(*where)
            .order_by(self.row_type.id)
            .limit(limit)
            .offset(offset)
        ).all()
        return rows, int(total or 0)

    def add(self, row: RowT) -> None:
        """Insert `row`; an id deleted before continues from the version it was deleted at
        (the ORM inserts version 1 whatever the row says, so the count is set after)."""
        self.session.add(row)
        self.session.flush()
        last = self.session.get(CatalogLastVersion, (self.kind, row.id))
        if last is not None and last.last_version >= row.version:
            version = last.last_version + 1
            self.session.execute(
                update(self.row_type).where(self.row_type.id == row.id).values(version=version)
            )
            set_committed_value(row, "version", version)

    def flush(self) -> None:
        self.session.flush()

    def delete(self, row: RowT) -> None:
        if row.origin == "bundled":
            self.session.merge(CatalogTombstone(kind=self.kind, id=row.id))
        self.session.merge(CatalogLastVersion(kind=self.kind, id=row.id, last_version=row.version))
        self.session.delete(row)
        self.session.flush()

    def note(self, entry_id: str, version: int, action: str) -> None:
        """Record a write in the entry's history, by the principal the transaction acts for
        (`Session.info`; None: the bundled catalog's load)."""
        self.session.add(
            CatalogChange(
                kind=self.kind,
                entry_id=entry_id,
                version=version,
                action=action,
                principal=self.session.info.get(PRINCIPAL),
            )
        )

    def history(self, entry_id: str, *, limit: int, offset: int) -> tuple[list[CatalogChange], int]:
        """The entry's recorded writes, newest first, and how many there are."""
        where = (CatalogChange.kind == self.kind, CatalogChange.entry_id == entry_id)
        total = self.session.scalar(select(func.count()).select_from(CatalogChange).where(*where))
        rows = self.session.scalars(
            select(CatalogChange)
            .where(*where)
            .order_by(CatalogChange.id.desc())
            .limit(limit)
            .offset(offset)
        ).all()
        return list(rows), int(total or 0)

    def is_tombstoned(self, entry_id: str) -> bool:
        return self.session.get(CatalogTombstone, (self.kind, entry_id)) is not None

    def clear_tombstone(self, entry_id: str) -> None:
        self.session.execute(
            delete(CatalogTombstone).where(
                CatalogTombstone.kind == self.kind, CatalogTombstone.id == entry_id
            )
        )


class GpuRepository(CatalogRepository[GpuRow]):
    row_type = GpuRow
    kind = "gpu"

    def filters(
        self, *, vendor: str | None, min_memory_bytes: int | None
    ) -> list[ColumnElement[bool]]:
        where: list[ColumnElement[bool]] = []
        if vendor is not None:
            where.append(GpuRow.vendor == vendor)
        if min_memory_bytes is not None:
            where.append(GpuRow.memory_bytes >= min_memory_bytes)
        return where

    def other_names(self, row: GpuRow) -> list[str]:
        """Device names (`aliases`), as nvidia-smi and the benchmark job report them."""
        return list(row.aliases or ())

    def expected_error(self, gpu_id: str) -> dict[str, float]:
        """The GPU's stored expected error by phase; empty when none is stored."""
        row = self.session.get(GpuExpectedError, gpu_id)
        return dict(row.expected_error_pct) if row is not None else {}

    def set_expected_error(self, gpu_id: str, errors: dict[str, float]) -> None:
        row = self.session.get(GpuExpectedError, gpu_id)
        if row is None:
            self.session.add(GpuExpectedError(gpu_id=gpu_id, expected_error_pct=errors))
        elif row.expected_error_pct != errors:
            row.expected_error_pct = errors

    def alias_owners(self) -> dict[str, str]:
        """Every alias in the catalog, mapped to the GPU id that claims it."""
        owners: dict[str, str] = {}
        for gpu_id, aliases in self.session.execute(select(GpuRow.id, GpuRow.aliases)):
            for alias in aliases or ():
                owners[alias] = gpu_id
        return owners


class ModelRepository(CatalogRepository[ModelRow]):
    row_type = ModelRow
    kind = "model"

    def other_names(self, row: ModelRow) -> list[str]:
        """The Hugging Face repository (`meta-llama/Meta-Llama-3-8B`)."""
        return [row.hf_repo] if row.hf_repo else []

    def filters(
        self, *, family: str | None, min_params: int | None, max_params: int | None
    ) -> list[ColumnElement[bool]]:
        where: list[ColumnElement[bool]] = []
        if family is not None:
            where.append(ModelRow.family == family)
        if min_params is not None:
            where.append(ModelRow.params_total >= min_params)
        if max_params is not None:
            where.append(ModelRow.params_total <= max_params)
        return where

"""Every query of benchmark runs and calibrations. Repositories add and flush; they never commit."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import ColumnElement, false, func, or_, select
from sqlalchemy.orm import Session, selectinload

from app.runs.orm import BenchmarkRunRow, CalibrationRow

__all__ = ["BenchmarkRunRepository", "CalibrationRepository"]


class BenchmarkRunRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, run_id: str, *, with_points: bool = False) -> BenchmarkRunRow | None:
        options = [selectinload(BenchmarkRunRow.points)] if with_points else []
        return self.session.get(BenchmarkRunRow, run_id, options=options)

    def page(
        self, *, gpu_id: str | None, model_id: str | None, limit: int, offset: int
    ) -> tuple[Sequence[BenchmarkRunRow], int]:
        """One page, newest first, and how many runs match in all."""
        where: list[ColumnElement[bool]] = []
        if gpu_id is not None:
            where.append(BenchmarkRunRow.gpu_id == gpu_id)
        if model_id is not None:
            where.append(BenchmarkRunRow.model_id == model_id)
        total = self.session.scalar(select(func.count()).select_from(BenchmarkRunRow).where(*where))
        rows = self.session.scalars(
            select(BenchmarkRunRow)
            .where(*where)
            .order_by(BenchmarkRunRow.stored_at.desc(), BenchmarkRunRow.id)
            .limit(limit)
            .offset(offset)
        ).all()
        return rows, int(total or 0)

    def for_gpu(self, gpu_id: str, device_names: Collection[str]) -> Sequence[BenchmarkRunRow]:
        """Runs that name `gpu_id`, or whose device reports one of `device_names` (the GPU's
        aliases), with their points, oldest first."""
        by_alias = BenchmarkRunRow.device_name.in_(list(device_names)) if device_names else false()
        return self.session.scalars(
            select(BenchmarkRunRow)
            .where(or_(BenchmarkRunRow.gpu_id == gpu_id, by_alias))
            .options(selectinload(BenchmarkRunRow.points))
            .order_by(BenchmarkRunRow.stored_at, BenchmarkRunRow.id)
        ).all()

    def add(self, row: BenchmarkRunRow) -> None:
        self.session.add(row)
        self.session.flush()

    def flush(self) -> None:
        self.session.flush()


class CalibrationRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, gpu_id: str, calibration_id: str) -> CalibrationRow | None:
        row = self.session.get(CalibrationRow, calibration_id)
        return row if row is not None and row.gpu_id == gpu_id else None

    def page(self, gpu_id: str, *, limit: int, offset: int) -> tuple[Sequence[CalibrationRow], int]:
        """One page of `gpu_id`'s calibrations, newest first, and how many it has."""
        where = CalibrationRow.gpu_id == gpu_id
        total = self.session.scalar(select(func.count()).select_from(CalibrationRow).where(where))
        rows = self.session.scalars(
            select(CalibrationRow)
            .where(where)
            .order_by(CalibrationRow.created_at.desc(), CalibrationRow.id.desc())
            .limit(limit)
            .offset(offset)
        ).all()
        return rows, int(total or 0)

    def add(self, row: CalibrationRow) -> None:
        self.session.add(row)
        self.session.flush()

"""Every table of the service, imported in one place so `Base.metadata` is complete wherever it
is needed (Alembic's autogenerate, the tests' database reset)."""

from app.catalog.orm import (
    CatalogChange,
    CatalogLastVersion,
    CatalogTombstone,
    GpuExpectedError,
    GpuRow,
    ModelRow,
)
from app.catalog.profile_rows import ProfileRow
from app.db.session import Base
from app.plans.repository import PlanRow
from app.runs.orm import BenchmarkPointRow, BenchmarkRunRow, CalibrationRow
from app.serving_runs.orm import ServingRunRow

__all__ = [
    "Base",
    "BenchmarkPointRow",
    "BenchmarkRunRow",
    "CalibrationRow",
    "CatalogChange",
    "CatalogLastVersion",
    "CatalogTombstone",
    "GpuExpectedError",
    "GpuRow",
    "ModelRow",
    "PlanRow",
    "ProfileRow",
    "ServingRunRow",
]

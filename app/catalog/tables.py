"""Every table of the service, imported in one place so `Base.metadata` is complete wherever it
is needed (Alembic's autogenerate, the tests' database reset)."""

from app.catalog.db import Base
from app.catalog.orm import CatalogTombstone, GpuRow, ModelRow
from app.catalog.plans import PlanRow
from app.catalog.runs import BenchmarkPointRow, BenchmarkRunRow, CalibrationRow

__all__ = [
    "Base",
    "BenchmarkPointRow",
    "BenchmarkRunRow",
    "CalibrationRow",
    "CatalogTombstone",
    "GpuRow",
    "ModelRow",
    "PlanRow",
]

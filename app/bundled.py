"""What ships with Ridgeline, loaded into a database in one transaction: the GPU and model
catalog (`app.catalog.loader`), the reference benchmark runs (`app.runs.reference`), and the
expected error of every GPU they leave stored runs for (`app.runs.validation`). `make run`, the
`ridgeline load-catalog` command and the tests load it through here."""

from __future__ import annotations

from collections import Counter

from sqlalchemy.orm import Session

from app.catalog.loader import load_catalog_entries
from app.catalog.repository import GpuRepository
from app.catalog.service import LoadOutcome
from app.runs.reference import load_reference_runs
from app.runs.validation import refresh_expected_errors

__all__ = ["load_bundled_catalog"]


def load_bundled_catalog(session: Session) -> dict[str, Counter[LoadOutcome]]:
    """Upsert every bundled entry and reference run (never over a user's edit, entry or
    deletion), then bring every GPU's expected error up to date; how many of each kind had
    each outcome."""
    report = load_catalog_entries(session)
    report["benchmark_runs"] = load_reference_runs(session)
    session.flush()
    refresh_expected_errors(session, [row.id for row in GpuRepository(session).all()])
    return report

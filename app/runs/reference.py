"""The reference benchmark runs that ship with Ridgeline (`app/formats/reference/*.json`): each
stored under a stable id derived from its file name (`ref-` + the name without `.json`) with the
digest of its content, so a second load adds nothing and a changed file replaces the stored run.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from importlib import resources

from sqlalchemy.orm import Session

from app.catalog.service import LoadOutcome
from app.formats.run_document import RunDocument
from app.runs.service import upsert_bundled_run

__all__ = ["bundled_runs", "load_reference_runs"]

_REFERENCE_RUNS = ("app.formats", "reference")
_RUN_ID_PREFIX = "ref-"
_MAX_ID_LENGTH = 64


def bundled_runs() -> list[tuple[str, RunDocument, str]]:
    """The reference runs, each as (stable id, document, content digest), by file name."""
    package, folder = _REFERENCE_RUNS
    runs = []
    files = resources.files(package).joinpath(folder).iterdir()
    for path in sorted(files, key=lambda p: p.name):
        if not path.name.endswith(".json"):
            continue
        run_id = _RUN_ID_PREFIX + path.name.removesuffix(".json")
        if len(run_id) > _MAX_ID_LENGTH:
            raise ValueError(f"{path.name}: name too long for a run id ({run_id!r})")
        text = path.read_text(encoding="utf-8")
        document = RunDocument.model_validate_json(text)
        digest = hashlib.sha256(text.encode()).hexdigest()
        runs.append((run_id, document, digest))
    return runs


def load_reference_runs(session: Session) -> Counter[LoadOutcome]:
    """Upsert every reference run; how many had each outcome."""
    outcomes: Counter[LoadOutcome] = Counter()
    for run_id, document, digest in bundled_runs():
        outcomes[upsert_bundled_run(session, run_id, document, digest)] += 1
    return outcomes

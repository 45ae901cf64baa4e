"""Loads the catalog that ships with Ridgeline (`app/catalog/data/*.json`) into the database.
(`app.bundled.load_bundled` loads it with the reference benchmark runs.)

Idempotent, and polite: an entry a user created, edited or deleted is left as the user left it;
a bundled entry nobody touched is brought up to the shipped figures. A reference run is stored
under a stable id derived from its file name (`ref-` + the name without `.json`) with the digest
of its content: a second load adds nothing, a changed file replaces the stored run.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from importlib import resources
from typing import Any

from sqlalchemy.orm import Session

from app.catalog.service import LoadOutcome, gpu_entries, model_entries, upsert_bundled

__all__ = ["bundled_gpus", "bundled_models", "load_catalog_entries"]

_DATA = "app.catalog.data"
_BOOKKEEPING = ("id", "published_params_note")


def _read(name: str) -> Any:
    return json.loads(resources.files(_DATA).joinpath(name).read_text(encoding="utf-8"))


def _digest(entry: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()


def bundled_gpus() -> list[dict[str, Any]]:
    """The shipped GPUs, each with its default efficiency (from efficiency.json) merged in."""
    efficiencies = _read("efficiency.json")["efficiencies"]
    gpus = []
    for entry in _read("gpus.json")["gpus"]:
        gpus.append({**entry, "efficiency": efficiencies.get(entry["id"])})
    return gpus


def bundled_models() -> list[dict[str, Any]]:
    models: list[dict[str, Any]] = _read("models.json")["models"]
    return models


def load_catalog_entries(session: Session) -> dict[str, Counter[LoadOutcome]]:
    """Upsert every bundled GPU and model; returns how many of each kind had each outcome."""
    report: dict[str, Counter[LoadOutcome]] = {"gpus": Counter(), "models": Counter()}
    for kind, entries, bundled in (
        ("gpus", gpu_entries(session), bundled_gpus()),
        ("models", model_entries(session), bundled_models()),
    ):
        for entry in bundled:
            fields = {k: v for k, v in entry.items() if k not in _BOOKKEEPING}
            report[kind][upsert_bundled(entries, entry["id"], fields, _digest(entry))] += 1
    return report

"""Which profiles a GPU has, and the engine's `Profile` of each, cached per process.

Bundled profiles are package data (`app/catalog/data/profiles/index.json` lists them; each
document is parsed on first use); uploaded ones are rows of `profiles`. Documents never change
once written, so a parsed profile is kept for the life of the process.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.catalog.profile_rows import ProfileRow
from app.engine.profiles import Profile, engine_label
from app.formats.profile_document import ProfileDocument

__all__ = [
    "ROOFLINE",
    "ProfileLibrary",
    "ProfileRef",
    "bundled_document",
    "bundled_refs",
    "choose_profile",
    "profile_refs",
    "version_key",
]

ROOFLINE = "roofline"
"""The `engine` that asks for the roofline, whatever profiles the GPU has."""


def _data(name: str) -> str:
    return (
        resources.files("app.catalog").joinpath("data").joinpath("profiles").joinpath(name)
    ).read_text()


@dataclass(frozen=True, slots=True)
class ProfileRef:
    """A profile's identity: enough to choose it without reading its tables."""

    id: str
    gpu: str
    engine: str
    version: str
    default: bool
    bundled: bool

    @property
    def label(self) -> str:
        return engine_label(self.engine, self.version)


@cache
def bundled_refs() -> tuple[ProfileRef, ...]:
    index = json.loads(_data("index.json"))
    return tuple(
        ProfileRef(e["id"], e["gpu"], e["engine"], e["version"], e["default"], bundled=True)
        for e in index["profiles"]
    )


@cache
def bundled_document(profile_id: str) -> ProfileDocument:
    return ProfileDocument.model_validate_json(_data(f"{profile_id}.json"))


def profile_refs(session: Session, gpu_id: str) -> tuple[ProfileRef, ...]:
    """The GPU's profiles: uploaded ones first (newest first), then the bundled ones."""
    rows = session.scalars(
        select(ProfileRow).where(ProfileRow.gpu_id == gpu_id).order_by(ProfileRow.created_at.desc())
    )
    stored = tuple(
        ProfileRef(r.id, r.gpu_id, r.engine, r.version, r.is_default, bundled=False) for r in rows
    )
    return stored + tuple(ref for ref in bundled_refs() if ref.gpu == gpu_id)


def version_key(version: str) -> tuple[Any, ...]:
    """An engine version as a sort key: numeric parts as numbers (0.5.14 after 0.5.9), a
    release-candidate tag as its own part (1.3.0rc20 after 1.3.0rc9); any two keys compare."""
    parts = version.replace("rc", ".rc.").split(".")
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts if p)


def choose_profile(refs: tuple[ProfileRef, ...], engine: str | None) -> ProfileRef | None:
    """The profile an `engine` asks for among `refs`: none given, the GPU's default (an
    uploaded default before a bundled one); `name`, that engine's default or else its newest
    version; `name@version`, exactly that; `roofline`, none."""
    if engine == ROOFLINE:
        return None
    if engine is None:
        return next((ref for ref in refs if ref.default), None)
    name, _, version = engine.partition("@")
    matching = [ref for ref in refs if ref.engine == name]
    if version:
        return next((ref for ref in matching if ref.version == version), None)
    if not matching:
        return None
    defaults = [ref for ref in matching if ref.default]
    return defaults[0] if defaults else max(matching, key=lambda ref: version_key(ref.version))


class ProfileLibrary:
    """Parsed profiles by id. Thread-safe; a stored profile is read from the database once."""

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._session_factory = session_factory
        self._profiles: dict[str, Profile] = {}
        self._lock = threading.Lock()

    def cached(self, ref: ProfileRef) -> Profile | None:
        return self._profiles.get(ref.id)

    def profile(self, ref: ProfileRef) -> Profile:
        found = self._profiles.get(ref.id)
        if found is not None:
            return found
        if ref.bundled:
            document = bundled_document(ref.id)
        else:
            with self._session_factory() as session:
                row = session.get(ProfileRow, ref.id)
                if row is None:
                    raise LookupError(ref.id)
                document = ProfileDocument.model_validate(row.document, strict=False)
        profile = document.to_profile()
        with self._lock:
            self._profiles.setdefault(ref.id, profile)
        return profile

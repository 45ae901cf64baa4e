"""Which profiles a GPU has, and the engine's `Profile` of each, cached per process.

Bundled profiles are package data (`app/catalog/data/profiles/index.json` lists them; each
document, gzip-compressed JSON, is parsed on first use); uploaded ones are rows of `profiles`.
Documents never change once written, so a parsed profile is kept while it is among the most
recently used (`PROFILES_KEPT`: the largest of the silicon database parses to some 11 MiB).
"""

from __future__ import annotations

import gzip
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.catalog.profile_rows import ProfileRow
from app.engine.profiles import Profile
from app.engine.serving import ROOFLINE, EngineName, ServingEngine, release
from app.errors import InvalidInput
from app.formats.profile_document import ProfileDocument

__all__ = [
    "EngineChoice",
    "ProfileLibrary",
    "ProfileRef",
    "Relatives",
    "bundled_document",
    "bundled_file",
    "bundled_refs",
    "choose_engine",
    "profile_refs",
    "version_key",
]


def _data(name: str) -> bytes:
    return (
        resources.files("app.catalog").joinpath("data").joinpath("profiles").joinpath(name)
    ).read_bytes()


def bundled_file(profile_id: str) -> str:
    """The file name of a bundled profile's document."""
    return f"{profile_id}.json.gz"


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
    def serving_engine(self) -> ServingEngine:
        return ServingEngine(EngineName(self.engine), self.version)

    @property
    def label(self) -> str:
        return self.serving_engine.label


@cache
def bundled_refs() -> tuple[ProfileRef, ...]:
    index = json.loads(_data("index.json"))
    return tuple(
        ProfileRef(e["id"], e["gpu"], e["engine"], e["version"], e["default"], bundled=True)
        for e in index["profiles"]
    )


PROFILES_KEPT = 8
"""Parsed profiles a process keeps: 8 x 9-15 MiB (resident, measured 2026-12-07; TensorRT-LLM's
on Blackwell, with 2,184 MoE tables, the largest), and `DOCUMENTS_KEPT` documents. Timers and
resolved targets built from a profile keep it while they are kept (`app.targets.service`), one
copy whatever the library evicted meanwhile: at most one per profile in use."""
DOCUMENTS_KEPT = 2
"""Parsed bundled documents a process keeps: each is read once to build its profile, and again
only when a client reads the profile (`GET /v1/profiles/{id}`)."""


@lru_cache(maxsize=DOCUMENTS_KEPT)
def bundled_document(profile_id: str) -> ProfileDocument:
    return ProfileDocument.model_validate_json(gzip.decompress(_data(bundled_file(profile_id))))


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
    """An engine version as a sort key: releases in release order (0.5.14 after 0.5.9,
    1.3.0rc20 after 1.3.0rc9), anything that is not a release before them, by its text."""
    found = release(version)
    return (1, found, "") if found is not None else (0, None, version)


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """The engine a request runs on a GPU and what times its steps: one of the GPU's profiles
    of that engine, or the roofline (`profile` None), with the warning that says so."""

    engine: ServingEngine
    """Resolved: a version for every engine but the roofline."""
    profile: ProfileRef | None
    warnings: tuple[str, ...] = ()
    measured_on: str | None = None
    """The GPU `profile` was measured on when it is another (a relative's tables, scaled to
    this GPU's datasheet: `ProfiledStepCost(measured_on=...)`); None: this GPU's own."""

    @property
    def basis(self) -> str:
        """What times the steps without a profile: `roofline`, with why when the engine named
        has no profile here."""
        if not self.engine.policy.profiled or not self.warnings:
            return ROOFLINE.label
        return f"roofline (no {self.engine.label} profile for this GPU)"


Relatives = Callable[[], Iterable[tuple[str, tuple[ProfileRef, ...]]]]
"""The GPU's relatives with their profiles, nearest first (`app.catalog.spec_cache.relatives`),
read only when the GPU has no profile of the engine asked for."""


def _pick(
    requested: ServingEngine, refs: tuple[ProfileRef, ...]
) -> tuple[list[ProfileRef], ProfileRef | None]:
    """`refs` of the engine requested, and the one that times it: that release's, or with none
    named the default, else the newest."""
    matching = [ref for ref in refs if ref.serving_engine.name is requested.name]
    if requested.version is not None:
        return matching, next((ref for ref in matching if ref.version == requested.version), None)
    if not matching:
        return matching, None
    defaults = [ref for ref in matching if ref.default]
    return matching, defaults[0] if defaults else max(
        matching, key=lambda r: version_key(r.version)
    )


def _stand_in(
    requested: ServingEngine, gpu: str, relatives: Relatives | None
) -> EngineChoice | None:
    """The engine's profile on the GPU's nearest relative that has one (as `requested` would
    choose there), or None."""
    for relative, relative_refs in relatives() if relatives is not None else ():
        _, found = _pick(requested, relative_refs)
        if found is not None:
            return EngineChoice(
                found.serving_engine,
                found,
                (
                    f"GPU {gpu} has no {requested.label} profile: its steps are timed from "
                    f"{relative}'s ({found.label}), each table scaled by the ratio of the two "
                    "GPUs' roofline times of the same op and shape; upload a profile (POST "
                    "/v1/profiles) to time its own kernels",
                ),
                measured_on=relative,
            )
    return None


def choose_engine(
    requested: ServingEngine | None,
    refs: tuple[ProfileRef, ...],
    *,
    gpu: str,
    measured: bool = True,
    relatives: Relatives | None = None,
) -> EngineChoice:
    """The engine `requested` runs on the GPU whose profiles are `refs`, and the profile that
    times it. The one resolution every route uses:

    - none requested: the GPU's default profile's engine (an uploaded default before a bundled
      one), else the roofline;
    - `name`: that engine's default profile here, else its newest; without one, the nearest
      relative's (`relatives`) as `name` would choose there, its tables scaled to this GPU,
      with a warning; without a relative of that engine, the engine's newest release, timed by
      the roofline with a warning;
    - `name@version`: that profile; where the GPU has profiles of the engine but none of that
      release, a 422 on `engine` listing the releases it has (a step time measured on another
      release is not that release's); where it has none of the engine, that release's profile
      on the nearest relative that has one, scaled, else that release timed by the roofline,
      warned;
    - `roofline`: the roofline.

    Relatives stand in only where the validation showed scaled tables closer than the roofline
    (docs/validation/README.md): the GPUs of the same vendor and architecture.

    `measured` False (an ideal or explicit efficiency: a roofline what-if) times every engine
    by the roofline, any release, without a warning. The scheduler follows the engine either
    way."""
    if requested is None:
        default = next((ref for ref in refs if ref.default), None)
        if default is not None:
            return EngineChoice(default.serving_engine, default if measured else None)
    if requested is None or not requested.policy.profiled:
        return EngineChoice(ROOFLINE, None)
    matching, found = _pick(requested, refs)
    if requested.version is not None and found is None and matching and measured:
        versions = sorted({ref.version for ref in matching}, key=version_key)
        raise InvalidInput.at(
            "engine",
            f"GPU {gpu} has no {requested.label} profile; its {requested.policy.title} "
            f"profiles are of {', '.join(versions)}: name one of them, or "
            f"`{requested.name.value}` alone for the newest (or an ideal or explicit "
            f"efficiency to time {requested.label}'s scheduler by the roofline)",
        )
    if found is not None:
        return EngineChoice(found.serving_engine, found if measured else None)
    engine = requested.resolved()
    if not measured:
        return EngineChoice(engine, None)
    stand_in = _stand_in(requested, gpu, relatives)
    if stand_in is not None:
        return stand_in
    have = ", ".join(sorted(ref.label for ref in refs)) or "none"
    return EngineChoice(
        engine,
        None,
        (
            f"GPU {gpu} has no {engine.label} profile (profiles: {have}): its steps are timed "
            f"by the roofline at the GPU's calibrated efficiency, with {engine.policy.title}'s "
            "scheduler and CUDA graphs; upload a profile (POST /v1/profiles) to time its "
            "kernels",
        ),
    )


class ProfileLibrary:
    """Parsed profiles by id, the `PROFILES_KEPT` most recently used, and any other still in
    use (held by a timer or a resolved target): one parsed copy of a profile at most, however
    often it is asked for again after leaving the most recent (each copy of the silicon
    database's is 9-15 MiB; re-parsing one a timer still held doubled it). Thread-safe."""

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._session_factory = session_factory
        self._profiles: OrderedDict[str, Profile] = OrderedDict()
        self._in_use: weakref.WeakValueDictionary[str, Profile] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def cached(self, ref: ProfileRef) -> Profile | None:
        with self._lock:
            found = self._profiles.get(ref.id)
            if found is not None:
                self._profiles.move_to_end(ref.id)
                return found
            found = self._in_use.get(ref.id)
            if found is not None:
                self._keep(ref.id, found)
            return found

    def _keep(self, profile_id: str, profile: Profile) -> Profile:
        """`profile` among the most recent (under the lock); the one already there if any."""
        kept = self._profiles.setdefault(profile_id, profile)
        self._in_use.setdefault(profile_id, kept)
        while len(self._profiles) > PROFILES_KEPT:
            self._profiles.popitem(last=False)
        return kept

    def profile(self, ref: ProfileRef) -> Profile:
        found = self.cached(ref)
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
            return self._keep(ref.id, self._in_use.get(ref.id) or profile)

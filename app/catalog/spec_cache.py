"""Catalog entries as engine specs, cached per process for the estimate hot path.

An estimate names its GPU and model by id many times a second; reading two rows per request
would cost more than the estimate itself. Entries are cached for `ttl_s` and dropped the moment a
write through this process commits, so the next estimate here sees the write; a write through
another replica is seen within `ttl_s`.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import event, select
from sqlalchemy.orm import Session, sessionmaker

from app.catalog.lookup import find_entry, nearest, shown
from app.catalog.orm import GpuRow
from app.catalog.profile_rows import ProfileRow
from app.catalog.profiles import (
    EngineChoice,
    ProfileLibrary,
    ProfileRef,
    Relatives,
    bundled_refs,
    profile_refs,
)
from app.catalog.relatives import Datasheet, nearest_relatives
from app.catalog.repository import GpuRepository, ModelRepository
from app.catalog.service import changes, forget_changes_at_end, gpu_spec_of, model_spec_of
from app.engine.profiles import Profile
from app.engine.specs import GpuSpec, ModelSpec
from app.errors import InvalidInput, spec_errors

__all__ = ["CachedGpu", "CachedModel", "NotCached", "SpecCache"]


@dataclass(frozen=True, slots=True)
class CachedGpu:
    spec: GpuSpec
    version: int
    price_per_gpu_hour_usd: float | None
    efficiency_fields: dict[str, Any] | None
    profiles: tuple[ProfileRef, ...] = ()
    """Its measured profiles (uploaded, then bundled): what an `engine` chooses from."""
    expected_error_pct: dict[str, float] = field(default_factory=dict)
    """Spread of validation residuals by phase, where benchmark runs exist for this GPU: the RMS
    of `error_pct` over its stored runs under its current efficiency, as stored when a run, a
    calibration or the GPU last changed (`app.catalog.orm.GpuExpectedError`)."""
    relatives: tuple[str, ...] = ()
    """The other GPUs of its vendor and architecture that have profiles, nearest first: whose
    tables, scaled, time an engine it has no profile of."""
    spec_key: str = field(init=False, repr=False, compare=False)
    """The spec as a hashable key (its repr: a dict inside makes the spec itself unhashable),
    made once per fill, not once per request."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec_key", repr(self.spec))


@dataclass(frozen=True, slots=True)
class CachedModel:
    spec: ModelSpec
    version: int
    params_total: int
    params_active: int


E = TypeVar("E", CachedGpu, CachedModel)
D = TypeVar("D")
_DERIVED_KEPT = 256


class NotCached(Exception):
    """An entry `SpecCache.cached_only` forbade reading from the database: not cached, or
    expired or dropped since the caller checked."""


class SpecCache:
    """Safe to share between the event loop and the thread pool: a fill that read the database
    while a write was dropping entries is returned to its caller but not kept, so no committed
    write is hidden behind an entry read before it."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session_factory = session_factory
        self.profiles = ProfileLibrary(session_factory)
        """Parsed profiles, by id (they never change once written)."""
        self._ttl_s = ttl_s
        self._clock = clock
        self._gpus: dict[str, tuple[float, CachedGpu, int]] = {}
        self._models: dict[str, tuple[float, CachedModel, int]] = {}
        self._fills = itertools.count(1)  # each cache fill gets a new generation number
        self._drops = 0  # invalidations so far; a fill that saw it change is not kept
        self._lock = threading.Lock()
        self._local = threading.local()
        self._derived: dict[Hashable, Any] = {}

    def derived(self, key: Hashable, make: Callable[[], D]) -> D:
        """What `make()` derives from cached entries, kept under `key`, which must name the
        generations of the entries it used (`generations`): a write makes a new key, so a kept
        value never outlives its entries. At most `_DERIVED_KEPT` are kept; `make` may run
        twice for one key when two threads ask at once (it must be pure)."""
        found = self._derived.get(key)
        if found is None:
            found = make()
            if len(self._derived) >= _DERIVED_KEPT:
                self._derived.clear()
            self._derived[key] = found
        return found

    def peek_gpu(self, gpu_id: str) -> CachedGpu | None:
        """The GPU's entry while it is cached and fresh, else None; never reads the database."""
        return self._peek(self._gpus, gpu_id)

    def generations(self, *, model: object = None, gpu: object = None) -> tuple[int, int] | None:
        """Which fill of the cached `model` and `gpu` entries an answer would use (0 for an inline
        spec or none), or None when one is not cached. A write, a run upload or expiry makes a
        new fill, so answers keyed by generation never outlive the entries they came from."""
        now = self._clock()
        model_fill = _fill(self._models, model, now)
        gpu_fill = _fill(self._gpus, gpu, now)
        if model_fill is None or gpu_fill is None:
            return None
        return model_fill, gpu_fill

    def cached_only(self) -> _CachedOnly:
        """Within the block, on this thread, a miss raises `NotCached` instead of reading the
        database: how the event loop computes on cached entries without ever blocking."""
        return _CachedOnly(self._local)

    def gpu(self, gpu_id: str, field: str = "gpu") -> CachedGpu:
        """The GPU's spec; a 422 naming `field` when the catalog has no such id."""
        return self._get(self._gpus, gpu_id, lambda session: _load_gpu(session, gpu_id, field))

    def model(self, model_id: str, field: str = "model") -> CachedModel:
        """The model's spec; a 422 naming `field` when the catalog has no such id."""
        return self._get(
            self._models, model_id, lambda session: _load_model(session, model_id, field)
        )

    def relatives_of(self, gpu: CachedGpu) -> Relatives:
        """`gpu`'s relatives with their profiles, nearest first, read when called (what
        `choose_engine` takes)."""
        return lambda: ((r, self.gpu(r, "gpu").profiles) for r in gpu.relatives)

    def measured_on(self, choice: EngineChoice) -> CachedGpu | None:
        """The GPU whose tables time `choice` when they are a relative's; None for the GPU's
        own tables or the roofline."""
        return None if choice.measured_on is None else self.gpu(choice.measured_on, "gpu")

    def profile(self, ref: ProfileRef) -> Profile:
        """The parsed profile `ref` names (parsing or reading it first: never in `cached_only`)."""
        found = self.profiles.cached(ref)
        if found is not None:
            return found
        if getattr(self._local, "cached_only", False):
            raise NotCached(ref.id)
        return self.profiles.profile(ref)

    def watch(self, session_factory: sessionmaker[Session]) -> None:
        """Drop the entries a committed transaction of `session_factory` wrote (noted with
        `app.catalog.service.record_change`), the moment it commits; forget them when it
        rolls back."""

        def committed(session: Session) -> None:
            for kind, entry_id in changes(session):
                self.invalidate(kind, entry_id)

        event.listen(session_factory, "after_commit", committed)
        forget_changes_at_end(session_factory)

    def invalidate(self, kind: str, entry_id: str) -> None:
        """Drop the entry of `kind` (`gpu` or `model`) `entry_id`, under whatever name it was
        asked for (an alias, a repository): its next use reads it again."""
        table: dict[str, Any] = self._gpus if kind == "gpu" else self._models
        with self._lock:
            self._drops += 1
            for name in [n for n, (_, entry, _) in table.items() if entry.spec.id == entry_id]:
                del table[name]
            table.pop(entry_id, None)

    def clear(self) -> None:
        """Drop every entry (a notification listener that reconnects may have missed some)."""
        with self._lock:
            self._drops += 1
            self._gpus.clear()
            self._models.clear()

    # internals

    def _peek(self, table: dict[str, tuple[float, E, int]], entry_id: str) -> E | None:
        hit = table.get(entry_id)
        return hit[1] if hit is not None and hit[0] > self._clock() else None

    def _get(
        self,
        table: dict[str, tuple[float, E, int]],
        entry_id: str,
        load: Callable[[Session], E],
    ) -> E:
        cached = self._peek(table, entry_id)
        if cached is not None:
            return cached
        if getattr(self._local, "cached_only", False):
            raise NotCached(entry_id)
        drops = self._drops
        with self._session_factory() as session:
            entry = load(session)
        with self._lock:
            if self._drops == drops:  # no write dropped entries while this one was read
                table[entry_id] = (self._clock() + self._ttl_s, entry, next(self._fills))
        return entry


def _load_gpu(session: Session, gpu_id: str, field: str) -> CachedGpu:
    repository = GpuRepository(session)
    row = find_entry(repository, gpu_id)
    if row is None:
        hint = nearest(repository, gpu_id)
        raise InvalidInput.at(field, f"no GPU with id or device name {shown(gpu_id)}{hint}")
    with spec_errors(field):
        spec = gpu_spec_of(row)
    return CachedGpu(
        spec,
        row.version,
        row.price_per_gpu_hour_usd,
        row.efficiency,
        profile_refs(session, row.id),
        repository.expected_error(row.id),
        relatives(session, row),
    )


def relatives(session: Session, row: GpuRow) -> tuple[str, ...]:
    """`row`'s relatives among the catalog's GPUs with profiles (bundled or uploaded), nearest
    first (`app.catalog.relatives`)."""
    profiled = {ref.gpu for ref in bundled_refs()} | set(
        session.scalars(select(ProfileRow.gpu_id).distinct())
    )
    candidates = session.scalars(
        select(GpuRow).where(GpuRow.vendor == row.vendor, GpuRow.id.in_(profiled))
    )
    return nearest_relatives(datasheet(row), (datasheet(c) for c in candidates))


def datasheet(row: GpuRow) -> Datasheet:
    return Datasheet(
        row.id,
        row.vendor,
        row.architecture,
        row.peak_flops_per_s.get("bf16"),
        row.memory_bandwidth_bytes_per_s,
    )


def _load_model(session: Session, model_id: str, field: str) -> CachedModel:
    repository = ModelRepository(session)
    row = find_entry(repository, model_id)
    if row is None:
        hint = nearest(repository, model_id)
        raise InvalidInput.at(
            field, f"no model with id or Hugging Face repository {shown(model_id)}{hint}"
        )
    with spec_errors(field):
        spec = model_spec_of(row)
    return CachedModel(spec, row.version, row.params_total, row.params_active)


class _CachedOnly:
    """`SpecCache.cached_only`'s block (a class: every computed estimate enters one, and a
    generator-based context manager costs three times as much)."""

    __slots__ = ("_local",)

    def __init__(self, local: threading.local) -> None:
        self._local = local

    def __enter__(self) -> None:
        self._local.cached_only = True

    def __exit__(self, *_: object) -> None:
        self._local.cached_only = False


def _fill(table: dict[str, Any], ref: object, now: float) -> int | None:
    """`generations`' number of one entry: its fill while cached and fresh, 0 for an inline
    spec or none, None when not cached."""
    if not isinstance(ref, str):
        return 0
    hit = table.get(ref)
    if hit is None or hit[0] <= now:
        return None
    fill: int = hit[2]
    return fill

"""Catalog entries as engine specs, cached per process for the estimate hot path.

An estimate names its GPU and model by id many times a second; reading two rows per request
would cost more than the estimate itself. Entries are cached for `ttl_s` and dropped the moment a
write through this process commits, so the next estimate here sees the write; a write through
another replica is seen within `ttl_s`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.catalog.orm import GpuRow, ModelRow
from app.engine.specs import GpuSpec, ModelSpec, SpecError
from app.services.catalog import GPU_FIELDS, MODEL_FIELDS
from app.services.errors import InvalidInput
from app.services.specs import gpu_spec_from_fields, invalid_spec, model_spec_from_fields
from app.services.validation import expected_error_pct

__all__ = ["CachedGpu", "CachedModel", "SpecCache"]


@dataclass(frozen=True, slots=True)
class CachedGpu:
    spec: GpuSpec
    version: int
    price_per_gpu_hour_usd: float | None
    efficiency_fields: dict[str, Any] | None
    expected_error_pct: dict[str, float] = field(default_factory=dict)
    """Spread of validation residuals by phase, where benchmark runs exist for this GPU: the RMS
    of `error_pct` over its stored runs under its current efficiency
    (`app.services.validation.expected_error_pct`), computed when the entry is cached."""


@dataclass(frozen=True, slots=True)
class CachedModel:
    spec: ModelSpec
    version: int
    params_total: int
    params_active: int


class SpecCache:
    def __init__(
        self,
        session_factory: sessionmaker[Session],
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session_factory = session_factory
        self._ttl_s = ttl_s
        self._clock = clock
        self._gpus: dict[str, tuple[float, CachedGpu, int]] = {}
        self._models: dict[str, tuple[float, CachedModel, int]] = {}
        self._fills = itertools.count(1)  # each cache fill gets a new generation number

    def peek_gpu(self, gpu_id: str) -> CachedGpu | None:
        hit = self._gpus.get(gpu_id)
        return hit[1] if hit is not None and hit[0] > self._clock() else None

    def peek_model(self, model_id: str) -> CachedModel | None:
        hit = self._models.get(model_id)
        return hit[1] if hit is not None and hit[0] > self._clock() else None

    def generations(self, *, model: object = None, gpu: object = None) -> tuple[int, int] | None:
        """Which fill of the cached `model` and `gpu` entries an answer would use (0 for an inline
        spec or none), or None when one is not cached. A write, a run upload or expiry makes a
        new fill, so answers keyed by generation never outlive the entries they came from."""
        now = self._clock()
        numbers = []
        for ref, table in ((model, self._models), (gpu, self._gpus)):
            if not isinstance(ref, str):
                numbers.append(0)
                continue
            hit = table.get(ref)
            if hit is None or hit[0] <= now:
                return None
            numbers.append(hit[2])
        return numbers[0], numbers[1]

    def gpu(self, gpu_id: str, field: str = "gpu") -> CachedGpu:
        """The GPU's spec; a 422 naming `field` when the catalog has no such id."""
        cached = self.peek_gpu(gpu_id)
        if cached is not None:
            return cached
        with self._session_factory() as session:
            row = session.get(GpuRow, gpu_id)
            if row is None:
                raise InvalidInput.at(field, f"no GPU with id {gpu_id!r} in the catalog")
            fields = {name: getattr(row, name) for name in GPU_FIELDS} | {"id": row.id}
            try:
                spec = gpu_spec_from_fields(fields)
            except SpecError as error:
                raise invalid_spec(error, field) from None
            cached = CachedGpu(
                spec,
                row.version,
                row.price_per_gpu_hour_usd,
                row.efficiency,
                expected_error_pct(session, gpu_id, spec),
            )
        self._gpus[gpu_id] = (self._clock() + self._ttl_s, cached, next(self._fills))
        return cached

    def model(self, model_id: str, field: str = "model") -> CachedModel:
        """The model's spec; a 422 naming `field` when the catalog has no such id."""
        cached = self.peek_model(model_id)
        if cached is not None:
            return cached
        with self._session_factory() as session:
            row = session.get(ModelRow, model_id)
            if row is None:
                raise InvalidInput.at(field, f"no model with id {model_id!r} in the catalog")
            fields = {name: getattr(row, name) for name in MODEL_FIELDS} | {"id": row.id}
            try:
                spec = model_spec_from_fields(fields)
            except SpecError as error:
                raise invalid_spec(error, field) from None
            cached = CachedModel(spec, row.version, row.params_total, row.params_active)
        self._models[model_id] = (self._clock() + self._ttl_s, cached, next(self._fills))
        return cached

    def covers(self, *, model: object = None, gpu: object = None) -> bool:
        """True when every catalog id among `model` and `gpu` is cached and fresh (inline specs
        and None need nothing): the caller can then resolve without touching the database."""
        return self.generations(model=model, gpu=gpu) is not None

    def invalidate(self, kind: str, entry_id: str) -> None:
        table: dict[str, Any] = self._gpus if kind == "gpu" else self._models
        table.pop(entry_id, None)

    def clear(self) -> None:
        self._gpus.clear()
        self._models.clear()

"""Use cases of measured benchmark runs: store an upload, read, list, load the bundled ones; and
how a stored run becomes engine input (its deployment, its points' loads, the GPU it ran on).

Which GPU a run is compared against (`resolve_gpu`), in order:
1. its `gpu` catalog id, when the catalog has that GPU (its current efficiency: the calibrated
   values, or the bundled default);
2. the catalog GPU one of whose `aliases` is the run's `environment.device_name`;
3. a GPU spec built from the run's own microbenchmarks: `matmul_flops_per_s` as the peak of the
   run's dtype, `copy_bytes_per_s` as the memory bandwidth, at efficiency 1 with no overhead
   (they are measured peaks, not datasheet ones). Only at tp 1: the link is unknown.
A run with none of these cannot be validated (422 saying why).

Point to workload: a prefill point is one causal step over `prompt_tokens` new tokens per
sequence (`estimate_prefill(prompt_tokens=..., batch_size=..., causal=True)`); a decode point is
one step whose new token attends over `context_tokens` keys. The run document counts the new
token in `context_tokens`, and so does the engine's `estimate_decode(context_tokens=...)`
(`decode_load`: `context_tokens` query-key pairs and KV reads per sequence, one KV write), so the
value passes through unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy.orm import Session

from app.catalog.repository import GpuRepository
from app.catalog.service import LoadOutcome, gpu_spec_of, record_change
from app.db.pages import Page
from app.engine.dtypes import DType
from app.engine.estimates import estimate_decode, estimate_prefill
from app.engine.specs import (
    Deployment,
    Efficiency,
    GpuSpec,
    InterconnectSpec,
    ModelSpec,
    SpecError,
)
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.step_load import StepLoad
from app.engine.timing import Bound
from app.errors import InvalidInput, RunNotFound
from app.formats.run_document import Microbenchmarks, Phase, RunDocument, RunModelSpec
from app.runs.orm import BenchmarkPointRow, BenchmarkRunRow
from app.runs.repository import BenchmarkRunRepository

__all__ = [
    "MEASURED_EFFICIENCY",
    "GpuBasis",
    "GpuBasisKind",
    "document_field",
    "estimate_point",
    "get_run",
    "list_runs",
    "measured_points",
    "point_load",
    "resolve_gpu",
    "resolve_run_gpu",
    "run_cost_model",
    "run_deployment",
    "run_model",
    "store_run",
    "upsert_bundled_run",
]

# The microbenchmarks measure what this device reaches, so estimates take 100 % of them.
MEASURED_EFFICIENCY = Efficiency(
    source="the run's own microbenchmarks: measured matmul rate and copy bandwidth, taken at "
    "100 % with no per-step overhead"
)
# A device outside the catalog has no known memory size; timing never reads it, and a KV-cache
# warning is not what a validation is about. 1 TiB keeps those warnings quiet.
_UNKNOWN_MEMORY_BYTES = 2**40
_NO_LINK = InterconnectSpec(kind="unknown", bandwidth_bytes_per_s=1.0, latency_s=0.0)
_ACTIVATION_DTYPES = (DType.BF16, DType.FP16, DType.FP32)
# Token counts of a point, stored in 32-bit integer columns (`app.runs.orm.BenchmarkPointRow`);
# the schema itself bounds tp, batch sizes and repeats well below that.
_POINT_COUNTS = ("prompt_tokens", "context_tokens")
_MAX_STORED_COUNT = 2**31 - 1


class GpuBasisKind(StrEnum):
    CATALOG = "catalog"  # a catalog GPU at its current efficiency
    MICROBENCHMARKS = "microbenchmarks"  # the run's own measured peaks at 100 %


@dataclass(frozen=True, slots=True)
class GpuBasis:
    """The GPU a run is compared against, and why that one."""

    kind: GpuBasisKind
    spec: GpuSpec
    gpu_id: str | None
    gpu_version: int | None
    calibration_id: str | None
    note: str


# run -> engine


def run_model(run: BenchmarkRunRow) -> ModelSpec:
    return RunModelSpec.model_validate(run.document["model"]).to_model_spec()


def run_deployment(dtype: DType | str, tp: int) -> Deployment:
    """Weights, KV cache and activations all in the run's dtype (the job runs one format);
    a quantised format computes with bf16 activations."""
    dtype = DType(dtype)
    activation = dtype if dtype in _ACTIVATION_DTYPES else DType.BF16
    return Deployment(tp=tp, weight_dtype=dtype, kv_dtype=dtype, activation_dtype=activation)


def run_cost_model(run: BenchmarkRunRow, gpu: GpuSpec, efficiency: Efficiency) -> StepCostModel:
    """Raises `SpecError` when the run cannot be timed on `gpu` (a format it lacks, a tp that
    does not split the heads)."""
    return StepCostModel(run_model(run), gpu, run_deployment(run.dtype, run.tp), efficiency)


def point_load(point: BenchmarkPointRow) -> StepLoad:
    """The engine's load of one step of the point (see the module docstring)."""
    if point.phase == Phase.PREFILL:
        return prefill_load(point.prompt_tokens or 0, batch_size=point.batch_size, causal=True)
    return decode_load(point.batch_size, point.context_tokens or 0)


def document_field(error: SpecError, position: int | None = None) -> str:
    """The run-document field behind an engine `SpecError` about the run, or about its point at
    `position`."""
    if position is not None and error.field in ("prompt_tokens", "context_tokens", "batch_size"):
        return f"points[{position}].{error.field}"
    if error.field in ("weight_dtype", "kv_dtype", "gpu"):
        return "dtype"
    return error.field


def _microbenchmark_gpu(device_name: str, dtype: DType, rates: Microbenchmarks) -> GpuSpec:
    peaks = {dtype: rates.matmul_flops_per_s}
    activation = run_deployment(dtype, 1).activation_dtype
    peaks.setdefault(activation, rates.matmul_flops_per_s)
    return GpuSpec(
        id=f"measured:{device_name}",
        memory_bytes=_UNKNOWN_MEMORY_BYTES,
        memory_bandwidth_bytes_per_s=rates.copy_bytes_per_s,
        peak_flops_per_s=peaks,
        interconnect=_NO_LINK,
        efficiency=MEASURED_EFFICIENCY,
    )


def _catalog_basis(session: Session, gpu_id: str, note: str) -> GpuBasis | None:
    row = GpuRepository(session).get(gpu_id)
    if row is None:
        return None
    spec = gpu_spec_of(row)
    calibration_id = (row.efficiency or {}).get("calibration_id")
    return GpuBasis(GpuBasisKind.CATALOG, spec, row.id, row.version, calibration_id, note)


def resolve_gpu(
    session: Session,
    *,
    gpu_id: str | None,
    device_name: str,
    dtype: DType | str,
    tp: int,
    microbenchmarks: Mapping[str, Any] | None,
) -> GpuBasis:
    """The GPU a run is compared against (module docstring); `InvalidInput` when none."""
    if gpu_id is not None:
        basis = _catalog_basis(session, gpu_id, f"catalog GPU {gpu_id!r}, named by the run")
        if basis is not None:
            return basis
    owner = GpuRepository(session).alias_owners().get(device_name)
    if owner is not None:
        basis = _catalog_basis(
            session, owner, f"catalog GPU {owner!r}, whose alias is the device {device_name!r}"
        )
        if basis is not None:
            return basis
    missing = (
        f"GPU {gpu_id!r} is not in the catalog"
        if gpu_id is not None
        else "the run names no catalog GPU"
    )
    if microbenchmarks is None:
        raise InvalidInput.at(
            "microbenchmarks",
            f"{missing}, no catalog GPU has the alias {device_name!r}, and the run has no "
            "microbenchmarks to stand in for its peaks: nothing to compare it against",
        )
    if tp != 1:
        raise InvalidInput.at(
            "tp",
            f"{missing}: a run on a device outside the catalog is compared against its own "
            f"microbenchmarks, which say nothing about its link; tp {tp} cannot be estimated",
        )
    rates = Microbenchmarks.model_validate(microbenchmarks)
    spec = _microbenchmark_gpu(device_name, DType(dtype), rates)
    note = f"{missing}: the run's microbenchmarks stand in for datasheet peaks"
    return GpuBasis(GpuBasisKind.MICROBENCHMARKS, spec, None, None, None, note)


def resolve_run_gpu(session: Session, run: BenchmarkRunRow) -> GpuBasis:
    return resolve_gpu(
        session,
        gpu_id=run.gpu_id,
        device_name=run.device_name,
        dtype=run.dtype,
        tp=run.tp,
        microbenchmarks=run.document.get("microbenchmarks"),
    )


def estimate_point(cost: StepCostModel, point: BenchmarkPointRow) -> tuple[float, Bound]:
    """The engine's estimate for exactly the point's workload: (ms, bound)."""
    if point.phase == Phase.PREFILL:
        prefill = estimate_prefill(
            cost, prompt_tokens=point.prompt_tokens or 0, batch_size=point.batch_size, causal=True
        )
        return prefill.ttft_ms, prefill.bound
    decode = estimate_decode(
        cost, batch_size=point.batch_size, context_tokens=point.context_tokens or 0
    )
    return decode.tpot_ms, decode.bound


# use cases


def _new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


def _point_rows(document: RunDocument) -> list[BenchmarkPointRow]:
    return [
        BenchmarkPointRow(
            position=position,
            phase=point.phase.value,
            prompt_tokens=point.prompt_tokens,
            batch_size=point.batch_size,
            context_tokens=point.context_tokens,
            median_ms=point.median_ms,
            p10_ms=point.p10_ms,
            p90_ms=point.p90_ms,
            repeats=point.repeats,
            skipped_reason=None if point.skipped is None else point.skipped.reason,
        )
        for position, point in enumerate(document.points)
    ]


def _run_columns(run_id: str, document: RunDocument) -> dict[str, Any]:
    return {
        "gpu_id": document.gpu,
        "model_id": document.model.id,
        "device_name": document.environment.device_name,
        "device_kind": document.environment.device_kind.value,
        "dtype": document.dtype.value,
        "tp": document.tp,
        "provenance_kind": document.provenance.kind.value,
        "started_at": document.created_at,
        "document": document.model_dump(mode="json") | {"id": run_id},
    }


def _rows(run_id: str, document: RunDocument) -> BenchmarkRunRow:
    row = BenchmarkRunRow(id=run_id, **_run_columns(run_id, document))
    row.points = _point_rows(document)
    return row


def _check_points(session: Session, row: BenchmarkRunRow) -> GpuBasis | None:
    """Every measured point must be one the engine can time under the run's spec (on the GPU it
    resolves to, or, where none resolves yet, on a stand-in with the run's formats)."""
    try:
        basis: GpuBasis | None = resolve_run_gpu(session, row)
    except InvalidInput:
        basis = None  # stored anyway: a later catalog GPU (or alias) makes it comparable
    gpu = (
        basis.spec
        if basis is not None
        else _microbenchmark_gpu(
            row.device_name,
            DType(row.dtype),
            Microbenchmarks(
                matmul_flops_per_s=1.0,
                matmul_shape=(1, 1, 1),
                copy_bytes_per_s=1.0,
                copy_bytes=1,
            ),
        )
    )
    try:
        cost = run_cost_model(row, gpu, gpu.efficiency)
    except SpecError as error:
        raise InvalidInput.at(document_field(error), error.message) from None
    for point in row.points:
        if point.median_ms is None:
            continue
        try:
            estimate_point(cost, point)
        except SpecError as error:
            raise InvalidInput.at(document_field(error, point.position), error.message) from None
    return basis


def _check_storable(document: RunDocument) -> None:
    """What the run's columns store must fit them: text within its length and free of NUL
    (PostgreSQL refuses both), token counts within 32 bits."""
    texts = {
        "gpu": (document.gpu, BenchmarkRunRow.gpu_id),
        "model.id": (document.model.id, BenchmarkRunRow.model_id),
        "environment.device_name": (
            document.environment.device_name,
            BenchmarkRunRow.device_name,
        ),
    }
    for field, (text, column) in texts.items():
        length = column.type.length
        if text is not None and length is not None and len(text) > length:
            raise InvalidInput.at(field, f"at most {length} characters")
        if text is not None and "\x00" in text:
            raise InvalidInput.at(field, "must not contain the NUL character (U+0000)")
    for position, point in enumerate(document.points):
        for name in _POINT_COUNTS:
            value = getattr(point, name)
            if value is not None and value > _MAX_STORED_COUNT:
                raise InvalidInput.at(
                    f"points[{position}].{name}", f"must be at most {_MAX_STORED_COUNT}"
                )


def store_run(session: Session, document: RunDocument) -> BenchmarkRunRow:
    """Store an uploaded run under a new id; 422 when it carries an id or a point the engine
    cannot time under the run's own spec, or cannot store."""
    if document.id is not None:
        raise InvalidInput.at("id", "assigned by the service; upload the run with id null")
    _check_storable(document)
    row = _rows(_new_run_id(), document)
    basis = _check_points(session, row)
    BenchmarkRunRepository(session).add(row)
    _drop_cached_gpus(session, row, basis)
    return row


def _drop_cached_gpus(session: Session, row: BenchmarkRunRow, basis: GpuBasis | None) -> None:
    """A new run changes the expected error of the GPU it belongs to."""
    for gpu_id in {row.gpu_id, basis.gpu_id if basis is not None else None} - {None}:
        record_change(session, "gpu", str(gpu_id))


def get_run(session: Session, run_id: str, *, with_points: bool = False) -> BenchmarkRunRow:
    row = BenchmarkRunRepository(session).get(run_id, with_points=with_points)
    if row is None:
        raise RunNotFound(run_id)
    return row


def list_runs(
    session: Session, *, gpu: str | None, model: str | None, limit: int, offset: int
) -> Page[BenchmarkRunRow]:
    """Runs newest first, optionally only those naming catalog GPU `gpu` or model `model`."""
    items, total = BenchmarkRunRepository(session).page(
        gpu_id=gpu, model_id=model, limit=limit, offset=offset
    )
    return Page(items=items, total=total, limit=limit, offset=offset)


def upsert_bundled_run(
    session: Session, run_id: str, document: RunDocument, digest: str
) -> LoadOutcome:
    """Bring one bundled reference run in under its stable id; unchanged when its digest is."""
    repository = BenchmarkRunRepository(session)
    existing = repository.get(run_id, with_points=True)
    if existing is not None and existing.bundled_digest == digest:
        return LoadOutcome.UNCHANGED
    if existing is None:
        fresh = _rows(run_id, document)
        fresh.origin, fresh.bundled_digest = "bundled", digest
        repository.add(fresh)
        outcome = LoadOutcome.INSERTED
    else:
        for name, value in _run_columns(run_id, document).items():
            setattr(existing, name, value)
        existing.points.clear()
        repository.flush()  # the old points go before new ones take their positions
        existing.points.extend(_point_rows(document))
        existing.bundled_digest = digest
        repository.flush()
        outcome = LoadOutcome.UPDATED
    if document.gpu is not None:
        record_change(session, "gpu", document.gpu)
    return outcome


def measured_points(run: BenchmarkRunRow) -> Sequence[BenchmarkPointRow]:
    """The points that carry times, in document order."""
    return [p for p in run.points if p.median_ms is not None]

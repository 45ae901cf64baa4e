"""Runs the planned points on a workload and assembles the run document.

Torch-free: the runner only sees the `Workload` protocol, so it is tested with the real PyTorch
workload and with fakes alike. It survives what a long GPU run meets:

- an out-of-memory point (`torch.cuda.OutOfMemoryError`, or a `RuntimeError`/`MemoryError`
  saying out of memory, or the workload's prediction that it cannot fit, raised before it
  allocates: `app.bench.memory.PredictedOutOfMemory`) is recorded as skipped with the reason;
  memory is released and the run goes on (weights that do not fit skip every point, with the
  reason);
- Ctrl-C (`KeyboardInterrupt`) ends the run: the points measured so far are kept, the rest are
  recorded as skipped with reason "interrupted", and the outcome says so;
- any other error once the microbenchmarks are measured ends the run too, loudly (traceback on
  stderr, `BenchOutcome.failure`), but keeps what was measured: the point that broke and the
  rest are recorded as skipped with reason "not measured: the run broke at ...". A GPU lease
  is short; one broken point must not cost the points measured before it.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from app import __version__
from app.bench.config import BenchConfig, PointPlan, plan_points
from app.bench.memory import interrupted_during, is_out_of_memory, out_of_memory_error
from app.bench.timing import TimingStats
from app.formats.run_document import (
    INTERRUPTED_REASON,
    SCHEMA_VERSION,
    AttentionBackend,
    Environment,
    Microbenchmarks,
    Provenance,
    ProvenanceKind,
    RunDocument,
    RunPoint,
    Skip,
)

__all__ = ["BenchOutcome", "Workload", "is_out_of_memory", "run_benchmark"]

_REASON_CHARS = 300


class Workload(Protocol):
    """What the runner needs from a device: see `app.bench.workload.TorchWorkload`."""

    @property
    def attention_backend(self) -> AttentionBackend | None:
        """The attention kernel the points run with; null before `prepare`."""
        ...

    def microbenchmarks(self) -> Microbenchmarks: ...

    def prepare(self) -> None:
        """Build the model (allocate weights); called once, after the microbenchmarks."""
        ...

    def measure(self, point: PointPlan) -> TimingStats: ...

    def release(self) -> None:
        """Give cached memory back to the device; called after every point."""
        ...

    def notes(self) -> tuple[str, ...]:
        """How the measurement went and departs from the plan, for the provenance (how points
        were timed, a point that had to be timed another way); called once, at the end."""
        ...


@dataclass(frozen=True, slots=True)
class BenchOutcome:
    document: RunDocument
    interrupted: bool
    failure: str | None = None
    """Where and how the run broke (`prefill n=512 B=1: RuntimeError: ...`); None when it did
    not."""


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > _REASON_CHARS:
        first = first[: _REASON_CHARS - 1] + "…"
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _reason(error: BaseException) -> str:
    lines = str(out_of_memory_error(error) or error).strip().splitlines()
    first = lines[0] if lines else type(error).__name__
    if len(first) > _REASON_CHARS:
        first = first[: _REASON_CHARS - 1] + "…"
    return f"out of memory: {first}"


def _point(plan: PointPlan, stats: TimingStats | None, skip_reason: str | None) -> RunPoint:
    return RunPoint(
        phase=plan.phase,
        prompt_tokens=plan.prompt_tokens,
        batch_size=plan.batch_size,
        context_tokens=plan.context_tokens,
        median_ms=None if stats is None else stats.median_ms,
        p10_ms=None if stats is None else stats.p10_ms,
        p90_ms=None if stats is None else stats.p90_ms,
        repeats=0 if stats is None else stats.repeats,
        skipped=None if skip_reason is None else Skip(reason=skip_reason),
    )


def _measure_point(workload: Workload, plan: PointPlan) -> RunPoint:
    skip_reason: str | None = None
    stats: TimingStats | None = None
    try:
        stats = workload.measure(plan)
    except (RuntimeError, MemoryError) as error:
        if interrupted_during(error):
            raise KeyboardInterrupt from error
        if not is_out_of_memory(error):
            raise
        skip_reason = _reason(error)
    # Out here the exception and its traceback, which pin the failed point's tensors, are gone.
    workload.release()
    return _point(plan, stats, skip_reason)


def _prepare(workload: Workload) -> str | None:
    """Build the model; the skip reason for every point when its weights do not fit."""
    reason: str | None = None
    try:
        workload.prepare()
    except (RuntimeError, MemoryError) as error:
        if not is_out_of_memory(error):
            raise
        reason = f"{_reason(error)} (while allocating the model's weights)"
    if reason is not None:
        workload.release()
    return reason


def _provenance(config: BenchConfig, notes: tuple[str, ...]) -> Provenance:
    note = "; ".join(
        (
            f"random weights and inputs (seed {config.seed})",
            f"{config.point_warmup} warm-up and {config.repeats} timed runs per point",
            "prefill runs the LM head on the last position only and writes no KV cache",
            *notes,
        )
    )
    return Provenance(
        kind=ProvenanceKind.MEASURED_BY_JOB,
        source=f"ridgeline-bench {__version__} (app.bench)",
        note=note,
    )


def run_benchmark(
    config: BenchConfig,
    workload: Workload,
    *,
    environment: Environment,
    gpu: str | None = None,
    notes: tuple[str, ...] = (),
    progress: bool | None = None,
) -> BenchOutcome:
    """Measure every planned point of `config` on `workload` and build the run document.

    `gpu` is the GPU's catalog id (or null); `notes` say how the spec that ran departs from the
    catalog's (fewer layers, a longer context), for the provenance. `progress`: show a tqdm
    bar on stderr (None: only when stderr is a terminal).
    """
    created_at = datetime.now(UTC)
    plans = plan_points(config)
    points: list[RunPoint] = []
    microbenchmarks: Microbenchmarks | None = None
    interrupted = False
    failure: str | None = None
    stage = "microbenchmarks"
    from tqdm import tqdm  # noqa: PLC0415 - the bench extra's; `--help` works without it

    bar = tqdm(
        total=len(plans),
        file=sys.stderr,
        unit="point",
        disable=None if progress is None else not progress,
    )
    try:
        bar.set_description(stage)
        microbenchmarks = workload.microbenchmarks()
        stage = "building the model"
        bar.set_description(stage)
        build_failure = _prepare(workload)
        for plan in plans:
            stage = plan.label
            bar.set_description(stage)
            if build_failure is None:
                points.append(_measure_point(workload, plan))
            else:
                points.append(_point(plan, None, build_failure))
            bar.update()
    except KeyboardInterrupt:
        interrupted = True
    except Exception as error:
        if microbenchmarks is None:
            raise  # nothing measured yet: nothing to keep
        traceback.print_exc(file=sys.stderr)
        failure = f"{stage}: {_first_line(error)}"
    finally:
        bar.close()
    rest = INTERRUPTED_REASON if failure is None else f"not measured: the run broke at {failure}"
    points += [_point(plan, None, rest) for plan in plans[len(points) :]]
    notes = (*notes, *workload.notes())
    document = RunDocument(
        schema_version=SCHEMA_VERSION,
        id=None,
        created_at=created_at,
        environment=environment,
        gpu=gpu,
        model=config.model,
        dtype=config.dtype,
        tp=1,
        attention_backend=workload.attention_backend,
        provenance=_provenance(config, notes),
        points=points,
        microbenchmarks=microbenchmarks,
    )
    return BenchOutcome(document=document, interrupted=interrupted, failure=failure)

"""Serving runs: a benchmark tool's result file against the simulator at the same load.

Each measurement is replayed on one simulated replica: a closed loop of the run's users (no
think time) for a closed-loop run, else Poisson arrivals at the rate it offered (`replay_rate`:
for an `inf` rate, the rate it completed requests); prompts and outputs at the file's mean
lengths.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.catalog.orm import GpuRow
from app.catalog.spec_cache import SpecCache
from app.errors import InvalidInput, NotFound
from app.formats.serving_results import (
    LoadMode,
    ServingMeasurement,
    ServingResultError,
    ServingTool,
    parse_serving_result,
)
from app.serving_runs.orm import ServingRunRow
from app.simulations.service import (
    KEYED_BUDGET,
    PercentilesQuery,
    PoissonQuery,
    SimulationJob,
    SimulationQuery,
    prepare_simulation,
    run_simulation_job,
)
from app.targets.service import TargetQuery

__all__ = [
    "ServingRunNotFound",
    "ServingUpload",
    "SimulationJob",
    "compare",
    "get_serving_run",
    "list_serving_runs",
    "measurements_of",
    "prepare_replays",
    "store_serving_run",
]

REPLAY_REQUESTS = (200, 2000)
"""Requests per replay: the run's own count, within these bounds."""
CLOSED_LOOP_NOTE = (
    "closed loop replayed as a closed loop of the run's concurrency (no think time); "
    "`replayed_requests_per_s` is the run's own throughput, for reference"
)


class ServingRunNotFound(NotFound):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"No serving run with id {run_id!r}.")


@dataclass(frozen=True, slots=True)
class ServingUpload:
    tool: ServingTool
    target: TargetQuery
    scheduler: Mapping[str, Any]
    """The scheduler settings of the run, by `SchedulerConfig` field (the rest: the engine's)."""
    result: str
    """The file's text."""


def measurements_of(upload: ServingUpload) -> list[ServingMeasurement]:
    try:
        return parse_serving_result(upload.tool, upload.result)
    except ServingResultError as error:
        raise InvalidInput.at(f"result.{error.field}", error.message) from None


def replay_rate(measurement: ServingMeasurement) -> float:
    rate = measurement.request_rate
    if measurement.mode is LoadMode.RATE and rate is not None and math.isfinite(rate) and rate > 0:
        return rate
    if measurement.request_throughput <= 0:
        raise InvalidInput.at("result", "no request rate or throughput to replay the run at")
    return measurement.request_throughput


def prepare_replays(
    cache: SpecCache, upload: ServingUpload, measurements: list[ServingMeasurement]
) -> list[SimulationJob]:
    jobs = []
    for measurement in measurements:
        count = min(max(measurement.completed, REPLAY_REQUESTS[0]), REPLAY_REQUESTS[1])
        prompt, output = (
            round(measurement.mean_prompt_tokens),
            round(measurement.mean_output_tokens),
        )
        constant = (
            PercentilesQuery(prompt, prompt, prompt),
            PercentilesQuery(output, output, output),
        )
        closed = measurement.mode is LoadMode.CONCURRENCY and measurement.concurrency
        load = (
            PoissonQuery(None, count, *constant, concurrency=measurement.concurrency)
            if closed
            else PoissonQuery(replay_rate(measurement), count, *constant)
        )
        query = SimulationQuery(
            target=upload.target,
            scheduler=upload.scheduler,
            workload=load,
            trace_rows=None,
            seed=0,
            ttft_slo_ms=None,
            tpot_slo_ms=None,
            gpu_memory_utilization=0.9,
            block_tokens=16,
            kv_capacity_override_tokens=None,
        )
        jobs.append(prepare_simulation(cache, query, KEYED_BUDGET))
    return jobs


def _error(estimated: float | None, measured: float | None) -> float | None:
    if estimated is None or measured is None or measured <= 0:
        return None
    return round(100.0 * (estimated / measured - 1.0), 2)


def compare(measurements: list[ServingMeasurement], jobs: list[SimulationJob]) -> dict[str, Any]:
    """Simulate each replay (in a heavy-work process) and compare: signed error in percent,
    negative where the simulator is faster than the run."""
    comparisons = []
    basis: dict[str, str] = {}
    for measurement, job in zip(measurements, jobs, strict=True):
        run = run_simulation_job(job)
        basis = dict(run.resolved.basis)
        simulated = {
            "ttft_ms_p50": run.result.ttft_ms.p50,
            "ttft_ms_p99": run.result.ttft_ms.p99,
            "tpot_ms_p50": run.result.tpot_ms.p50,
            "tpot_ms_p99": run.result.tpot_ms.p99,
            "e2e_ms_mean": run.result.e2e_ms.mean,
            "requests_per_s": run.result.requests_per_s,
        }
        measured = {
            "ttft_ms_p50": measurement.ttft_ms.p50,
            "ttft_ms_p99": measurement.ttft_ms.p99,
            "tpot_ms_p50": measurement.tpot_ms.p50,
            "tpot_ms_p99": measurement.tpot_ms.p99,
            "e2e_ms_mean": measurement.e2e_ms.mean,
            "requests_per_s": measurement.request_throughput,
        }
        rate = measurement.request_rate
        comparisons.append(
            {
                "mode": measurement.mode.value,
                "request_rate": rate if rate is None or math.isfinite(rate) else "inf",
                "concurrency": measurement.concurrency,
                "mean_prompt_tokens": measurement.mean_prompt_tokens,
                "mean_output_tokens": measurement.mean_output_tokens,
                "replayed_requests_per_s": replay_rate(measurement),
                "measured": measured,
                "simulated": simulated,
                "error_pct": {k: _error(simulated[k], measured[k]) for k in simulated},
                "saturated": run.result.saturated,
                "note": CLOSED_LOOP_NOTE if measurement.mode is LoadMode.CONCURRENCY else None,
            }
        )
    return {"basis": basis, "comparisons": comparisons}


def store_serving_run(
    session: Session,
    upload: ServingUpload,
    *,
    document: dict[str, Any],
    gpu_id: str,
    model_id: str,
    validation: dict[str, Any],
) -> ServingRunRow:
    if session.get(GpuRow, gpu_id) is None:
        raise InvalidInput.at("gpu", f"no GPU with id {gpu_id!r} in the catalog")
    row = ServingRunRow(
        id=uuid.uuid4().hex,
        gpu_id=gpu_id,
        model_id=model_id,
        tool=upload.tool.value,
        request=document,
        validation=validation,
    )
    session.add(row)
    session.flush()
    return row


def get_serving_run(session: Session, run_id: str) -> ServingRunRow:
    row = session.get(ServingRunRow, run_id)
    if row is None:
        raise ServingRunNotFound(run_id)
    return row


def list_serving_runs(
    session: Session, gpu: str | None, limit: int, offset: int
) -> list[ServingRunRow]:
    query = select(ServingRunRow).order_by(ServingRunRow.created_at.desc(), ServingRunRow.id)
    if gpu is not None:
        query = query.where(ServingRunRow.gpu_id == gpu)
    return list(session.scalars(query.limit(limit).offset(offset)))

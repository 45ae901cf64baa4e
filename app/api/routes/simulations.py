"""`POST /v1/simulations`: one replica serving a workload, simulated. Open: it stores nothing."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import SpecCacheDep
from app.api.schemas.common import problem_responses
from app.api.schemas.simulations import SimulationRequest, SimulationResponse
from app.services.simulations import MAX_SIMULATED_STEPS, run_simulation

router = APIRouter(prefix="/v1", tags=["simulations"])


@router.post(
    "/simulations",
    response_model=SimulationResponse,
    summary="Simulate one replica serving a workload or a trace",
    description=(
        "A discrete-event simulation of continuous batching with chunked prefill, KV-limited "
        "admission and preemption (vLLM's scheduler), each step timed by the performance model. "
        "Deterministic: the same request gives the same answer. Up to 200,000 requests and "
        f"{MAX_SIMULATED_STEPS:,} forward steps (a workload that provably needs more is refused "
        "up front); about a second per 100,000 requests at moderate load."
    ),
    responses=problem_responses(400, 413, 415, 422),
)
def simulate_route(body: SimulationRequest, cache: SpecCacheDep) -> SimulationResponse:
    run = run_simulation(cache, body.target_kwargs(), **body.simulation_kwargs())
    return SimulationResponse.of(run)

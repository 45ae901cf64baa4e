"""Capacity planning: which GPUs, how many, and what they cost, for a traffic and its latency
SLOs. `plan_capacity` is the entry point; see `app.engine.planning.planner` for the method."""

from app.engine.planning.inputs import (
    DEFAULT_CONFIRM_REQUESTS,
    DEFAULT_DTYPE_PAIRS,
    DEFAULT_MAX_SIMULATED_STEPS,
    DEFAULT_PROBE_REQUESTS,
    DEFAULT_TP_CANDIDATES,
    MAX_CANDIDATES,
    GpuOffer,
    PlanOptions,
    Slo,
    TimerFactory,
    Traffic,
    TtftBucket,
    step_cost_timer,
)
from app.engine.planning.planner import plan_capacity
from app.engine.planning.results import (
    CandidatePlan,
    CandidateStatus,
    CapacityPlan,
    DisaggregatedPlan,
    PredictedLatency,
)

__all__ = [
    "DEFAULT_CONFIRM_REQUESTS",
    "DEFAULT_DTYPE_PAIRS",
    "DEFAULT_MAX_SIMULATED_STEPS",
    "DEFAULT_PROBE_REQUESTS",
    "DEFAULT_TP_CANDIDATES",
    "MAX_CANDIDATES",
    "CandidatePlan",
    "CandidateStatus",
    "CapacityPlan",
    "DisaggregatedPlan",
    "GpuOffer",
    "PlanOptions",
    "PredictedLatency",
    "Slo",
    "TimerFactory",
    "Traffic",
    "TtftBucket",
    "plan_capacity",
    "step_cost_timer",
]

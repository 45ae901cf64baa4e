"""A plan request as the planning service takes it: typed, frozen, built by the API schema."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.engine.dtypes import DType
from app.engine.planning import (
    DEFAULT_CONFIRM_REQUESTS,
    DEFAULT_PROBE_REQUESTS,
    DEFAULT_TP_CANDIDATES,
)
from app.engine.serving import ServingEngine
from app.engine.simulation import KvLink
from app.engine.specs import ModelSpec
from app.simulations.service import LengthsQuery
from app.targets.service import EfficiencyMode

__all__ = ["MAX_TRAFFIC_REQUESTS_PER_S", "PlanQuery"]

MAX_TRAFFIC_REQUESTS_PER_S = 1e7
"""Most requests per second a plan is asked to carry (all replicas together)."""


@dataclass(frozen=True, slots=True)
class PlanQuery:
    """A plan request, as the service needs it (the API schema builds it)."""

    model: str | ModelSpec
    ttft_p99_ms: float
    tpot_p99_ms: float
    requests_per_s: float | None = None
    prompt_tokens: LengthsQuery | None = None
    output_tokens: LengthsQuery | None = None
    trace_rows: Sequence[tuple[float, int, int]] | None = None
    ttft_buckets: Sequence[tuple[int, float]] = ()
    gpus: Sequence[str] | None = None
    price_overrides: Mapping[str, float] = field(default_factory=dict)
    tp_candidates: Sequence[int] = DEFAULT_TP_CANDIDATES
    weight_dtypes: tuple[DType, ...] | None = None
    """None: the model's own format only."""
    kv_dtypes: tuple[DType, ...] | None = None
    max_num_seqs: Sequence[int] | None = None
    """None: each GPU's engine's batch caps (`EnginePolicy.plan_schedulers`)."""
    chunk_tokens: Sequence[int] | None = None
    """None: each GPU's engine's token budgets."""
    headroom: float = 0.2
    gpus_per_node: int = 8
    efficiency: EfficiencyMode = EfficiencyMode.CALIBRATED
    gpu_memory_utilization: float = 0.9
    probe_requests: int = DEFAULT_PROBE_REQUESTS
    confirm_requests: int = DEFAULT_CONFIRM_REQUESTS
    seed: int = 0
    max_plans: int = 3
    exhaustive: bool = False
    disaggregated: bool = False
    kv_link: KvLink | None = None
    """The prefill-to-decode KV link of a disaggregated plan (None: the engine's default)."""
    layouts: bool = True
    engine: ServingEngine | None = None
    """The serving engine deployed on each GPU (see `TargetQuery.engine`)."""
    confidence: float | None = None
    """Size each planned candidate also so its SLOs hold at this confidence, and at 50 and
    90 % (`CandidatePlan.by_confidence`); None: as timed only."""

"""The planner reports candidates done of candidates to a `PlanProgress`, and stops between
candidates when it raises `PlanCancelled`."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from app.engine.dtypes import DType
from app.engine.planning import GpuOffer, PlanOptions, Slo, Traffic, plan_capacity
from app.engine.planning.progress import PlanCancelled
from app.engine.workload import PercentileLengths
from tests.engine.test_counting import A100, H100, LLAMA3_8B

LENGTHS_2K = PercentileLengths(2048, 2048, 2048, max_tokens=8192)
LENGTHS_256 = PercentileLengths(256, 256, 256, max_tokens=8192)
# 2 GPUs x tp {1, 2, 3} x bf16, one scheduler setting: 6 candidates, the tp-3 pair refused by
# screening (32 heads do not split over 3 GPUs), so 2 of 6 are done before any search.
OFFERS = (GpuOffer(H100, 3.0), GpuOffer(A100, 2.0))
OPTIONS = PlanOptions(
    tp_candidates=(1, 2, 3),
    dtype_pairs=((DType.BF16, DType.BF16),),
    chunk_tokens_candidates=(2048,),
    probe_requests=500,
    exhaustive=True,
    max_plans=6,
)
TRAFFIC = Traffic(requests_per_s=5.0, prompt_tokens=LENGTHS_2K, output_tokens=LENGTHS_256)
SLO = Slo(ttft_p99_ms=1000, tpot_p99_ms=50)


@dataclass
class Recorder:
    """Every update heard; raises `PlanCancelled` at update number `stop_at` (1-based)."""

    stop_at: int | None = None
    heard: list[tuple[int, int]] = field(default_factory=list)

    def update(self, done: int, total: int) -> None:
        self.heard.append((done, total))
        if self.stop_at is not None and len(self.heard) >= self.stop_at:
            raise PlanCancelled("stop")


def test_progress_counts_candidates_done_of_candidates() -> None:
    recorder = Recorder()
    plan = plan_capacity(LLAMA3_8B, OFFERS, TRAFFIC, SLO, OPTIONS, progress=recorder)
    assert len(plan.candidates) == 6
    infeasible_at_screening = sum(1 for c in plan.candidates if c.tp == 3)
    assert infeasible_at_screening == 2
    # Before each of the 4 searches (2, 3, 4, 5 done of 6), and once after the last.
    assert recorder.heard == [(2, 6), (3, 6), (4, 6), (5, 6), (6, 6)]
    # The same plan without anyone listening.
    assert plan_capacity(LLAMA3_8B, OFFERS, TRAFFIC, SLO, OPTIONS) == plan


def test_a_progress_that_raises_stops_the_plan_between_candidates() -> None:
    recorder = Recorder(stop_at=2)
    with pytest.raises(PlanCancelled):
        plan_capacity(LLAMA3_8B, OFFERS, TRAFFIC, SLO, OPTIONS, progress=recorder)
    assert recorder.heard == [(2, 6), (3, 6)]  # stopped before the second search

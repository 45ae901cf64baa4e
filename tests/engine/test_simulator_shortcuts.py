"""The event loop's shortcuts (a lone waiting request admitted inline; a group of decode-only
steps following another at a finish without a pass of the loop) against the loop without them
(`shortcuts=False`): the same run, number for number, with no tolerance (the shortcuts take the
same steps in the same order, so every float is computed alike)."""

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from app.engine.simulation import ClosedLoop, PrefixCache, SchedulerConfig
from app.engine.simulation.loop import _Run, _run
from app.engine.specs import Deployment, Efficiency
from app.engine.step_cost import StepCostModel
from app.engine.step_load import StepLoad
from app.engine.workload import PercentileLengths, PoissonWorkload, Trace
from tests.engine.test_counting import H100, LLAMA3_8B

PROMPTS = PercentileLengths(p50=600, p90=2500, p99=6000, max_tokens=12_000)
OUTPUTS = PercentileLengths(p50=120, p90=400, p99=900, max_tokens=1500)


@dataclass(frozen=True)
class AffineTimer:
    def seconds(self, load: StepLoad) -> float:
        return 0.004 + 2e-5 * load.tokens + 1e-8 * load.decode_context_tokens


def poisson(rate: float, count: int, seed: int) -> Trace:
    return PoissonWorkload(rate, count, PROMPTS, OUTPUTS).trace(seed=seed)


# (rate req/s, KV tokens, scheduler, keyword arguments of `_run`): light load (where both
# shortcuts run most), busy, a tight KV cache (preemptions), a prefill chunk cap, multi-step
# scheduling, SGLang's receive interval (open and closed loop), a closed loop, a shared prefix,
# and a disaggregated decode pool.
CASES: dict[str, tuple[float, int, SchedulerConfig, dict[str, Any]]] = {
    "light": (1.0, 300_000, SchedulerConfig(), {}),
    "busy": (8.0, 300_000, SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=1024), {}),
    "tight kv": (6.0, 30_000, SchedulerConfig(max_num_seqs=64), {}),
    "chunk cap": (3.0, 300_000, SchedulerConfig(long_prefill_token_threshold=400), {}),
    "multi-step": (2.0, 300_000, SchedulerConfig(num_scheduler_steps=4), {}),
    "recv interval": (3.0, 300_000, SchedulerConfig(scheduler_recv_interval=8), {}),
    "recv closed": (
        1.0,
        300_000,
        SchedulerConfig(scheduler_recv_interval=30),
        {"closed_loop": ClosedLoop(16)},
    ),
    "closed loop": (1.0, 300_000, SchedulerConfig(), {"closed_loop": ClosedLoop(6, 0.2)}),
    "prefix": (2.0, 300_000, SchedulerConfig(), {"prefix_cache": PrefixCache(256)}),
    "decode pool": (3.0, 40_000, SchedulerConfig(max_num_seqs=32), {"decode_pool": True}),
}


def run(case: str, seed: int, timer: Any, *, shortcuts: bool = True, run_trace: Any = _run) -> _Run:
    """`case`'s run through `run_trace` (`_run`, or another build's)."""
    rate, kv_tokens, scheduler, extra = CASES[case]
    trace = poisson(rate, 400, seed)
    extra = dict(extra)
    if extra.pop("decode_pool", False):
        # Each request's KV arrives 50 ms after it was sent, its first token out.
        extra["prefilled_s"] = trace.arrival_s + 0.05
    result: _Run = run_trace(
        trace,
        timer,
        kv_capacity_tokens=kv_tokens,
        block_tokens=16,
        scheduler=scheduler,
        ttft_slo_ms=None,
        tpot_slo_ms=None,
        exact_step_times=False,
        max_steps=None,
        closed_loop=extra.pop("closed_loop", None),
        prefix_cache=extra.pop("prefix_cache", None),
        shortcuts=shortcuts,
        **extra,
    )
    return result


TIMERS = {
    "affine": AffineTimer(),
    "roofline": StepCostModel(LLAMA3_8B, H100, Deployment(), Efficiency()),
}


@pytest.mark.parametrize("timer", TIMERS)
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_the_shortcuts_take_the_same_steps(case: str, seed: int, timer: str) -> None:
    fast = run(case, seed, TIMERS[timer], shortcuts=True)
    plain = run(case, seed, TIMERS[timer], shortcuts=False)
    assert_same_run(fast, plain)


def assert_same_run(fast: _Run, plain: _Run) -> None:
    """Every output of the two runs equal, float for float."""
    for name in ("first_token_s", "finish_s", "arrival_s", "itl_pairs", "group_pieces"):
        np.testing.assert_array_equal(
            np.asarray(getattr(fast, name)), np.asarray(getattr(plain, name)), err_msg=name
        )
    for name in (
        "queue_time_s",
        "queue_waiting",
        "queue_running",
        "steps",
        "timer_calls",
        "preemptions",
        "area_in_system",
        "area_waiting",
        "max_waiting",
        "max_running",
    ):
        assert getattr(fast, name) == getattr(plain, name), name
    assert fast.steps > 0

"""The answers the compiled modules' parity test compares: step times (roofline and measured,
every layout the regression targets cover), their breakdowns and sums, and whole simulator runs,
each float as its exact hex. Run as a script it prints them as JSON, from whichever build the
environment selects (`RIDGELINE_PURE_PYTHON=1`: the sources)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from app.catalog.profiles import bundled_document
from app.engine.profiles import ProfiledStepCost
from app.engine.serving import policy_of
from app.engine.specs import Deployment
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.engine.step_load import StepLoad
from tests.engine.test_params import CATALOG, _spec
from tests.engine.test_regression import GPUS, TARGETS
from tests.engine.test_simulator_shortcuts import CASES, TIMERS, run

LOADS = [
    prefill_load(1),
    prefill_load(517, cached_tokens=2048),
    prefill_load(2048, batch_size=3, cached_tokens=7),
    decode_load(1, 40),
    decode_load(37, 1405),
    decode_load(300, 3000),
    decode_load(9, 1000) + prefill_load(512, cached_tokens=300),
    decode_load(256, 4000) + prefill_load(2048, batch_size=2),
]
PROFILED = [
    ("llama-3.1-8b", "h100-sxm5-80gb", Deployment(), "h100-sxm5-80gb-vllm-0.24.0"),
    ("llama-3.1-70b", "h100-sxm5-80gb", Deployment(tp=4), "h100-sxm5-80gb-sglang-0.5.14"),
    ("mixtral-8x7b", "h100-sxm5-80gb", Deployment(tp=2), "h100-sxm5-80gb-trtllm-1.3.0rc20"),
    ("deepseek-v3", "b200-sxm-180gb", Deployment(tp=8), "b200-sxm-180gb-vllm-0.24.0"),
    ("qwen3-30b-a3b", "h200-sxm-141gb", Deployment(dp=2, ep=2), "h200-sxm-141gb-vllm-0.24.0"),
]


def _hex(values: Any) -> list[str]:
    return [float(v).hex() for v in np.asarray(values, dtype=np.float64).ravel()]


def _timer_answers(cost: StepCostModel) -> list[str]:
    out: list[str] = []
    for load in LOADS:
        out += _hex([cost.seconds(load), cost.step_seconds(*load)])
        timed = cost.breakdown(load)
        out += _hex([value for op in timed.ops for value in (op.compute_s, op.memory_s)])
        out += _hex([timed.communication_s, timed.overhead_s])
    first, step = prefill_load(512, cached_tokens=1024), StepLoad(prefill_attention_pairs=512.0**2)
    out += _hex(
        [
            cost.sum_seconds(first, step, 40),
            cost.sum_seconds(decode_load(64, 100), decode_load(0, 64), 900),
        ]
    )
    return out


def answers() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for model, gpu, deployment, efficiency in TARGETS:
        cost = StepCostModel(_spec(CATALOG[model]), GPUS[gpu], deployment, efficiency)
        found[f"roofline {model} {gpu} {deployment}"] = _timer_answers(cost)
        graphs = policy_of("vllm").graph_sizes("0.24.0", deployment.tp)
        padded = StepCostModel(_spec(CATALOG[model]), GPUS[gpu], deployment, efficiency, graphs)
        found[f"padded {model} {gpu} {deployment}"] = _timer_answers(padded)
    for model, gpu, deployment, profile_id in PROFILED:
        profile = bundled_document(profile_id).to_profile()
        cost = ProfiledStepCost(_spec(CATALOG[model]), GPUS[gpu], deployment, profile)
        found[f"profiled {model} {profile_id} {deployment}"] = _timer_answers(cost)
    for case in CASES:
        for name, timer in TIMERS.items():
            result = run(case, 3, timer)
            found[f"run {case} {name}"] = (
                _hex(np.nan_to_num(np.asarray(result.first_token_s), nan=-1.0))
                + _hex(np.nan_to_num(np.asarray(result.finish_s), nan=-1.0))
                + _hex(result.itl_pairs)
                + _hex(result.group_pieces)
                + _hex([result.steps, result.timer_calls, result.area_in_system])
            )
    return found


if __name__ == "__main__":
    print(json.dumps(answers()))

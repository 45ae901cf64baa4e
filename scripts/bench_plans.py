"""How long a capacity plan and a 100,000-request simulation take (issue 5's targets: a plan over
8 GPUs x TP {1, 2, 4, 8} x 2 formats under 3 s; 100,000 simulated requests under 2 s; issue 12's:
Llama-3.1-70B at 20 requests/s planned on one GPU type under 2 s, over the whole catalog under
10 s).

The case is issue 5's: Llama-3-8B, 10 requests/s, prompts p50/p90/p99 = 2048/3072/4096 tokens,
outputs 256/384/512, TTFT p99 1 s, TPOT p99 50 ms, 20 % headroom, on the eight GPUs the API contract
names, with their bundled calibrations and prices, and the planner's default scheduler choices
(max_num_seqs 256; chunks of 512 and 2048 tokens): 128 candidates, reported as 120 (a deployment
that is impossible whatever the scheduler, fp8 on an A100, is one entry, not two). It is timed in
the engine (`plan_capacity`, no database), and with `--http` through a real server (uvicorn,
SQLite) as a client sees it. Run from the repository root:

    .venv/bin/python scripts/bench_plans.py [--repeats 3] [--exhaustive] [--http]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.catalog.loader import bundled_gpus, bundled_models
from app.engine.memory import memory_plan
from app.engine.planning import (
    CapacityPlan,
    GpuOffer,
    PlanOptions,
    Slo,
    Traffic,
    plan_capacity,
)
from app.engine.simulation import SchedulerConfig, kv_capacity_tokens, simulate
from app.engine.specs import Deployment
from app.engine.step_cost import StepCostModel
from app.engine.workload import PercentileLengths, PoissonWorkload
from app.formats.catalog_specs import gpu_spec_from_fields, model_spec_from_fields

GPUS = (
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "h100-sxm5-80gb",
    "h100-pcie-80gb",
    "h200-sxm-141gb",
    "b200-sxm-180gb",
    "l40s-48gb",
    "mi300x-192gb",
)
PROMPTS = {"p50": 2048, "p90": 3072, "p99": 4096}
OUTPUTS = {"p50": 256, "p90": 384, "p99": 512}
RATE = 10.0
SLO = {"ttft_p99_ms": 1000, "tpot_p99_ms": 50}
SIMULATED_REQUESTS = 100_000
# Issue 12: Llama-3.1-70B at 20 requests/s, the same lengths and SLOs, in the model's own format
# (bf16, as the service plans by default), on one GPU type and on every GPU the catalog prices.
LARGE_MODEL = "llama-3.1-70b"
LARGE_RATE = 20.0
ONE_GPU = "h100-sxm5-80gb"


def _lengths(fields: Mapping[str, float]) -> PercentileLengths:
    return PercentileLengths(fields["p50"], fields["p90"], fields["p99"], max_tokens=131072)


def engine_plan(exhaustive: bool) -> tuple[CapacityPlan, float]:
    catalog = {g["id"]: g for g in bundled_gpus()}
    model_fields = next(m for m in bundled_models() if m["id"] == "llama-3-8b")
    model = model_spec_from_fields(model_fields)
    offers = [
        GpuOffer(gpu_spec_from_fields(catalog[i]), catalog[i]["price_per_gpu_hour_usd"])
        for i in GPUS
    ]
    traffic = Traffic(RATE, _lengths(PROMPTS), _lengths(OUTPUTS))
    start = time.perf_counter()
    plan = plan_capacity(
        model,
        offers,
        traffic,
        Slo(SLO["ttft_p99_ms"], SLO["tpot_p99_ms"]),
        PlanOptions(exhaustive=exhaustive, max_plans=50 if exhaustive else 3),
    )
    return plan, time.perf_counter() - start


def large_plan(gpus: tuple[str, ...] | None) -> tuple[CapacityPlan, float]:
    """Issue 12's plan on `gpus` (None: every GPU with a catalog price), timed in the engine."""
    catalog = {g["id"]: g for g in bundled_gpus()}
    model = model_spec_from_fields(next(m for m in bundled_models() if m["id"] == LARGE_MODEL))
    ids = gpus or tuple(i for i, g in catalog.items() if g.get("price_per_gpu_hour_usd"))
    offers = [
        GpuOffer(gpu_spec_from_fields(catalog[i]), catalog[i]["price_per_gpu_hour_usd"])
        for i in ids
    ]
    traffic = Traffic(LARGE_RATE, _lengths(PROMPTS), _lengths(OUTPUTS))
    checkpoint = model.checkpoint_dtype
    start = time.perf_counter()
    plan = plan_capacity(
        model,
        offers,
        traffic,
        Slo(SLO["ttft_p99_ms"], SLO["tpot_p99_ms"]),
        PlanOptions(dtype_pairs=((checkpoint, checkpoint),)),
    )
    return plan, time.perf_counter() - start


def engine_simulation() -> tuple[float, Any]:
    catalog = {g["id"]: g for g in bundled_gpus()}
    gpu = gpu_spec_from_fields(catalog["h100-sxm5-80gb"])
    model = model_spec_from_fields(next(m for m in bundled_models() if m["id"] == "llama-3-8b"))
    cost = StepCostModel(model, gpu, Deployment(), gpu.efficiency)
    scheduler = SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=2048)
    memory = memory_plan(model, gpu, Deployment(), max_num_batched_tokens=2048)
    kv_tokens = kv_capacity_tokens(memory, 16)
    # 7 requests/s: about 70 % of what one calibrated H100 sustains within the SLOs here.
    trace = PoissonWorkload(7.0, SIMULATED_REQUESTS, _lengths(PROMPTS), _lengths(OUTPUTS)).trace(
        seed=0
    )
    start = time.perf_counter()
    result = simulate(trace, cost, kv_capacity_tokens=kv_tokens, scheduler=scheduler)
    return time.perf_counter() - start, result


def describe(plan: CapacityPlan, seconds: float, label: str) -> None:
    statuses = Counter(c.status.value for c in plan.candidates)
    print(
        f"{label}: {seconds:.2f} s, {len(plan.candidates)} candidates "
        f"({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))}), "
        f"{plan.simulations} simulations of {plan.probe_requests} requests"
    )
    for c in [c for c in plan.candidates if c.feasible][:5]:
        predicted = c.predicted
        assert predicted is not None
        print(
            f"  {c.gpu:<16} tp {c.tp} {c.weight_dtype:<4} chunk {c.chunk_tokens:>4}: "
            f"{c.replicas} replica(s), ${c.cost_per_hour_usd:.2f}/h, "
            f"${c.cost_per_million_output_tokens_usd:.3f}/M tokens, sustains "
            f"{c.max_requests_per_s_per_replica:.1f}/s (bound "
            f"{c.analytic_max_requests_per_s_per_replica:.1f}), TTFT p99 "
            f"{predicted.ttft_p99_ms:.0f} ms, TPOT p99 {predicted.tpot_p99_ms:.1f} ms"
        )


def over_http() -> None:
    import httpx  # noqa: PLC0415  (only this mode needs a client)
    from benchlib import running_server  # noqa: PLC0415

    with running_server(log_level="WARNING") as base:
        plan_body = {
            "model": "llama-3-8b",
            "traffic": {
                "requests_per_s": RATE,
                "prompt_tokens": PROMPTS,
                "output_tokens": OUTPUTS,
            },
            "slo": SLO,
            "gpus": list(GPUS),
        }
        headers = {"Authorization": "Bearer bench-key-0123456789"}
        bodies: list[dict[str, Any]] = [plan_body, {**plan_body, "gpus": None}]
        for body, label in zip(bodies * 2, ["8 GPUs", "every priced GPU"] * 2, strict=True):
            start = time.perf_counter()
            response = httpx.post(f"{base}/v1/plans", json=body, headers=headers, timeout=60)
            answered = time.perf_counter() - start
            location = response.headers["location"]
            polls = 0
            while response.json()["status"] in {"queued", "running"}:
                time.sleep(0.25)  # a 202: poll until done, as a client does
                response = httpx.get(f"{base}{location}", timeout=60)
                polls += 1
            if response.json()["status"] != "done":
                raise SystemExit(f"the plan did not finish: {response.text}")
            wall = time.perf_counter() - start
            answer = response.json()
            full = httpx.get(f"{base}{location}", params={"detail": "full"}, timeout=60)
            print(
                f"POST /v1/plans ({label}): answered in {answered:.2f} s, done in {wall:.2f} s "
                f"after {polls} polls (planning {answer['elapsed_ms'] / 1e3:.2f} s, "
                f"{answer['simulations']} simulations); answer {len(response.content):,} bytes "
                f"compact, {len(full.content):,} full"
            )
        simulation_body = {
            "model": "llama-3-8b",
            "gpu": "h100-sxm5-80gb",
            "workload": {
                "requests_per_s": 7.0,
                "num_requests": SIMULATED_REQUESTS,
                "prompt_tokens": PROMPTS,
                "output_tokens": OUTPUTS,
            },
        }
        for _ in range(2):
            start = time.perf_counter()
            response = httpx.post(f"{base}/v1/simulations", json=simulation_body, timeout=60)
            wall = time.perf_counter() - start
            print(
                f"POST /v1/simulations ({SIMULATED_REQUESTS:,} requests): "
                f"{response.status_code} in {wall:.2f} s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    parser.add_argument("--exhaustive", action="store_true", help="also plan without pruning")
    parser.add_argument("--http", action="store_true", help="also time through a real server")
    args = parser.parse_args()

    runs = [engine_plan(exhaustive=False) for _ in range(args.repeats)]
    describe(runs[0][0], min(seconds for _, seconds in runs), "plan (branch and bound)")
    if args.exhaustive:
        plan, seconds = engine_plan(exhaustive=True)
        describe(plan, seconds, "plan (exhaustive)")
    for gpus, label, target_s in (
        ((ONE_GPU,), f"plan {LARGE_MODEL} {LARGE_RATE:g}/s on {ONE_GPU}", 2.0),
        (None, f"plan {LARGE_MODEL} {LARGE_RATE:g}/s on the catalog", 10.0),
    ):
        large = [large_plan(gpus) for _ in range(args.repeats)]
        describe(
            large[0][0], min(seconds for _, seconds in large), f"{label} (target {target_s:g} s)"
        )
    simulations = [engine_simulation() for _ in range(args.repeats)]
    seconds = min(s for s, _ in simulations)
    result = simulations[0][1]
    print(
        f"simulation: {SIMULATED_REQUESTS:,} requests in {seconds:.2f} s ({result.steps:,} "
        f"steps, TTFT p99 {result.ttft_ms.p99:.0f} ms, TPOT p99 {result.tpot_ms.p99:.1f} ms, "
        f"saturated {result.saturated})"
    )
    if args.http:
        over_http()


if __name__ == "__main__":
    main()

"""How fast the serving simulator runs: requests, steps, timer calls and wall time per load.

Times one replica of Llama-3.1-8B on an H100 SXM5 (bf16, the catalog's efficiency) with the
engine's `StepCostModel`, for Poisson traffic of prompt p50/p90/p99 = 1000/3000/8000 tokens and
output 200/500/1000, at fractions of the replica's capacity; the capacity is measured first, as
the arrival rate minus the backlog growth of an overloaded run. Run from the repository root:

    .venv/bin/python scripts/bench_simulator.py [--requests 100000] [--repeats 3] [--profile]
    .venv/bin/python scripts/bench_simulator.py --instructions [--requests 20000] [--profile]

`--instructions` counts, with valgrind (callgrind), the CPU instructions the event loop's runs
take (`_Run.execute` and all it calls: the step timer, the scheduler), one load per process: a
figure that hardly moves with what else the machine runs, for before/after comparisons.

The target (issue 12) is 100,000 requests in under 1 s at any load, and a few thousand requests
(one planner probe) in tens of milliseconds. The first lines say whether the event loop runs
compiled (setup.py, `make install-dev`) or as Python source (about twice as slow). `cpu s` is
the process's CPU time, steadier than the wall clock on a shared machine; both are the best of
`--repeats` runs.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.catalog.loader import bundled_gpus, bundled_models
from app.catalog.profiles import bundled_document
from app.engine._native import is_compiled
from app.engine.memory import memory_plan
from app.engine.profiles import ProfiledStepCost
from app.engine.simulation import SchedulerConfig, SimulationResult, loop, simulate
from app.engine.specs import (
    Deployment,
    GpuSpec,
    ModelSpec,
)
from app.engine.step_cost import StepCostModel
from app.engine.workload import PercentileLengths, PoissonWorkload, Trace
from app.formats.catalog_specs import gpu_spec_from_fields, model_spec_from_fields


def catalog_target() -> tuple[ModelSpec, GpuSpec]:
    """Llama-3.1-8B (Llama-3-8B's architecture with a 128K context, so 32K-token prompts are
    legal) and the H100 SXM5 with its bundled efficiency, from the catalog that ships."""
    gpu = next(g for g in bundled_gpus() if g["id"] == "h100-sxm5-80gb")
    model = next(m for m in bundled_models() if m["id"] == "llama-3.1-8b")
    return model_spec_from_fields(model), gpu_spec_from_fields(gpu)


PROMPTS = PercentileLengths(p50=1000, p90=3000, p99=8000, max_tokens=32_000)
OUTPUTS = PercentileLengths(p50=200, p90=500, p99=1000, max_tokens=4000)
SCHEDULER = SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=2048)


def run(
    trace: Trace, timer: StepCostModel, kv_tokens: int
) -> tuple[SimulationResult, float, float]:
    """The run, its wall-clock seconds and its CPU seconds."""
    start, start_cpu = time.perf_counter(), time.process_time()
    result = simulate(trace, timer, kv_capacity_tokens=kv_tokens, scheduler=SCHEDULER)
    return result, time.perf_counter() - start, time.process_time() - start_cpu


LOADS = [(0.3, None), (0.7, None), (0.9, None), (1.2, None), (0.7, 3000)]
"""(fraction of capacity, requests: None for `--requests`) of each row."""


def instructions(args: argparse.Namespace, capacity: float) -> None:
    """Each row's instructions in `_Run.execute` (inclusive), one valgrind process a row (at the
    capacity this process measured)."""
    print(f"{'load':>5} {'requests':>9} {'instructions':>14} {'per request':>12}")
    for row, (fraction, count) in enumerate(LOADS):
        with tempfile.TemporaryDirectory() as tmp:
            out = f"{tmp}/callgrind.out"
            command = [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                "--toggle-collect=*_Run*execute*",
                sys.executable,
                __file__,
                "--row",
                str(row),
                "--requests",
                str(args.requests),
                "--repeats",
                "1",
                "--capacity",
                repr(float(capacity)),
                *(["--profile"] if args.profile else []),
            ]
            subprocess.run(command, check=True, capture_output=True)
            with open(out) as dump:
                match = re.search(r"^totals:\s+(\d+)", dump.read(), re.MULTILINE)
            total = int(match.group(1)) if match else 0
        requests = count or args.requests
        print(f"{fraction:>5.1f} {requests:>9,} {total:>14,} {total / requests:>12,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="time steps with the H100's bundled vLLM profile instead of the roofline",
    )
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions with valgrind instead"
    )
    parser.add_argument("--row", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--capacity", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    model, gpu = catalog_target()
    timer: StepCostModel = StepCostModel(model, gpu, Deployment(), gpu.efficiency)
    if args.profile:
        profile = bundled_document("h100-sxm5-80gb-vllm-0.24.0").to_profile()
        timer = ProfiledStepCost(model, gpu, Deployment(), profile)
    plan = memory_plan(model, gpu, Deployment())
    kv_tokens = int(plan.kv_pool_bytes / plan.kv_bytes_per_token)

    if args.capacity is None:
        overload = PoissonWorkload(100.0, 5000, PROMPTS, OUTPUTS).trace(seed=0)
        probe, _, _ = run(overload, timer, kv_tokens)
        capacity = 100.0 - probe.backlog_growth_requests_per_s
    else:
        capacity = args.capacity
    if args.instructions:
        instructions(args, capacity)
        return
    print(
        f"Llama-3.1-8B on H100 SXM5 (catalog efficiency), KV cache {kv_tokens:,} tokens, "
        f"capacity ~{capacity:.1f} req/s"
    )
    build = "compiled (mypyc)" if is_compiled(loop) else "Python source (not compiled)"
    print(f"event loop: {build}, {loop.__file__}")
    print(
        f"{'load':>5} {'requests':>9} {'steps':>9} {'timer calls':>12} {'wall s':>7} "
        f"{'cpu s':>6} {'req/s wall':>11} {'us/step':>8} {'preempted':>9} {'saturated':>9} "
        f"{'TTFT p99 ms':>12}"
    )
    rows = LOADS if args.row is None else [LOADS[args.row]]
    for fraction, given in rows:
        count = given or args.requests
        trace = PoissonWorkload(fraction * capacity, count, PROMPTS, OUTPUTS).trace(seed=1)
        timings = [run(trace, timer, kv_tokens) for _ in range(args.repeats)]
        result = timings[0][0]
        wall_s = min(seconds for _, seconds, _ in timings)
        cpu_s = min(seconds for _, _, seconds in timings)
        print(
            f"{fraction:>5.1f} {count:>9,} {result.steps:>9,} {result.timer_calls:>12,} "
            f"{wall_s:>7.3f} {cpu_s:>6.3f} {count / wall_s:>11,.0f} "
            f"{wall_s / result.steps * 1e6:>8.2f} {result.preemptions:>9,} "
            f"{result.saturated!s:>9} {result.ttft_ms.p99:>12.1f}"
        )


if __name__ == "__main__":
    main()

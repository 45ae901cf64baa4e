"""Ridgeline against published measurements of real serving runs (docs/validation/published.json):
per metric, the mean absolute error and the signed bias (negative: the estimate is faster than
the measurement, what under-provisions a cluster), with the roofline at the GPU's catalog
efficiency ("roofline") and with the measured profile of the run's engine where the GPU has one,
else its default profile ("profile").

`--scaled` holds each GPU's own tables out: every point whose GPU has a profile of its engine is
timed as if it had none, from its nearest relative's profile scaled to its datasheet (what the
service does for a GPU without tables), beside the roofline and its own profile.

    .venv/bin/python scripts/validate_published.py [--points] [--scaled [--any-architecture]]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from app.catalog.loader import bundled_gpus, bundled_models
from app.catalog.profiles import bundled_document, bundled_refs, choose_engine
from app.catalog.relatives import Datasheet, nearest_relatives
from app.engine.dtypes import DType
from app.engine.estimates import estimate_prefill, estimate_request
from app.engine.memory import memory_plan
from app.engine.params import count_params
from app.engine.profiles import Profile, ProfiledStepCost
from app.engine.serving import ServingEngine, parse_engine
from app.engine.simulation import ClosedLoop, SimulationResult, kv_capacity_tokens, simulate
from app.engine.specs import Deployment, GpuSpec, ModelSpec, SpecError
from app.engine.step_cost import StepCostModel
from app.engine.workload import Trace
from app.formats.catalog_specs import gpu_spec_from_fields, model_spec_from_fields
from app.validation.record import (
    RECORD,
    Comparison,
    basis_kind,
    coverage,
    document,
    family_of,
    held_out,
    regime_of,
)

PUBLISHED = Path(__file__).resolve().parents[1] / "docs" / "validation" / "published.json"


@cache
def _gpu(gpu_id: str) -> GpuSpec:
    return gpu_spec_from_fields(next(g for g in bundled_gpus() if g["id"] == gpu_id))


@cache
def _model(model_id: str) -> ModelSpec:
    return model_spec_from_fields(next(m for m in bundled_models() if m["id"] == model_id))


@cache
def _profile(profile_id: str) -> Profile:
    return bundled_document(profile_id).to_profile()


def _datasheet(gpu_id: str) -> Datasheet:
    row = next(g for g in bundled_gpus() if g["id"] == gpu_id)
    return Datasheet(
        gpu_id,
        row["vendor"],
        row.get("architecture"),
        row["peak_flops_per_s"].get("bf16"),
        row["memory_bandwidth_bytes_per_s"],
    )


ANY_ARCHITECTURE = False
"""`--any-architecture`: relatives of the vendor's other architectures too."""


def _held_out(point: dict[str, Any], deployment: Deployment) -> tuple[StepCostModel, str] | None:
    """The point timed as the service times a GPU without tables: from the nearest relative's
    profile of the same engine, scaled; None where the GPU has no profile to hold out."""
    gpu, model = _gpu(point["gpu"]), _model(point["model"])
    refs = tuple(r for r in bundled_refs() if r.gpu == gpu.id)
    named = point["engine"]
    own = choose_engine(None if named is None else parse_engine(named), refs, gpu=gpu.id)
    if own.profile is None:
        return None
    measured = {r.gpu for r in bundled_refs()}
    order = nearest_relatives(
        _datasheet(gpu.id), (_datasheet(g) for g in measured), any_architecture=ANY_ARCHITECTURE
    )
    choice = choose_engine(
        ServingEngine(own.engine.name),
        (),
        gpu=gpu.id,
        relatives=lambda: ((r, tuple(x for x in bundled_refs() if x.gpu == r)) for r in order),
    )
    if choice.profile is None or choice.measured_on is None:
        return None
    profile = _profile(choice.profile.id)
    cost = ProfiledStepCost(model, gpu, deployment, profile, measured_on=_gpu(choice.measured_on))
    return cost, f"{profile.label} scaled"


def _cost(point: dict[str, Any], use_profile: bool | str) -> tuple[StepCostModel, str] | None:
    gpu, model = _gpu(point["gpu"]), _model(point["model"])
    weight = DType(point["weight_dtype"])
    experts = point.get("expert_dtype")
    deployment = Deployment(
        tp=point["tp"],
        weight_dtype=weight,
        kv_dtype=DType(point.get("kv_dtype", "bf16")),
        dp=point.get("dp") or 1,
        ep=point.get("ep") or 1,
        pp=point.get("pp") or 1,
        expert_dtype=None if experts is None else DType(experts),
    )
    if use_profile == "scaled":
        return _held_out(point, deployment)
    if use_profile:
        refs = tuple(r for r in bundled_refs() if r.gpu == gpu.id)
        # As the service chooses: the run's engine's profile; the roofline when the GPU has
        # none for that engine; the GPU's default when the source names no engine.
        named = point["engine"]
        choice = choose_engine(None if named is None else parse_engine(named), refs, gpu=gpu.id)
        if choice.profile is not None:
            profile = _profile(choice.profile.id)
            return ProfiledStepCost(model, gpu, deployment, profile), profile.label
    return StepCostModel(model, gpu, deployment, gpu.efficiency), "roofline"


GROUPS = ("dense-and-mixtral", "new-architectures")
"""The published set's groups: what the profiles were checked on when they landed, and the
architectures added after (MLA, wide MoE, MXFP4 experts), reported apart."""


def compare(
    use_profile: bool | str, group: str | None = None, only: set[str] | None = None
) -> list[Comparison]:
    """Every comparable figure of the published set (of one `group`, if given; of the points
    `only` names, if given); `use_profile` "scaled": the held-out timing (`_held_out`), for the
    points it applies to."""
    found = []
    for point in json.loads(PUBLISHED.read_text())["static"]:
        if group is not None and point["group"] != group:
            continue
        if only is not None and point["id"] not in only:
            continue
        try:
            timed = _cost(point, use_profile)
            if timed is None:
                continue
            cost, basis = timed
            batch, prompt, output = (
                point["batch_size"],
                point["prompt_tokens"],
                point["output_tokens"],
            )
            estimates: dict[str, float] = {}
            if _closed(point):
                estimates = _closed_loop(point, cost)
            elif "ttft_ms" in point["measured"]:
                prefill = estimate_prefill(cost, prompt_tokens=prompt, batch_size=batch)
                estimates["ttft_ms"] = prefill.ttft_ms
            wants_request = {"tpot_ms", "e2e_ms"} & point["measured"].keys() and output > 1
            if not _closed(point) and wants_request:
                request = estimate_request(
                    cost, prompt_tokens=prompt, output_tokens=output, batch_size=batch
                )
                estimates["tpot_ms"], estimates["e2e_ms"] = request.tpot_ms, request.e2e_ms
            if "output_tokens_per_s" in point["measured"]:
                estimates["output_tokens_per_s"] = _offline_throughput(point, cost)
        except SpecError as error:
            print(f"skipped {point['id']}: {error}")
            continue
        kind = {
            "point": point["id"],
            "source": point["source"]["url"],
            "family": family_of(_model(point["model"])),
            "engine": point["engine"] or "unstated",
            "basis": basis_kind(cost),
            "regime": ("saturated" if _offline(point) else regime_of(cost, batch, prompt + output)),
            "timed_by": basis,
        }
        for metric, measured in point["measured"].items():
            if metric in estimates:
                found.append(
                    Comparison(
                        **kind, metric=metric, measured=measured, estimated=estimates[metric]
                    )
                )
    return found


def _closed(point: dict[str, Any]) -> bool:
    """Whether the run was a closed loop of users (`vllm bench serve --max-concurrency`,
    InferenceX's sweeps): its TTFT and TPOT are the loop's means, simulated."""
    return bool(point.get("load", {}).get("kind") == "closed")


def _closed_loop(point: dict[str, Any], cost: StepCostModel) -> dict[str, float]:
    """Mean TTFT and TPOT of `load.concurrency` users sending `load.num_requests` requests of
    the run's nominal lengths drawn uniformly from `range_ratio` x length up to the length
    (the benchmark clients' random dataset; seeded), one replica with its engine's default
    scheduler under the launch's flags in `load.scheduler` (SchedulerConfig's fields) and the
    KV cache 90 % of the memory leaves."""
    load = point["load"]
    count, users = int(load["num_requests"]), int(load["concurrency"])
    rng = np.random.default_rng(0)
    ratio = float(load.get("range_ratio", 1.0))

    def lengths(nominal: int) -> Any:
        return rng.integers(math.floor(nominal * ratio), nominal + 1, size=count)

    trace = Trace(
        arrival_s=np.zeros(count),
        prompt_tokens=lengths(int(load["input_tokens"])),
        output_tokens=lengths(int(load["output_tokens"])),
    )
    # The launch's scheduler flags where the source states them (`load.scheduler`).
    result = _replica_run(point, cost, trace, dict(load.get("scheduler", {})), ClosedLoop(users))
    return {"ttft_ms": result.ttft_ms.mean, "tpot_ms": result.tpot_ms.mean}


def _offline(point: dict[str, Any]) -> bool:
    """Whether the run queued all its requests at once (an offline throughput benchmark)."""
    return bool(point.get("load", {}).get("kind") == "offline")


OFFLINE_BLOCK_TOKENS = 32
OFFLINE_MEMORY_SHARE = 0.9


_BENCH_BYTES = {"fp8": 1.0, "fp8-block": 1.0, "nvfp4": 0.5}
_GIB = 1024.0**3


def _trtllm_bench_limits(
    model: ModelSpec, gpu: GpuSpec, deployment: Deployment, point: dict[str, Any]
) -> dict[str, int]:
    """The batch limits `trtllm-bench throughput` runs with when given none: its tuning
    heuristic (tensorrt_llm/bench/build/tuning.py, `calc_engine_setting` and
    `finetune_setting`): the requests of the target lengths the KV cache holds (95 % of the
    memory the weights leave, its bytes per element by format), at most 4,096, rounded up
    (64 at least; to 32 below 256, 128 below 1,024, 256 above), and tokens per step that
    many times 1 + input / output, at most 32,768, rounded up (2,048 at least)."""
    gpus = deployment.tp * deployment.dp * deployment.pp
    weight_b = _BENCH_BYTES.get(point["weight_dtype"], 2.0)
    kv_b = _BENCH_BYTES.get(point.get("kv_dtype", "bf16"), 2.0)
    kv_heads = max(deployment.tp * deployment.dp, model.num_kv_heads)
    per_token = 2 * model.num_layers * kv_heads * model.head_dim * kv_b / _GIB
    engine = count_params(model).total * weight_b / _GIB
    available = gpu.memory_bytes / _GIB * gpus - engine
    isl, osl = point["prompt_tokens"], point["output_tokens"]
    requests = available * 0.95 / (per_token * (isl + osl))
    raw = min(requests, 4096) / deployment.pp
    raw_tokens = min(raw * (1 + isl / osl), 32768)
    if raw < 256:
        batch = max(64, 32 * math.ceil(raw / 32))
    elif raw < 1024:
        batch = 128 * math.ceil(raw / 128)
    else:
        batch = 256 * math.ceil(raw / 256)
    if raw_tokens < 4096:
        tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        tokens = 1024 * math.ceil(raw_tokens / 1024)
    return {"max_num_seqs": batch, "max_num_batched_tokens": tokens}


def _offline_throughput(point: dict[str, Any], cost: StepCostModel) -> float:
    """Output tokens per second of the run's `num_requests` requests of its lengths, all queued
    at once, simulated on one replica with its engine's default scheduler (the profile's
    release, else the named engine's newest behaviour) and the KV cache 90 % of the GPU's
    memory leaves: what an offline throughput benchmark (`trtllm-bench throughput`) measures."""
    count = int(point["load"]["num_requests"])
    limits = {}
    if point["load"].get("limits") == "trtllm-bench":
        limits = _trtllm_bench_limits(cost.model, cost.gpu, cost.deployment, point)
    trace = Trace(
        arrival_s=np.zeros(count),
        prompt_tokens=np.full(count, point["prompt_tokens"]),
        output_tokens=np.full(count, point["output_tokens"]),
    )
    result = _replica_run(point, cost, trace, limits, None)
    return result.throughput_tokens_per_s


def _replica_run(
    point: dict[str, Any],
    cost: StepCostModel,
    trace: Trace,
    limits: dict[str, int],
    closed_loop: ClosedLoop | None,
) -> SimulationResult:
    """`trace` served by one replica: its engine's default scheduler (the profile's release,
    else the named engine's newest behaviour) under `limits`, the KV cache 90 % of the GPU's
    memory leaves."""
    engine = (
        cost.profile.serving_engine
        if isinstance(cost, ProfiledStepCost)
        else parse_engine(point["engine"])
    )
    model, gpu, deployment = cost.model, cost.gpu, cost.deployment
    config = engine.policy.scheduler(engine.version, gpu, model.max_context_tokens, **limits)
    memory = memory_plan(
        model,
        gpu,
        deployment,
        gpu_memory_utilization=OFFLINE_MEMORY_SHARE,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_num_seqs=config.max_num_seqs,
    )
    return simulate(
        trace,
        cost,
        kv_capacity_tokens=kv_capacity_tokens(memory, OFFLINE_BLOCK_TOKENS),
        block_tokens=OFFLINE_BLOCK_TOKENS,
        scheduler=config.for_ranks(deployment.scheduler_batches),
        closed_loop=closed_loop,
    )


THROUGHPUT = "output_tokens_per_s"
"""The one metric where a positive error is the optimistic one: it stays out of "all"."""


def summary(comparisons: list[Comparison]) -> dict[str, tuple[int, float, float]]:
    """Per metric, and over every latency ("all"): (points, mean absolute error %, mean signed
    error %). Negative: faster than the run for a latency; for throughput, positive is
    optimistic."""
    groups: dict[str, list[float]] = defaultdict(list)
    for c in comparisons:
        groups[c.metric].append(c.error_pct)
        if c.metric != THROUGHPUT:
            groups["all"].append(c.error_pct)
    return {
        name: (len(errors), statistics.fmean(abs(e) for e in errors), statistics.fmean(errors))
        for name, errors in groups.items()
    }


def held_out_report(points: bool) -> None:
    """Own tables held out: scaled from the nearest relative's, against the roofline and the
    GPU's own profile, on the same points."""
    scaled = compare("scaled")
    ids = {c.point for c in scaled}
    rows = {"roofline": compare(False, only=ids), "profile": compare(True, only=ids)}
    rows["scaled"] = scaled
    print("\nown tables held out: the nearest relative's, scaled (same points in each column)")
    print(f"{'metric':<10} {'n':>3}" + "".join(f" {m + ' MAE':>13} {'median':>7}" for m in rows))
    by_mode = {
        mode: {(c.point, c.metric): c.error_pct for c in found} for mode, found in rows.items()
    }
    gpu_of = {p["id"]: p["gpu"] for p in json.loads(PUBLISHED.read_text())["static"]}
    same = {
        (c.point, c.metric)
        for c in scaled
        if _datasheet(gpu_of[c.point]).architecture
        == _datasheet(c.timed_by.split()[1]).architecture
    }
    keys = sorted(by_mode["scaled"])
    for metric in (*sorted({k[1] for k in keys}), "all", "same arch", "other arch"):
        chosen = [
            k
            for k in keys
            if metric in ("all", k[1])
            or (metric == "same arch" and k in same)
            or (metric == "other arch" and k not in same)
        ]
        if not chosen:
            continue
        line = f"{metric:<10} {len(chosen):>3}"
        for errors in by_mode.values():
            values = [errors[k] for k in chosen]
            line += f" {statistics.fmean(abs(e) for e in values):>12.1f}%"
            line += f" {statistics.median(values):>+6.1f}%"
        print(line)
    if points:
        for c in scaled:
            key = (c.point, c.metric)
            print(
                f"{c.point:<45} {c.metric:<8} measured {c.measured:>9.1f}  roofline "
                f"{by_mode['roofline'][key]:+6.1f}%  own {by_mode['profile'][key]:+6.1f}%  "
                f"{c.timed_by}: {c.error_pct:+6.1f}%"
            )


def write_record() -> None:
    """The service's record of its answers (what the service answers: a run's engine's
    profile where the GPU has one), and how many comparisons fell inside the interval their
    kind of answer states with their own source held out, per family and regime."""
    comparisons = compare(True)
    RECORD.write_text(json.dumps(document(comparisons), indent=1) + "\n")
    print(f"wrote {RECORD} ({len(comparisons)} comparisons)")
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for checked in held_out(comparisons):
        c = checked[0]
        groups[(c.family, c.regime)].append(checked)
        groups[("every family", "every regime")].append(checked)
    print(f"{'family':<13} {'regime':<15} {'n':>3} {'with interval':>14} {'inside':>7}")
    for (family, regime), members in sorted(groups.items()):
        n, share = coverage(members)
        inside = "-" if share is None else f"{100 * share:.0f}%"
        print(f"{family:<13} {regime:<15} {len(members):>3} {n:>14} {inside:>7}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", action="store_true", help="print every comparison")
    parser.add_argument(
        "--scaled", action="store_true", help="hold each GPU's tables out: a relative's, scaled"
    )
    parser.add_argument(
        "--any-architecture",
        action="store_true",
        help="with --scaled: relatives of the vendor's other architectures too",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"write the record the service ships ({RECORD.name}) and its held-out coverage",
    )
    args = parser.parse_args()
    if args.record:
        write_record()
        return
    if args.scaled:
        global ANY_ARCHITECTURE  # noqa: PLW0603 - a switch of this script's one run
        ANY_ARCHITECTURE = args.any_architecture
        held_out_report(args.points)
        return
    results = {"roofline": compare(False), "profile": compare(True)}
    for group in (None, *GROUPS):
        print(f"\n{group or 'every point'}")
        print(
            f"{'metric':<19} {'n':>3} {'roofline MAE':>13} {'bias':>7} {'profile MAE':>12} "
            f"{'bias':>7}"
        )
        before = summary(compare(False, group))
        after = summary(compare(True, group))
        for metric in sorted(before):
            n, mae0, bias0 = before[metric]
            _, mae1, bias1 = after[metric]
            print(
                f"{metric:<19} {n:>3} {mae0:>12.1f}% {bias0:>+6.1f}% {mae1:>11.1f}% {bias1:>+6.1f}%"
            )
    if args.points:
        for old, new in zip(results["roofline"], results["profile"], strict=True):
            print(
                f"{old.point:<45} {old.metric:<8} measured {old.measured:>9.1f}  roofline "
                f"{old.estimated:>9.1f} ({old.error_pct:+6.1f}%)  {new.timed_by}: "
                f"{new.estimated:>9.1f} ({new.error_pct:+6.1f}%)"
            )


if __name__ == "__main__":
    main()

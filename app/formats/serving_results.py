"""The result files of the serving benchmarks people run against their deployments, read into one
shape: `ServingMeasurement` (latency percentiles in ms, the load, the mean lengths).

- vLLM `vllm bench serve --save-result` (and the older benchmarks/benchmark_serving.py): one JSON
  object; `max_concurrency` set means closed loop, else `request_rate` (`"inf"`: all at once).
- SGLang `python -m sglang.bench_serving --output-file`: JSON lines appended per run; the last
  line is read. Same key names as vLLM's (`mean_e2e_latency_ms` for end to end).
- NVIDIA genai-perf `profile_export_genai_perf.json` and AIPerf `profile_export_aiperf.json`:
  `{metric: {"unit", "avg", "p50", "p90", "p99", ...}}`, units in each record (ms, or ns in
  genai-perf builds of mid-2024); the load in `input_config` (genai-perf:
  `perf_analyzer.stimulus` or, before 2025, flat; AIPerf: `loadgen`).
- GuideLLM `guidellm benchmark --output-path x.json`: `{"benchmarks": [...]}`, each with its
  `config.strategy` (or `args.strategy` before v0.4) and `metrics.<name>.successful`; one
  measurement per benchmark. Its `inter_token_latency_ms` is vLLM's TPOT.

TPOT everywhere is (e2e - TTFT) / (output tokens - 1), as vLLM defines it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "LoadMode",
    "Percentiles",
    "ServingMeasurement",
    "ServingResultError",
    "ServingTool",
    "parse_serving_result",
]


class ServingTool(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    GENAI_PERF = "genai-perf"
    AIPERF = "aiperf"
    GUIDELLM = "guidellm"


class LoadMode(StrEnum):
    RATE = "rate"  # open loop: requests arrive at a rate (Poisson, or all at once)
    CONCURRENCY = "concurrency"  # closed loop: a fixed number of users


class ServingResultError(ValueError):
    """A result file that cannot be read; `field` is the key at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Milliseconds; any may be missing from a tool's file."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


@dataclass(frozen=True, slots=True)
class ServingMeasurement:
    tool: ServingTool
    mode: LoadMode
    request_rate: float | None
    """Requests per second offered (open loop); `inf`: all at once."""
    concurrency: int | None
    """Users (closed loop)."""
    completed: int
    duration_s: float | None
    request_throughput: float
    """Completed requests per second."""
    output_throughput: float | None
    mean_prompt_tokens: float
    mean_output_tokens: float
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles


def _number(data: dict[str, Any], key: str, *, required: bool = True) -> float | None:
    value = data.get(key)
    if value is None:
        if required:
            raise ServingResultError(key, "missing")
        return None
    if isinstance(value, str) and value.lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ServingResultError(key, f"must be a number, got {value!r}")
    if not math.isfinite(value) and value != math.inf:
        raise ServingResultError(key, "must be finite")
    return float(value)


def _flat_percentiles(data: dict[str, Any], name: str) -> Percentiles:
    return Percentiles(
        mean=_number(data, f"mean_{name}_ms", required=False),
        p50=_number(data, f"median_{name}_ms", required=False),
        p90=_number(data, f"p90_{name}_ms", required=False),
        p99=_number(data, f"p99_{name}_ms", required=False),
    )


def _vllm_like(data: dict[str, Any], tool: ServingTool) -> ServingMeasurement:
    completed = int(_number(data, "completed") or 0)
    if completed <= 0:
        raise ServingResultError("completed", "no request completed")
    concurrency = data.get("max_concurrency")
    rate = _number(data, "request_rate", required=False)
    mode = LoadMode.CONCURRENCY if concurrency else LoadMode.RATE
    e2e = _flat_percentiles(data, "e2el" if tool is ServingTool.VLLM else "e2e_latency")
    if e2e.mean is None and isinstance(data.get("latencies"), list) and data["latencies"]:
        e2e = Percentiles(mean=1000.0 * sum(data["latencies"]) / len(data["latencies"]))
    return ServingMeasurement(
        tool=tool,
        mode=mode,
        request_rate=rate if mode is LoadMode.RATE else None,
        concurrency=int(concurrency) if concurrency else None,
        completed=completed,
        duration_s=_number(data, "duration", required=False),
        request_throughput=_number(data, "request_throughput") or 0.0,
        output_throughput=_number(data, "output_throughput", required=False),
        mean_prompt_tokens=(_number(data, "total_input_tokens") or 0.0) / completed,
        mean_output_tokens=(_number(data, "total_output_tokens") or 0.0) / completed,
        ttft_ms=_flat_percentiles(data, "ttft"),
        tpot_ms=_flat_percentiles(data, "tpot"),
        itl_ms=_flat_percentiles(data, "itl"),
        e2e_ms=e2e,
    )


_UNITS = {"ms": 1.0, "ns": 1e-6, "us": 1e-3, "s": 1e3, "sec": 1e3}


def _record(
    data: dict[str, Any], name: str, *, required: bool = True, time: bool = True
) -> Percentiles:
    """A per-request record; times in ms whatever unit it names, counts as they are."""
    record = data.get(name)
    if not isinstance(record, dict):
        if required:
            raise ServingResultError(name, "missing")
        return Percentiles()
    scale = _UNITS.get(str(record.get("unit", "ms")).lower()) if time else 1.0
    if scale is None:
        raise ServingResultError(f"{name}.unit", f"unknown unit {record.get('unit')!r}")

    def at(key: str) -> float | None:
        value = _number(record, key, required=False)
        return None if value is None else value * scale

    return Percentiles(mean=at("avg"), p50=at("p50"), p90=at("p90"), p99=at("p99"))


def _average(data: dict[str, Any], name: str, *, required: bool = True) -> float | None:
    record = data.get(name)
    if not isinstance(record, dict):
        if required:
            raise ServingResultError(name, "missing")
        return None
    return _number(record, "avg", required=required)


def _nvidia(data: dict[str, Any], tool: ServingTool) -> ServingMeasurement:
    config = data.get("input_config") or {}
    if tool is ServingTool.AIPERF:
        load = config.get("loadgen") or {}
    else:
        load = (config.get("perf_analyzer") or {}).get("stimulus") or config
    rate = load.get("request_rate")
    concurrency = load.get("concurrency")
    mode = LoadMode.RATE if rate else LoadMode.CONCURRENCY
    throughput = _average(data, "request_throughput") or 0.0
    count = _average(data, "request_count", required=False)
    return ServingMeasurement(
        tool=tool,
        mode=mode,
        request_rate=float(rate) if rate else None,
        concurrency=None if rate else int(concurrency or 1),
        completed=int(count) if count else 0,
        duration_s=None,
        request_throughput=throughput,
        output_throughput=_average(data, "output_token_throughput", required=False),
        mean_prompt_tokens=_record(data, "input_sequence_length", time=False).mean or 0.0,
        mean_output_tokens=_record(data, "output_sequence_length", time=False).mean or 0.0,
        ttft_ms=_record(data, "time_to_first_token"),
        tpot_ms=_record(data, "inter_token_latency"),
        itl_ms=_record(data, "inter_chunk_latency", required=False),
        e2e_ms=_record(data, "request_latency"),
    )


def _guidellm_stat(metrics: dict[str, Any], name: str, scale: float = 1.0) -> Percentiles:
    stat = ((metrics.get(name) or {}).get("successful")) or {}
    if not stat:
        return Percentiles()
    percentiles = stat.get("percentiles") or {}

    def at(value: Any) -> float | None:
        return None if value is None else float(value) * scale

    return Percentiles(
        mean=at(stat.get("mean")),
        p50=at(percentiles.get("p50", stat.get("median"))),
        p90=at(percentiles.get("p90")),
        p99=at(percentiles.get("p99")),
    )


def _guidellm(benchmark: dict[str, Any], index: int) -> ServingMeasurement:
    field = f"benchmarks[{index}]"
    config = benchmark.get("config") or benchmark.get("args") or {}
    strategy = config.get("strategy") or {}
    kind = strategy.get("type_")
    metrics = benchmark.get("metrics")
    if not isinstance(metrics, dict):
        raise ServingResultError(f"{field}.metrics", "missing")
    if kind in ("concurrent", "synchronous"):
        mode, rate = LoadMode.CONCURRENCY, None
        concurrency = 1 if kind == "synchronous" else int(strategy.get("streams") or 1)
    elif kind in ("constant", "poisson", "throughput"):
        mode, concurrency = LoadMode.RATE, None
        rate = math.inf if kind == "throughput" else float(strategy.get("rate") or 0.0)
    else:
        raise ServingResultError(f"{field}.config.strategy.type_", f"unsupported {kind!r}")
    rps = _guidellm_stat(metrics, "requests_per_second").mean or 0.0
    completed = ((metrics.get("request_totals") or {}).get("successful")) or 0
    return ServingMeasurement(
        tool=ServingTool.GUIDELLM,
        mode=mode,
        request_rate=rate,
        concurrency=concurrency,
        completed=int(completed),
        duration_s=benchmark.get("duration"),
        request_throughput=rps,
        output_throughput=_guidellm_stat(metrics, "output_tokens_per_second").mean,
        mean_prompt_tokens=_guidellm_stat(metrics, "prompt_token_count").mean or 0.0,
        mean_output_tokens=_guidellm_stat(metrics, "output_token_count").mean or 0.0,
        ttft_ms=_guidellm_stat(metrics, "time_to_first_token_ms"),
        tpot_ms=_guidellm_stat(metrics, "inter_token_latency_ms"),
        itl_ms=Percentiles(),
        e2e_ms=_guidellm_stat(metrics, "request_latency", 1000.0),  # seconds in the file
    )


def parse_serving_result(tool: ServingTool, content: str) -> list[ServingMeasurement]:
    """The measurements in one result file of `tool` (GuideLLM: one per benchmark; the others:
    one)."""
    try:
        if tool is ServingTool.SGLANG:
            lines = [line for line in content.splitlines() if line.strip()]
            if not lines:
                raise ServingResultError("result", "empty file")
            data = json.loads(lines[-1])
        else:
            data = json.loads(content)
    except json.JSONDecodeError as error:
        raise ServingResultError("result", f"not JSON: {error.msg} at {error.pos}") from None
    if not isinstance(data, dict):
        raise ServingResultError("result", "must be a JSON object")
    if tool in (ServingTool.VLLM, ServingTool.SGLANG):
        found = [_vllm_like(data, tool)]
    elif tool in (ServingTool.GENAI_PERF, ServingTool.AIPERF):
        found = [_nvidia(data, tool)]
    else:
        benchmarks = data.get("benchmarks")
        if not isinstance(benchmarks, list) or not benchmarks:
            raise ServingResultError("benchmarks", "missing or empty")
        found = [_guidellm(b, i) for i, b in enumerate(benchmarks) if isinstance(b, dict)]
    for measurement in found:
        if measurement.mean_prompt_tokens < 1 or measurement.mean_output_tokens < 1:
            raise ServingResultError("result", "no prompt or output token counts in the file")
        if measurement.ttft_ms.p50 is None and measurement.ttft_ms.mean is None:
            raise ServingResultError("result", "no TTFT in the file")
        _within_bounds(measurement)
    return found


_LATENCY_BOUNDS_MS = {
    "ttft_ms": (False, 1e8),
    "e2e_ms": (False, 1e8),
    "tpot_ms": (True, 1e7),
    "itl_ms": (True, 1e7),
}
"""Per latency: whether 0 is possible (a token gap can be, a first token cannot) and the most a
run can report (1e8 ms: 28 hours; 1e7 ms between two tokens)."""


def _bounded(field: str, value: float | None, low: float, high: float, *, zero: bool) -> None:
    if value is None:
        return
    if value < low or (value == low and not zero) or value > high:
        side = ">=" if zero else ">"
        raise ServingResultError(
            field, f"{value:g} is out of bounds: must be {side} {low:g} and at most {high:g}"
        )


def _within_bounds(m: ServingMeasurement) -> None:
    """What a real run can report: positive durations and first-token times, no negative
    latency, rates and loads a serving replica can carry (a unit slip or a corrupted file
    otherwise, stored and replayed as if measured)."""
    _bounded("duration", m.duration_s, 0.0, 30 * 86_400.0, zero=False)
    _bounded("request_throughput", m.request_throughput, 0.0, 1e5, zero=False)
    _bounded("output_throughput", m.output_throughput, 0.0, 1e8, zero=True)
    if m.request_rate is not None and math.isfinite(m.request_rate):
        _bounded("request_rate", m.request_rate, 0.0, 1e6, zero=False)
    if m.concurrency is not None:
        _bounded("max_concurrency", m.concurrency, 1.0, 1e6, zero=True)
    _bounded("mean_prompt_tokens", m.mean_prompt_tokens, 1.0, 1e7, zero=True)
    _bounded("mean_output_tokens", m.mean_output_tokens, 1.0, 1e7, zero=True)
    for name, (zero, high) in _LATENCY_BOUNDS_MS.items():
        stats: Percentiles = getattr(m, name)
        for stat in ("mean", "p50", "p90", "p99"):
            _bounded(f"{name}.{stat}", getattr(stats, stat), 0.0, high, zero=zero)

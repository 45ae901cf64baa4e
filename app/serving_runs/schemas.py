"""`/v1/serving-runs`: what an upload gives and what the answer holds."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.formats.serving_results import ServingTool
from app.serving_runs.orm import ServingRunRow
from app.serving_runs.service import ServingUpload
from app.simulations.schemas import SchedulerSettings
from app.targets.schemas import TargetRequest

__all__ = ["ServingComparison", "ServingRunCreate", "ServingRunList", "ServingRunRead"]

_EXAMPLE_RESULT: dict[str, Any] = {
    "backend": "vllm",
    "model_id": "meta-llama/Llama-3.1-8B-Instruct",
    "num_prompts": 200,
    "request_rate": 4.0,
    "max_concurrency": None,
    "duration": 51.4,
    "completed": 200,
    "total_input_tokens": 200000,
    "total_output_tokens": 40000,
    "request_throughput": 3.89,
    "output_throughput": 778.5,
    "mean_ttft_ms": 48.2,
    "median_ttft_ms": 45.8,
    "p99_ttft_ms": 86.1,
    "mean_tpot_ms": 8.55,
    "median_tpot_ms": 8.54,
    "p99_tpot_ms": 9.88,
    "mean_itl_ms": 8.55,
    "median_itl_ms": 8.47,
    "p99_itl_ms": 11.8,
}


class ServingRunCreate(TargetRequest):
    """A serving benchmark's result file, with what it ran: model, GPU, layout, engine."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "tool": "vllm",
                    "model": "llama-3.1-8b",
                    "gpu": "h100-sxm5-80gb",
                    "engine": "vllm",
                    "result": _EXAMPLE_RESULT,
                }
            ]
        }
    )

    tool: Literal["vllm", "sglang", "genai-perf", "aiperf", "guidellm"] = Field(
        description=(
            "The tool that wrote `result`: `vllm` (`vllm bench serve --save-result`), `sglang` "
            "(`sglang.bench_serving --output-file`, JSON lines: give the text), `genai-perf` "
            "(profile_export_genai_perf.json), `aiperf` (profile_export_aiperf.json), `guidellm` "
            "(`guidellm benchmark --output-path *.json`, one comparison per benchmark)."
        )
    )
    result: dict[str, Any] | str = Field(
        description="The result file: its JSON object, or its text (SGLang's JSON lines)."
    )
    scheduler: SchedulerSettings = Field(
        default_factory=SchedulerSettings,
        description="The engine's scheduler settings in the run, as vLLM names them.",
    )

    def upload(self) -> ServingUpload:
        text = self.result if isinstance(self.result, str) else json.dumps(self.result)
        return ServingUpload(
            tool=ServingTool(self.tool),
            target=self.target_query(),
            scheduler=self.scheduler.given(),
            result=text,
        )


class ServingComparison(BaseModel):
    """One measurement of the file against the simulator at its load (signed errors: negative
    where the simulator is faster than the run)."""

    mode: str = Field(description="`rate` (open loop) or `concurrency` (closed loop).")
    request_rate: float | str | None = Field(description="Offered requests/s (`inf`: at once).")
    concurrency: int | None = Field(description="Users of a closed-loop run.")
    mean_prompt_tokens: float = Field(description="Mean prompt length of the run.")
    mean_output_tokens: float = Field(description="Mean output length of the run.")
    replayed_requests_per_s: float = Field(
        description="The Poisson rate simulated: the offered rate, else the run's throughput."
    )
    measured: dict[str, float | None] = Field(description="From the file (ms; requests/s).")
    simulated: dict[str, float] = Field(description="The simulator's, same keys.")
    error_pct: dict[str, float | None] = Field(description="simulated / measured - 1, percent.")
    saturated: bool = Field(description="The simulated replica could not keep up.")
    note: str | None = Field(description="How far the comparison is an approximation.")


class ServingRunRead(BaseModel):
    id: str = Field(description="Serving-run id.")
    created_at: datetime = Field(description="When it was uploaded.")
    tool: str = Field(description="The tool that wrote the file.")
    gpu: str = Field(description="Catalog GPU id.")
    model: str = Field(description="Catalog model id.")
    basis: dict[str, str] = Field(description="What timed the simulated steps, per op class.")
    comparisons: list[ServingComparison] = Field(description="One per measurement in the file.")

    @classmethod
    def of(cls, row: ServingRunRow) -> ServingRunRead:
        return cls(
            id=row.id,
            created_at=row.created_at,
            tool=row.tool,
            gpu=row.gpu_id,
            model=row.model_id,
            basis=row.validation["basis"],
            comparisons=[ServingComparison(**c) for c in row.validation["comparisons"]],
        )


class ServingRunList(BaseModel):
    items: list[ServingRunRead] = Field(description="Newest first.")

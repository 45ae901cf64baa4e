"""`/v1/plans/{id}/deployments/{rank}`: a planned candidate as launch arguments or a manifest."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from app.engine.serving import LAUNCH_ENGINES
from app.plans.schemas import LayoutRead

__all__ = [
    "MANIFEST_TARGETS",
    "TARGETS",
    "ArgumentSource",
    "DeploymentRead",
    "LaunchEngine",
    "PlannedLayout",
    "TargetName",
    "UnsupportedSetting",
    "one_of",
]


MANIFEST_TARGETS = ("kubernetes", "helm")
TARGETS: tuple[str, ...] = (*LAUNCH_ENGINES, *MANIFEST_TARGETS)
"""What a candidate renders as: each launchable engine's command (its policy's), a Kubernetes
manifest or Helm values."""


def one_of(names: tuple[str, ...]) -> dict[str, Any]:
    """A string field's constraints: exactly one of `names` (listed as the schema's enum)."""
    return {"pattern": f"^({'|'.join(names)})$", "json_schema_extra": {"enum": list(names)}}


TargetName = Annotated[str, Field(**one_of(TARGETS))]
LaunchEngine = Annotated[str, Field(**one_of(LAUNCH_ENGINES))]


class UnsupportedSetting(BaseModel):
    """A planned setting the target cannot express: it is not in the rendering."""

    setting: str = Field(description="The plan's field (`kv_dtype`, `ep`, `weight_dtype`, ...).")
    value: str = Field(description="Its planned value.")
    reason: str = Field(description="Why the target cannot express it, and what to do instead.")


class ArgumentSource(BaseModel):
    """The published argument list every rendered flag was checked against."""

    engine: str = Field(description="`vllm`, `sglang` or `trtllm`.")
    version: str = Field(description="The release line the list was read from.")
    title: str = Field(description="The source file.")
    url: str = Field(description="Where it was read (a commit of the engine's repository).")


class PlannedLayout(LayoutRead):
    """The candidate rendered, as the plan has it (per replica)."""

    max_num_seqs: int | None = Field(description="Sequences per data-parallel rank (null: any).")
    chunk_tokens: int | None = Field(description="Prefill chunk, tokens (null: any).")
    replicas: int = Field(description="Replicas the plan sized.")
    gpu_memory_utilization: float = Field(description="Share of GPU memory the engine may use.")


class DeploymentRead(BaseModel):
    """The launch of one planned candidate for a serving engine, or its Kubernetes manifest or
    Helm values. Settings the target cannot express are in `unsupported`, never dropped."""

    plan_id: str = Field(description="The plan.")
    rank: int = Field(description="The candidate's place in the plan's `plans` (0: cheapest).")
    target: TargetName = Field(description="What was rendered.")
    engine: str = Field(description="The serving engine launched (`vllm`, `sglang`, `trtllm`).")
    engine_version: str | None = Field(
        description="The engine version the plan's profile timed (the image tag's), null when "
        "the plan was not timed with this engine's profile."
    )
    model: str = Field(description="The checkpoint the engine loads (Hugging Face repository).")
    layout: PlannedLayout = Field(description="The candidate rendered.")
    argv: list[str] = Field(description="The engine's command line, one argument per item.")
    command: str = Field(description="The same, quoted for a POSIX shell.")
    files: dict[str, str] = Field(
        description="Files by name: the engine's options file (TensorRT-LLM), the manifest "
        "(`kubernetes`: `deployment.yaml`) or the values (`helm`: `values.yaml`)."
    )
    unsupported: list[UnsupportedSetting] = Field(
        description="Planned settings the target cannot express, with the reasons."
    )
    notes: list[str] = Field(description="How settings were translated, and caveats.")
    arguments: ArgumentSource = Field(
        description="The published argument list each flag was checked against."
    )

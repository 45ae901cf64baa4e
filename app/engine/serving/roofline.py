"""The roofline as an engine: Ridgeline's own scheduler (256 sequences, 2,048-token chunks,
chunked prefill on) with steps timed by the datasheet roofline at the GPU's efficiency. It has
no versions, no CUDA-graph padding and no launch of its own (its plans launch as vLLM), and it
simulates multi-step scheduling and a receive interval as asked (any number of steps). Its KV
cache is the engines' `auto`: the checkpoint's declared scheme, else the model's 16-bit compute
dtype."""

from __future__ import annotations

from app.engine.serving.policy import EngineName, EnginePolicy

__all__ = ["RooflinePolicy"]


class RooflinePolicy(EnginePolicy):
    name = EngineName.ROOFLINE
    title = "the roofline"
    profiled = False
    launched_as = EngineName.VLLM

    def multi_step_refusal(self, version: str | None) -> str | None:
        return None

    def recv_interval_refusal(self, version: str | None) -> str | None:
        return None

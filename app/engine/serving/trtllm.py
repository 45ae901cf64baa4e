"""TensorRT-LLM (NVIDIA/TensorRT-LLM) served by `trtllm-serve`, as its 1.0 defaults set it
(`BuildConfig`, the PyTorch backend's `LlmArgs`): `max_num_tokens` 8192 and `max_batch_size`
2048; chunked prefill off, whole prompts joining the running decodes in one step
(`UnchunkedPolicy.MIXED`); CUDA-graph padding off by default, so a batch runs at its own size;
no multi-step scheduling. Its KV cache (`KvCacheConfig.dtype` "auto", tensorrt_llm/llmapi/
llm_args.py) takes the checkpoint's `QuantConfig.kv_cache_quant_algo` (FP8 in NVIDIA's FP8 and
NVFP4 exports), else the model's dtype. Its overhead is an assumption until calibrated.

Releases modelled: 0.1.0 to the 1.3 series (aiconfigurator-core 0.12.0 holds measurements of
1.0.0, 1.3.0rc20 and 1.3.0rc23).
"""

from __future__ import annotations

from app.engine.serving.policy import DefaultOverhead, EngineName, EnginePolicy
from app.engine.simulation.config import SchedulerConfig, UnchunkedPolicy
from app.engine.specs import GpuSpec

__all__ = ["TrtllmPolicy"]


class TrtllmPolicy(EnginePolicy):
    name = EngineName.TRTLLM
    title = "TensorRT-LLM"
    first_release = "0.1.0"
    newest_release = "1.3.0rc23"
    image = "nvcr.io/nvidia/tensorrt-llm/release"
    overhead = DefaultOverhead(
        step_ms=0.5,
        per_sequence_ms=0.003,
        prefill_per_layer_ms=0.0,
        source=(
            "Assumed, not measured: TensorRT-LLM's C++ runtime, 0.5 ms per step plus 3 us per "
            "running sequence. Calibrate with POST /v1/serving-runs."
        ),
    )

    def scheduler_defaults(
        self, version: str | None, gpu: GpuSpec, context_tokens: int
    ) -> SchedulerConfig:
        return SchedulerConfig(
            max_num_seqs=2048,
            max_num_batched_tokens=8192,
            enable_chunked_prefill=False,
            unchunked_policy=UnchunkedPolicy.MIXED,
        )

    def image_tag(self, version: str | None) -> str:
        return "latest" if version is None else version

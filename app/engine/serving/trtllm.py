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

from app.engine.dtypes import DType
from app.engine.serving.launch import LaunchBuilder, PlannedReplica, ServedModel
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
    silicon_backend = "trtllm"
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

    def fill_launch(self, b: LaunchBuilder, model: ServedModel, replica: PlannedReplica) -> None:
        """`trtllm-serve` with its LLM API options file: attention data parallelism
        (`enable_attention_dp`) runs attention at tp 1 on each of `--tp_size` ranks, so a plan
        with dp > 1 and tp > 1 cannot be expressed."""
        b.argv.append(model.path)
        b.flag("--host", "0.0.0.0")
        b.flag("--port", b.args.port)
        b.flag("--backend", "pytorch")
        ranks = replica.tp
        if replica.dp > 1:
            if replica.tp == 1:
                ranks = replica.dp
                b.options["enable_attention_dp"] = True
            else:
                b.cannot(
                    "dp",
                    replica.dp,
                    "TensorRT-LLM's attention data parallelism runs attention at tp 1 on every "
                    f"rank: tp {replica.tp} x dp {replica.dp} has no equivalent",
                )
        b.flag("--tp_size", ranks)
        if replica.pp > 1:
            b.flag("--pp_size", replica.pp)
        if replica.ep > 1:
            b.flag("--ep_size", replica.ep)
        b.quantisation(model, replica, "--quantization")  # no such flag: always reported
        options = b.args.options_file
        allowed = options.choices["kv_cache_config.dtype"] if options is not None else ()
        kv = b.kv_value(model, replica, allowed, {DType.FP8: "fp8"})
        if kv is not None and kv != "auto":
            b.options["kv_cache_config"] = {"dtype": kv}
        b.flag("--kv_cache_free_gpu_memory_fraction", replica.gpu_memory_utilization)
        b.notes.append(
            "--kv_cache_free_gpu_memory_fraction is a share of the memory left after the "
            "weights, not of the whole GPU as the plan's gpu_memory_utilization: the same "
            "number gives TensorRT-LLM a larger KV cache; lower it to match the plan's"
        )
        if replica.max_num_seqs is not None:
            b.flag("--max_batch_size", replica.max_num_seqs)
        else:
            b.notes.append("max_num_seqs: any; TensorRT-LLM's default max_batch_size applies")
        if replica.chunk_tokens is not None:
            b.flag("--max_num_tokens", replica.chunk_tokens)
            b.flag("--enable_chunked_prefill")
        else:
            b.notes.append("chunk_tokens: any; TensorRT-LLM's default max_num_tokens applies")

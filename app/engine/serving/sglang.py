"""SGLang (sgl-project/sglang): scheduler defaults and CUDA-graph sizes, as 0.5.3's
`ServerArgs` (python/sglang/srt/server_args.py) sets them.

- `chunked_prefill_size` by GPU memory: 2048 below 35 GB, 4096 below 60 GB, 8192 below 160 GB,
  16384 from 160 GB (`_handle_gpu_memory_settings`); `max_running_requests` unset resolves to
  at least 2048 (the request pool's lower clamp, below the KV cache's half), and a step holds
  at most the chunk.
- CUDA graphs at `[1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) + range(512,
  max + 1, 32)` with `cuda_graph_max_bs` 256 on 80-160 GB GPUs below tp 4 and 512 from tp 4.
- The KV cache (`--kv-cache-dtype auto`, `ModelRunner.configure_kv_cache_dtype` in
  python/sglang/srt/model_executor/model_runner.py): fp8 (e4m3) where the checkpoint's
  quantisation config declares `kv_cache_quant_algo` FP8, else the model's dtype (bf16 beside
  fp8 and fp8-block weights).
- No multi-step scheduling; its overlap scheduler hides most CPU work (the overhead below is an
  assumption until calibrated).

Releases modelled: 0.1.0 to the 0.5 series (aiconfigurator-core 0.12.0 holds measurements of
0.5.6.post2, 0.5.10 and 0.5.14).
"""

from __future__ import annotations

from packaging.version import Version

from app.engine.dtypes import DType
from app.engine.serving.launch import LaunchBuilder, PlannedReplica, ServedModel
from app.engine.serving.policy import DefaultOverhead, EngineName, EnginePolicy, release
from app.engine.simulation.config import SchedulerConfig
from app.engine.specs import GpuSpec
from app.engine.units import GB

__all__ = ["SglangPolicy"]

RECV_INTERVAL_RELEASE = "0.5.0"
"""The first release with --scheduler-recv-interval (sgl-project/sglang#8947, August 2025)."""

_GRAPHS = (1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, 513, 32))


class SglangPolicy(EnginePolicy):
    name = EngineName.SGLANG
    title = "SGLang"
    first_release = "0.1.0"
    newest_release = "0.5.14"
    image = "lmsysorg/sglang"
    silicon_backend = "sglang"
    overhead = DefaultOverhead(
        step_ms=0.8,
        per_sequence_ms=0.004,
        prefill_per_layer_ms=0.0,
        source=(
            "Assumed, not measured: SGLang's overlap scheduler hides most CPU work; 0.8 ms per "
            "step plus 4 us per running sequence (aiconfigurator-core adds no prefill dispatch "
            "cost for SGLang). Calibrate with POST /v1/serving-runs."
        ),
    )

    def scheduler_defaults(
        self, version: str | None, gpu: GpuSpec, context_tokens: int
    ) -> SchedulerConfig:
        memory = gpu.memory_bytes
        if memory < 35 * GB:
            chunk = 2048
        elif memory < 60 * GB:
            chunk = 4096
        elif memory < 160 * GB:
            chunk = 8192
        else:
            chunk = 16384
        return SchedulerConfig(max_num_seqs=min(2048, chunk), max_num_batched_tokens=chunk)

    def recv_interval_refusal(self, version: str | None) -> str | None:
        found = None if version is None else release(version)
        if found is None or found >= Version(RECV_INTERVAL_RELEASE):
            return None
        return (
            f"SGLang {version} predates --scheduler-recv-interval (SGLang "
            f"{RECV_INTERVAL_RELEASE}): leave scheduler_recv_interval at 1 or name a later release"
        )

    def graph_sizes(self, version: str | None, tp: int) -> tuple[int, ...]:
        largest = 512 if tp >= 4 else 256
        return tuple(size for size in _GRAPHS if size <= largest)

    def fill_launch(self, b: LaunchBuilder, model: ServedModel, replica: PlannedReplica) -> None:
        """`python -m sglang.launch_server`: with attention data parallelism
        (`--enable-dp-attention`, MoE models) `--tp-size` counts all tp x dp GPUs and the
        scheduler divides `--max-running-requests` and `--chunked-prefill-size` among the
        `--dp-size` ranks, so both are rendered times dp."""
        b.flag("--model-path", model.path)
        b.flag("--served-model-name", model.name)
        b.flag("--host", "0.0.0.0")
        b.flag("--port", b.args.port)
        dp_attention = replica.dp > 1 and model.moe
        # Under --enable-dp-attention the scheduler splits these among the dp ranks.
        per_server = replica.dp if dp_attention else 1
        b.flag("--tp-size", replica.tp * per_server)
        if replica.pp > 1:
            b.flag("--pp-size", replica.pp)
        if replica.dp > 1:
            b.flag("--dp-size", replica.dp)
            if dp_attention:
                b.flag("--enable-dp-attention")
            else:
                b.notes.append(
                    f"--dp-size {replica.dp} on a dense model runs {replica.dp} engines of tp "
                    f"{replica.tp} behind SGLang's router, each with the scheduler settings below"
                )
        if replica.ep > 1:
            b.flag("--ep-size", replica.ep)
        b.quantisation(model, replica, "--quantization")
        kv = b.kv_value(
            model,
            replica,
            b.args.choices["--kv-cache-dtype"],
            {DType.FP8: "fp8_e4m3", DType.BF16: "bf16"},
        )
        if kv is not None:
            b.flag("--kv-cache-dtype", kv)
        b.flag("--mem-fraction-static", replica.gpu_memory_utilization)
        b.notes.append(
            "--mem-fraction-static is the share of GPU memory for weights and the KV pool, as "
            "gpu_memory_utilization is in the plan"
        )
        if replica.max_num_seqs is not None:
            b.flag("--max-running-requests", replica.max_num_seqs * per_server)
        else:
            b.notes.append("max_num_seqs: any; SGLang's default max_running_requests applies")
        if replica.chunk_tokens is not None:
            b.flag("--chunked-prefill-size", replica.chunk_tokens * per_server)
        else:
            b.notes.append("chunk_tokens: any; SGLang's default chunked_prefill_size applies")

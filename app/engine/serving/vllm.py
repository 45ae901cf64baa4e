"""vLLM (vllm-project/vllm): its scheduler defaults, CUDA-graph sizes and multi-step scheduling
by release.

- V0, the default engine before 0.8 (`vllm/engine/arg_utils.py`, `vllm/config.py` of 0.5-0.7):
  `max_num_seqs` 256; chunked prefill off, so a step prefills whole prompts only and the
  running decodes wait (`UnchunkedPolicy.PREFILL_FIRST`), the token budget
  `max(max_model_len, 2048)`; `vllm serve` turns chunked prefill on for models of more than
  32K context, with a 512-token budget (`SchedulerConfig`'s choice "between ITL and TTFT").
  CUDA graphs at `[1, 2, 4] + range(8, 257, 8)` (`_BATCH_SIZES_TO_CAPTURE`).
- V1, the default from 0.8 (`EngineArgs._set_default_args` of 0.10-0.11): chunked prefill
  always on; for `vllm serve` on GPUs of at least 70 GiB other than the A100,
  `max_num_batched_tokens` 8192 and `max_num_seqs` 1024, elsewhere 2048 and 256. CUDA graphs
  at `[1, 2, 4] + range(8, 513, 8)` (`cuda_graph_sizes`, vllm/config/scheduler.py).
- Multi-step scheduling (`--num-scheduler-steps`) is V0's: added by vllm-project/vllm#7000
  (first released in 0.6.0), removed with V0's multi-step code by vllm-project/vllm#22138
  (after 0.10.0). From 0.8 it makes vLLM fall back to V0 (`_is_v1_supported_oracle`).
- The KV cache (`--kv-cache-dtype auto`, `CacheConfig.cache_dtype` in vllm/config/cache.py:
  "If auto, will use model data type"): bf16 for bf16, fp8 and fp8-block weights alike. From
  0.14.0 `auto` takes the format a checkpoint's quantisation config declares (ModelOpt's
  `kv_cache_quant_algo` in hf_quant_config.json: vllm-project/vllm#30785, merged 2025-12-16;
  Ridgeline applies it from the first minor release after the merge).
- The overhead outside the kernels. No per-layer dispatch before the first token: aiconfigurator-
  core 0.12.0's vLLM backend adds 0.8 ms a layer to every request's TTFT
  (`_prefill_dispatch_overhead_ms`, "recalibrated" on its corpus of serving runs, whose TTFTs
  also hold the queueing and chunking Ridgeline's simulator models itself), but V1's prefill
  runs in piecewise CUDA graphs for steps of up to `min(2 x max_num_seqs, 512)` tokens, only
  attention between the pieces (vLLM's CUDA-graphs design note, `set_cudagraph_sizes` in
  vllm/config/compilation.py), and launches a longer step's kernels ahead of the GPU, so the
  CPU's dispatch hides under the kernels. Published single-request TTFTs of vLLM leave no room
  for it: Qwen3-30B-A3B on an A100 at 128 tokens measured 35.7 ms where its kernels alone take
  39.2 ms and 0.8 ms a layer would add 38.4 ms more (tenstorrent/tt-inference-server#340,
  docs/validation). The step and per-sequence costs are assumptions until calibrated.

Releases modelled: 0.1.0 to the 0.26 series (aiconfigurator-core 0.12.0 holds measurements of
0.14.0, 0.20.0, 0.24.0 and 0.26.0).
"""

from __future__ import annotations

from packaging.version import Version

from app.engine.dtypes import DType
from app.engine.serving.launch import LaunchBuilder, PlannedReplica, ServedModel
from app.engine.serving.policy import DefaultOverhead, EngineName, EnginePolicy, release
from app.engine.simulation.config import SchedulerConfig, UnchunkedPolicy
from app.engine.specs import GpuSpec
from app.engine.units import GIB

__all__ = ["MULTI_STEP_RELEASES", "VllmPolicy"]

MULTI_STEP_RELEASES = ("0.6.0", "0.10.0")
"""The first and last vLLM releases with `--num-scheduler-steps` (see the module docstring)."""
CHECKPOINT_KV = Version("0.14.0")
"""The first release (by Ridgeline's reading) whose `--kv-cache-dtype auto` follows the
checkpoint's declared KV scheme (vllm-project/vllm#30785)."""
V1_DEFAULT = Version("0.8.0")
"""The first release whose default engine is V1."""
LONG_CONTEXT_TOKENS = 32 * 1024
"""Above this context `vllm serve` of V0 turns chunked prefill on."""
_V0_GRAPHS = (1, 2, 4, *range(8, 257, 8))
_V1_GRAPHS = (1, 2, 4, *range(8, 513, 8))


class VllmPolicy(EnginePolicy):
    name = EngineName.VLLM
    title = "vLLM"
    first_release = "0.1.0"
    newest_release = "0.26.0"
    image = "vllm/vllm-openai"
    helm_chart = True
    silicon_backend = "vllm"
    bundled_default = True
    overhead = DefaultOverhead(
        step_ms=1.0,
        per_sequence_ms=0.005,
        prefill_per_layer_ms=0.0,
        source=(
            "prefill_per_layer_ms 0: vLLM's V1 engine runs prefill steps of up to 512 tokens "
            "as piecewise CUDA graphs and launches longer ones ahead of the GPU, and published "
            "single-request TTFTs leave no room for aiconfigurator-core 0.12.0's 0.8 ms per "
            "layer (_prefill_dispatch_overhead_ms; Qwen3-30B-A3B, A100, 128 tokens: 35.7 ms "
            "measured, 39.2 ms of kernels, 77.6 ms with it; tenstorrent/tt-inference-server"
            "#340). step_ms and per_sequence_ms assumed, not measured: about 1 ms of "
            "scheduling, input preparation and sampling per CUDA-graph step, growing 5 us per "
            "running sequence. Calibrate to your deployment with POST /v1/serving-runs."
        ),
    )

    @staticmethod
    def is_v0(version: str | None) -> bool:
        """Whether `version` runs the V0 engine by default (a release before 0.8)."""
        found = None if version is None else release(version)
        return found is not None and found < V1_DEFAULT

    def reads_checkpoint_kv(self, version: str | None) -> bool:
        found = None if version is None else release(version)
        return found is None or found >= CHECKPOINT_KV

    def scheduler_defaults(
        self, version: str | None, gpu: GpuSpec, context_tokens: int
    ) -> SchedulerConfig:
        if self.is_v0(version):
            if context_tokens > LONG_CONTEXT_TOKENS:
                return SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=512)
            return SchedulerConfig(
                max_num_seqs=256,
                max_num_batched_tokens=max(context_tokens, 2048),
                enable_chunked_prefill=False,
                unchunked_policy=UnchunkedPolicy.PREFILL_FIRST,
            )
        if gpu.memory_bytes >= 70 * GIB and "a100" not in gpu.id.lower():
            return SchedulerConfig(max_num_seqs=1024, max_num_batched_tokens=8192)
        return SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=2048)

    def multi_step_refusal(self, version: str | None) -> str | None:
        first, last = (Version(v) for v in MULTI_STEP_RELEASES)
        found = None if version is None else release(version)
        span = f"vLLM {first} to {last}"
        if found is not None and first <= found <= last:
            return None
        shown = f"vLLM {version}" if version is not None else "vLLM"
        if found is not None and found < first:
            why = "predates multi-step scheduling"
        else:
            why = "runs vLLM's V1 engine, which has no multi-step scheduling"
        return (
            f"{shown} {why}: --num-scheduler-steps was the V0 engine's, in {span}; leave it "
            "at 1 or name such a version (engine: vllm@0.6.0) or the roofline"
        )

    def graph_sizes(self, version: str | None, tp: int) -> tuple[int, ...]:
        return _V0_GRAPHS if self.is_v0(version) else _V1_GRAPHS

    def fill_launch(self, b: LaunchBuilder, model: ServedModel, replica: PlannedReplica) -> None:
        """`vllm serve`: `--tensor-parallel-size tp --data-parallel-size dp
        --pipeline-parallel-size pp`, and `--enable-expert-parallel` for ep = tp x dp (vLLM's
        expert-parallel group is the tp x dp GPUs). `--max-num-seqs` and
        `--max-num-batched-tokens` are per data-parallel engine, as in the plan."""
        b.argv.append(model.path)
        b.flag("--served-model-name", model.name)
        b.flag("--tensor-parallel-size", replica.tp)
        if replica.pp > 1:
            b.flag("--pipeline-parallel-size", replica.pp)
        if replica.dp > 1:
            b.flag("--data-parallel-size", replica.dp)
        if replica.ep > 1:
            if model.moe and replica.ep == replica.tp * replica.dp:
                b.flag("--enable-expert-parallel")
            else:
                b.cannot(
                    "ep",
                    replica.ep,
                    "vLLM's expert parallelism spans all tp x dp GPUs "
                    f"({replica.tp * replica.dp}) of an MoE model",
                )
        b.quantisation(model, replica, "--quantization")
        kv = b.kv_value(model, replica, b.args.choices["--kv-cache-dtype"], {DType.FP8: "fp8"})
        if kv is not None:
            b.flag("--kv-cache-dtype", kv)
        b.flag("--gpu-memory-utilization", replica.gpu_memory_utilization)
        if replica.max_num_seqs is not None:
            b.flag("--max-num-seqs", replica.max_num_seqs)
        else:
            b.notes.append("max_num_seqs: any; vLLM's default applies")
        if replica.chunk_tokens is not None:
            b.flag("--enable-chunked-prefill")
            b.flag("--max-num-batched-tokens", replica.chunk_tokens)
        else:
            b.notes.append("chunk_tokens: any; vLLM's default max_num_batched_tokens applies")

"""Each serving engine's scheduler defaults: what a simulation runs when the request leaves a
setting out, so that the answer is the engine's as a team launches it.

- vLLM V1 (0.10-0.11, `EngineArgs._set_default_args` in vllm/engine/arg_utils.py): chunked
  prefill always on; for `vllm serve` on GPUs of at least 70 GiB other than A100,
  `max_num_batched_tokens` 8192 and `max_num_seqs` 1024, elsewhere 2048 and 256.
- SGLang 0.5.3 (`ServerArgs._handle_gpu_memory_settings` in sglang/srt/server_args.py):
  `chunked_prefill_size` by GPU memory, 2048 below 35 GB, 4096 below 60 GB, 8192 below 160 GB,
  16384 from 160 GB; `max_running_requests` unset resolves to at least 2048 (the request pool's
  lower clamp, below the KV cache's half).
- TensorRT-LLM (1.0, `BuildConfig` / `trtllm-serve`): `max_num_tokens` 8192, `max_batch_size`
  2048, chunked prefill off: whole prompts join the running decodes in one step.
- The roofline (no engine named) keeps Ridgeline's own defaults: 256 sequences, 2048-token
  chunks.

Multi-step scheduling (`SchedulerConfig.num_scheduler_steps` above 1) is vLLM V0's
`--num-scheduler-steps`: added by vllm-project/vllm#7000 (August 2024, first released in 0.6.0),
removed with V0's multi-step code by vllm-project/vllm#22138 (August 2025, after 0.10.0). From
0.8 the V1 engine is the default and the flag makes vLLM fall back to V0 (`_is_v1_supported_oracle`
in vllm/engine/arg_utils.py). V1 itself, SGLang and TensorRT-LLM have no such setting; the roofline
(no engine named) simulates it as asked.
"""

from __future__ import annotations

import re

from app.engine.simulation.config import SchedulerConfig, UnchunkedPolicy
from app.engine.specs import GpuSpec
from app.engine.units import GB, GIB

__all__ = ["MULTI_STEP_VLLM_VERSIONS", "engine_scheduler", "multi_step_refusal"]

MULTI_STEP_VLLM_VERSIONS = ((0, 6, 0), (0, 10, 0))
"""The first and last vLLM releases with `--num-scheduler-steps` (see the module docstring)."""
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def engine_scheduler(engine: str | None, gpu: GpuSpec) -> SchedulerConfig:
    """The scheduler `engine` (`vllm`, `sglang`, `trtllm`, optionally `@version`; None: the
    roofline) runs on `gpu` when nothing is set."""
    name = (engine or "").split("@", 1)[0]
    memory = gpu.memory_bytes
    if name == "vllm":
        large = memory >= 70 * GIB and "a100" not in gpu.id.lower()
        if large:
            return SchedulerConfig(max_num_seqs=1024, max_num_batched_tokens=8192)
        return SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=2048)
    if name == "sglang":
        if memory < 35 * GB:
            chunk = 2048
        elif memory < 60 * GB:
            chunk = 4096
        elif memory < 160 * GB:
            chunk = 8192
        else:
            chunk = 16384
        return SchedulerConfig(max_num_seqs=min(2048, chunk), max_num_batched_tokens=chunk)
    if name == "trtllm":
        return SchedulerConfig(
            max_num_seqs=2048,
            max_num_batched_tokens=8192,
            enable_chunked_prefill=False,
            unchunked_policy=UnchunkedPolicy.MIXED,
        )
    return SchedulerConfig()


def multi_step_refusal(engine: str | None) -> str | None:
    """Why `engine` (as `engine_scheduler` takes it) cannot run more than one scheduler step
    per decision, or None when it can: the roofline, and vLLM 0.6.0 to 0.10.0 (V0)."""
    if not engine:
        return None
    name, _, version = engine.partition("@")
    first, last = MULTI_STEP_VLLM_VERSIONS
    span = f"{'.'.join(map(str, first))} to {'.'.join(map(str, last))}"
    if name == "vllm":
        match = _VERSION.match(version)
        numbers = tuple(int(part or 0) for part in match.groups()) if match else None
        if numbers is not None and first <= numbers <= last:
            return None
        if numbers is not None and numbers < first:
            why = "predates multi-step scheduling"
        else:
            why = "runs vLLM's V1 engine, which has no multi-step scheduling"
        return (
            f"{engine} {why}: --num-scheduler-steps was the V0 engine's, in vLLM {span}; leave "
            "it at 1 or time the steps with a profile of such a version or the roofline"
        )
    return (
        f"{engine} has no multi-step scheduling (vLLM V0's --num-scheduler-steps, vLLM {span}); "
        "leave it at 1 or time the steps with the roofline"
    )

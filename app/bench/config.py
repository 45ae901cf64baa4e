"""What one run measures: the architecture, the device and format, and the points to time.

Torch-free: the command line builds a `BenchConfig`, `plan_points` lists the points in the order
they run (cheapest first within each phase, so an out-of-memory point comes late and the progress
bar moves steadily).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.dtypes import DType
from app.engine.units import MIB
from app.formats.run_document import DeviceKind, Phase, RunModelSpec

__all__ = [
    "BENCH_DTYPES",
    "DEFAULT_COPY_BYTES",
    "DEFAULT_MATMUL_SIZE",
    "MIN_POINT_WARMUP",
    "BenchConfig",
    "PointPlan",
    "plan_points",
]

BENCH_DTYPES: tuple[DType, ...] = (DType.BF16, DType.FP16, DType.FP32)
"""Formats the job runs in: weights, activations and KV cache all in one of these."""

# Large enough to run far past launch overhead and out of cache: 8192^3 is about 1.1 TFLOP and a
# 1 GiB copy is ~17x an H200's 60 MB L2. On a CPU the same would take minutes, so smaller.
DEFAULT_MATMUL_SIZE: dict[DeviceKind, int] = {DeviceKind.CUDA: 8192, DeviceKind.CPU: 1024}
DEFAULT_COPY_BYTES: dict[DeviceKind, int] = {DeviceKind.CUDA: 1024 * MIB, DeviceKind.CPU: 64 * MIB}
MIN_POINT_WARMUP = 1


@dataclass(frozen=True, slots=True)
class PointPlan:
    """One point to time: a prefill of `batch_size` prompts of `prompt_tokens`, or one decode
    step of `batch_size` sequences over `context_tokens` of KV cache each."""

    phase: Phase
    batch_size: int
    prompt_tokens: int | None = None
    context_tokens: int | None = None

    @property
    def label(self) -> str:
        """Short human form for the progress bar and logs."""
        if self.phase is Phase.PREFILL:
            return f"prefill n={self.prompt_tokens} B={self.batch_size}"
        return f"decode c={self.context_tokens} B={self.batch_size}"


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Everything a run needs besides the device itself. Lengths are tokens per sequence."""

    model: RunModelSpec
    device: DeviceKind
    dtype: DType
    prompt_lens: tuple[int, ...]
    prefill_batches: tuple[int, ...]
    decode_batches: tuple[int, ...]
    kv_lens: tuple[int, ...]
    repeats: int
    warmup: int
    seed: int = 0
    matmul_size: int = 1024
    copy_bytes: int = 64 * MIB
    cuda_graphs: bool = True
    """On CUDA, capture each point once as a CUDA graph and time its replays (as serving engines
    run decode steps), so the host's kernel-launch overhead is not timed; False: run eagerly."""

    def __post_init__(self) -> None:
        if self.dtype not in BENCH_DTYPES:
            supported = ", ".join(BENCH_DTYPES)
            raise ValueError(f"dtype: the job runs {supported}, not {self.dtype}")
        for name in ("prompt_lens", "prefill_batches", "decode_batches", "kv_lens"):
            values: tuple[int, ...] = getattr(self, name)
            if any(value < 1 for value in values):
                raise ValueError(f"{name}: every value must be at least 1, got {list(values)}")
        limit = self.model.max_context_tokens
        for name in ("prompt_lens", "kv_lens"):
            too_long = [value for value in getattr(self, name) if value > limit]
            if too_long:
                raise ValueError(
                    f"{name}: {too_long} exceed the model's max_context_tokens {limit}"
                )
        if not (self.prompt_lens or (self.decode_batches and self.kv_lens)):
            raise ValueError(
                "prompt_lens: nothing to measure (no prompt lengths, no decode points)"
            )
        if self.repeats < 1:
            raise ValueError(f"repeats: must be at least 1, got {self.repeats}")
        if self.warmup < 0:
            raise ValueError(f"warmup: must not be negative, got {self.warmup}")
        if self.matmul_size < 1 or self.copy_bytes < 1:
            raise ValueError("matmul_size, copy_bytes: must be positive")

    @property
    def point_warmup(self) -> int:
        """Untimed runs before each point's timed ones: `warmup`, and never fewer than one, so
        that no timed run pays a first use (kernel selection and loading, cuBLAS workspaces,
        the allocator's growth, a CUDA graph's upload)."""
        return max(self.warmup, MIN_POINT_WARMUP)

    @property
    def max_tokens(self) -> int:
        """The longest sequence any point needs (rotary tables are built this long)."""
        return max((*self.prompt_lens, *self.kv_lens, 1))


def plan_points(config: BenchConfig) -> list[PointPlan]:
    """Every point of the run, prefill before decode, each phase by growing size; duplicates in
    the requested lists collapse."""
    prefill = [
        PointPlan(Phase.PREFILL, batch_size=batch, prompt_tokens=length)
        for batch in sorted(set(config.prefill_batches))
        for length in sorted(set(config.prompt_lens))
    ]
    decode = [
        PointPlan(Phase.DECODE, batch_size=batch, context_tokens=length)
        for length in sorted(set(config.kv_lens))
        for batch in sorted(set(config.decode_batches))
    ]
    decode.sort(key=lambda plan: (plan.batch_size * (plan.context_tokens or 0), plan.batch_size))
    return prefill + decode

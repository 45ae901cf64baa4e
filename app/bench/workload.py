"""The measurements themselves, in PyTorch: microbenchmarks, prefill passes, decode steps.

`TorchWorkload` is the job's implementation of `app.bench.runner.Workload`. Everything runs under
`torch.inference_mode()`. Each point allocates its inputs (and, at decode, its KV cache) inside
`measure` and drops them on return, so `release` can give the memory back before the next point.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from app.bench.attention import AttentionKernel, choose_kernel
from app.bench.config import BenchConfig, PointPlan
from app.bench.device import TORCH_DTYPES, release_memory, timer_for, torch_device
from app.bench.environment import collect_environment
from app.bench.model import Decoder
from app.bench.schema import AttentionBackend, Environment, Microbenchmarks, Phase
from app.bench.timing import TimingStats, measure

__all__ = ["TorchWorkload"]


class TorchWorkload:
    """Measures `config` on its device. `prepare` builds the model; call it before `measure`."""

    def __init__(self, config: BenchConfig) -> None:
        self.config = config
        self.device = torch_device(config.device)
        self.dtype = TORCH_DTYPES[config.dtype]
        self._timer = timer_for(config.device)
        self._generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self._kernel: AttentionKernel | None = None
        self._decoder: Decoder | None = None

    @property
    def attention_backend(self) -> AttentionBackend | None:
        return None if self._kernel is None else self._kernel.name

    def environment(self) -> Environment:
        return collect_environment(self.config.device)

    def prepare(self) -> None:
        """Choose the attention kernel and allocate the weights (once)."""
        spec = self.config.model
        self._kernel = choose_kernel(
            self.device, self.dtype, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim
        )
        with torch.inference_mode():
            self._decoder = Decoder(
                spec,
                device=self.device,
                dtype=self.dtype,
                kernel=self._kernel,
                max_positions=self.config.max_tokens,
                generator=self._generator,
            )

    def microbenchmarks(self) -> Microbenchmarks:
        """Dense matmul rate (2*m*n*k FLOP per product) and copy rate (read + write bytes), each
        the median of the run's repeats after at least one warm-up (the first product pays
        the BLAS library's set-up)."""
        size = self.config.matmul_size
        with torch.inference_mode():
            matmul = self._time_matmul(size)
            release_memory(self.config.device)
            copied_bytes, copy = self._time_copy(self.config.copy_bytes)
            release_memory(self.config.device)
        return Microbenchmarks(
            matmul_flops_per_s=2 * size**3 / (matmul.median_ms / 1e3),
            matmul_shape=(size, size, size),
            copy_bytes_per_s=2 * copied_bytes / (copy.median_ms / 1e3),
            copy_bytes=copied_bytes,
        )

    def _time_matmul(self, size: int) -> TimingStats:
        left = self._random((size, size))
        right = self._random((size, size))
        product = torch.empty((size, size), device=self.device, dtype=self.dtype)
        return self._time(lambda: torch.mm(left, right, out=product), min_warmup=1)

    def _time_copy(self, size_bytes: int) -> tuple[int, TimingStats]:
        """The bytes actually copied (whole elements) and the copy's timing."""
        element_bytes = torch.empty((), dtype=self.dtype).element_size()
        source = self._random((size_bytes // element_bytes,))
        target = torch.empty_like(source)
        stats = self._time(lambda: target.copy_(source), min_warmup=1)
        return source.numel() * element_bytes, stats

    def measure(self, point: PointPlan) -> TimingStats:
        """Time one prefill pass or one decode step of `point` (warm-up, then repeats)."""
        decoder = self._require_decoder()
        with torch.inference_mode():
            if point.phase is Phase.PREFILL:
                prompts = decoder.random_tokens(point.batch_size, point.prompt_tokens or 0)
                return self._time(lambda: decoder.prefill(prompts))
            cache = decoder.new_kv_cache(point.batch_size, point.context_tokens or 0)
            new_tokens = decoder.random_tokens(point.batch_size, 1)
            return self._time(lambda: decoder.decode_step(new_tokens, cache))

    def release(self) -> None:
        release_memory(self.config.device)

    def _require_decoder(self) -> Decoder:
        if self._decoder is None:
            raise RuntimeError("TorchWorkload.measure before prepare: no model built")
        return self._decoder

    def _random(self, shape: tuple[int, ...]) -> torch.Tensor:
        tensor = torch.empty(shape, device=self.device, dtype=self.dtype)
        return tensor.normal_(generator=self._generator)

    def _time(self, operation: Callable[[], object], *, min_warmup: int = 0) -> TimingStats:
        warmup = max(self.config.warmup, min_warmup)
        return measure(operation, self._timer, repeats=self.config.repeats, warmup=warmup)

"""The measurements themselves, in PyTorch: microbenchmarks, prefill passes, decode steps.

`TorchWorkload` is the job's implementation of `app.bench.runner.Workload`. Everything runs under
`torch.inference_mode()`. Each point allocates its inputs (and, at decode, its KV cache) inside
`measure` and drops them on return, so `release` can give the memory back before the next point.

What is timed is the forward pass alone: weights, inputs and the KV cache exist before the first
run, at least one untimed run absorbs first-use costs, and on CUDA each point is captured once
as a CUDA graph whose replays are timed with device events (serving engines replay decode steps
as graphs; eager PyTorch would add about 1,000 kernel launches from Python per step, which at
small batches takes longer than the GPU's work). Before allocating, a point's bytes are checked
against the free memory (`app.bench.memory`), so a KV cache that cannot fit is skipped at once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from app.bench.attention import AttentionKernel, choose_kernel
from app.bench.config import BenchConfig, PointPlan
from app.bench.device import (
    TORCH_DTYPES,
    capture_cuda_graph,
    free_memory_bytes,
    release_memory,
    synchronize,
    timer_for,
    torch_device,
)
from app.bench.environment import collect_environment
from app.bench.memory import (
    PredictedOutOfMemory,
    check_fits,
    format_bytes,
    interrupted_during,
    is_out_of_memory,
    point_bytes,
    weight_bytes,
)
from app.bench.model import Decoder
from app.bench.timing import TimingStats, measure
from app.formats.run_document import (
    AttentionBackend,
    DeviceKind,
    Environment,
    Microbenchmarks,
    Phase,
)

__all__ = ["GraphCapture", "TorchWorkload"]

GraphCapture = Callable[[Callable[[], object]], Callable[[], object]]
"""Turns an operation into the replay of its CUDA graph (`app.bench.device.capture_cuda_graph`)."""


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
        self._element_bytes = torch.empty((), dtype=self.dtype).element_size()
        use_graphs = config.cuda_graphs and config.device is DeviceKind.CUDA
        self._capture: GraphCapture | None = capture_cuda_graph if use_graphs else None
        self._eager_points: list[str] = []  # points whose graph capture failed

    @property
    def attention_backend(self) -> AttentionBackend | None:
        return None if self._kernel is None else self._kernel.name

    def environment(self) -> Environment:
        return collect_environment(self.config.device)

    def free_memory_bytes(self) -> int | None:
        """What new allocations can still take on the device (None: unknown, no prediction)."""
        return free_memory_bytes(self.config.device)

    def prepare(self) -> None:
        """Choose the attention kernel and allocate the weights (once); `PredictedOutOfMemory`
        before allocating when they cannot fit."""
        spec = self.config.model
        needed = weight_bytes(spec, self._element_bytes, self.config.max_tokens)
        free = self.free_memory_bytes()
        if free is not None and needed > free:
            raise PredictedOutOfMemory(
                f"predicted before allocating: the weights take {format_bytes(needed)}, "
                f"{format_bytes(free)} free"
            )
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
        """Time one prefill pass or one decode step of `point` (warm-up, then repeats).

        `PredictedOutOfMemory` before allocating anything when the point cannot fit."""
        decoder = self._require_decoder()
        self._check_fits(point)
        with torch.inference_mode():
            if point.phase is Phase.PREFILL:
                prompts = decoder.random_tokens(point.batch_size, point.prompt_tokens or 0)
                return self._time_point(point, lambda: decoder.prefill(prompts))
            cache = decoder.new_kv_cache(point.batch_size, point.context_tokens or 0)
            new_tokens = decoder.random_tokens(point.batch_size, 1)
            return self._time_point(point, lambda: decoder.decode_step(new_tokens, cache))

    def release(self) -> None:
        release_memory(self.config.device)

    def notes(self) -> tuple[str, ...]:
        if self.config.device is DeviceKind.CPU:
            timing = "timed with the host clock (perf_counter)"
        elif self._capture is not None:
            timing = (
                "timed with CUDA events around replays of a CUDA graph captured once per point "
                "(host launch overhead not timed, as in serving engines)"
            )
        else:
            timing = "timed with CUDA events around eager PyTorch (host launch overhead included)"
        notes = [timing]
        if self._eager_points:
            notes.append(
                "CUDA graph capture failed, so timed eagerly (launch overhead included): "
                + ", ".join(self._eager_points)
            )
        return tuple(notes)

    def _check_fits(self, point: PointPlan) -> None:
        materialised = self._kernel is not None and self._kernel.name is AttentionBackend.MATH
        needed = point_bytes(
            self.config.model, point, self._element_bytes, materialised_scores=materialised
        )
        check_fits(point, needed, self.free_memory_bytes())

    def _time_point(self, point: PointPlan, operation: Callable[[], object]) -> TimingStats:
        """Time `operation` at least one untimed run after its first use; on CUDA, the replays of
        its CUDA graph (captured after an eager first run), else the operation itself."""
        timed = operation
        if self._capture is not None:
            try:
                timed = self._capture(operation)
            except RuntimeError as error:
                if is_out_of_memory(error) or interrupted_during(error):
                    raise
                synchronize(self.config.device)  # a broken context fails loudly here
                first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
                self._eager_points.append(f"{point.label} ({first_line[:200]})")
        return measure(
            timed, self._timer, repeats=self.config.repeats, warmup=self.config.point_warmup
        )

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

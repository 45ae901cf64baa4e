"""PyTorch's side of the device: formats, the timer, synchronisation and memory release.

Imports torch: only the job's measuring modules import this one.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

import torch

from app.bench.schema import DeviceKind
from app.bench.timing import HostTimer, Timer
from app.engine.dtypes import DType

__all__ = [
    "TORCH_DTYPES",
    "CudaEventTimer",
    "cuda_available",
    "release_memory",
    "set_cpu_threads",
    "synchronize",
    "timer_for",
    "torch_device",
]

TORCH_DTYPES: dict[DType, torch.dtype] = {
    DType.BF16: torch.bfloat16,
    DType.FP16: torch.float16,
    DType.FP32: torch.float32,
}


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def set_cpu_threads(threads: int) -> None:
    """Limit PyTorch's intra-op CPU threads (shared machines, tests)."""
    torch.set_num_threads(threads)


def torch_device(kind: DeviceKind) -> torch.device:
    """The one device the job uses: the current CUDA device, or the CPU."""
    if kind is DeviceKind.CUDA:
        if not cuda_available():
            raise RuntimeError("--device cuda: PyTorch sees no CUDA device")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def synchronize(kind: DeviceKind) -> None:
    """Wait for queued device work; the CPU runs PyTorch operations eagerly, so nothing to do."""
    if kind is DeviceKind.CUDA:
        torch.cuda.synchronize()


@dataclass(frozen=True, slots=True)
class CudaEventTimer:
    """Times with CUDA events recorded on the current stream around the operation: device time,
    free of host-side jitter once the launch queue runs ahead."""

    def __call__(self, operation: Callable[[], object], /) -> float:
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        stop = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        operation()
        stop.record()
        stop.synchronize()
        return float(start.elapsed_time(stop))


def timer_for(kind: DeviceKind) -> Timer:
    """Device events on CUDA; the host clock (perf_counter_ns) around synchronisation on CPU."""
    if kind is DeviceKind.CUDA:
        return CudaEventTimer()
    return HostTimer(synchronize=lambda: synchronize(kind))


def release_memory(kind: DeviceKind) -> None:
    """Drop unreferenced tensors and hand the allocator's cached blocks back to the device, so
    the next point starts from the same free memory."""
    gc.collect()
    if kind is DeviceKind.CUDA:
        torch.cuda.empty_cache()

"""PyTorch's side of the device: formats, the timer, synchronisation and memory release.

Imports torch: only the job's measuring modules import this one.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from app.bench.timing import HostTimer, Timer
from app.engine.dtypes import DType
from app.formats.run_document import DeviceKind

__all__ = [
    "TORCH_DTYPES",
    "CudaEventTimer",
    "capture_cuda_graph",
    "cuda_available",
    "free_memory_bytes",
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
    the next point starts from the same free memory and its prediction reads the truth.

    On CUDA a full garbage collection first (a failed point's traceback can pin its tensors in
    a reference cycle; ~0.1 s a point). On the CPU, whose allocator returns large blocks to the
    system when the last reference goes, only the young generations (a fraction of a ms)."""
    if kind is DeviceKind.CUDA:
        gc.collect()
        torch.cuda.empty_cache()
    else:
        gc.collect(1)


def free_memory_bytes(kind: DeviceKind, meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Memory a new allocation can still take: on CUDA the device's free memory plus the blocks
    PyTorch's allocator holds unused; on the CPU the kernel's MemAvailable. None when unknown."""
    if kind is DeviceKind.CUDA:
        free, _total = torch.cuda.mem_get_info()
        cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        return int(free) + max(int(cached), 0)
    try:
        for line in meminfo.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key == "MemAvailable":
                kib = value.split()[0]
                return int(kib) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def capture_cuda_graph(operation: Callable[[], object]) -> Callable[[], None]:
    """Capture `operation` as a CUDA graph and return its replay, which launches the whole
    captured sequence of kernels onto the current stream at once.

    `operation` runs once eagerly first, on a side stream as PyTorch's CUDA-graph guide asks:
    that run pays every first use (lazy module loading, kernel and cuBLAS algorithm selection,
    workspaces), which a capture must not see. Its inputs must stay alive, at the same
    addresses, for as long as the replay is used; the graph's private memory pool (the peak
    activations of one run) lives as long as the returned callable.
    """
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        operation()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        operation()
    torch.cuda.synchronize()

    def replay() -> None:
        graph.replay()

    return replay

"""What the run document records about the machine: device name, versions, host.

Imports torch. Anything that cannot be read (no nvidia-smi, no /proc/cpuinfo) is recorded as null
rather than guessed.
"""

from __future__ import annotations

import platform
import shutil
import socket
import subprocess
from pathlib import Path

import torch

from app.formats.run_document import DeviceKind, Environment

__all__ = ["collect_environment", "cpu_model_name", "nvidia_driver_version"]

_NVIDIA_SMI_TIMEOUT_S = 10.0


def cpu_model_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name from /proc/cpuinfo, else what `platform` knows."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def nvidia_driver_version() -> str | None:
    """The driver version nvidia-smi reports for the first GPU; null without nvidia-smi."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    try:
        completed = subprocess.run(
            [executable, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = completed.stdout.strip().splitlines()
    return lines[0].strip() if lines and lines[0].strip() else None


def collect_environment(kind: DeviceKind) -> Environment:
    """The environment of a run on `kind` (the current CUDA device, or the CPU)."""
    if kind is DeviceKind.CUDA:
        device_name = str(torch.cuda.get_device_name(torch.cuda.current_device()))
        driver_version = nvidia_driver_version()
        num_devices = int(torch.cuda.device_count())
    else:
        device_name = cpu_model_name()
        driver_version = None
        num_devices = 1
    return Environment(
        device_name=device_name,
        device_kind=kind,
        torch_version=str(torch.__version__),
        cuda_version=torch.version.cuda,
        driver_version=driver_version,
        host=socket.gethostname() or None,
        python_version=platform.python_version(),
        num_devices=num_devices,
    )

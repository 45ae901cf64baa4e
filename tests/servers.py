"""Real server processes for the tests that need one: `ridgeline serve` on a free port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.conftest import TEST_API_KEY

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(
    database_url: str,
    *,
    cwd: Path = ROOT,
    pythonpath: Path | None = None,
    workers: int = 1,
    **settings: str,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """One `ridgeline serve` process (`--workers`) on a free port, run in `cwd` (importing
    `app` from `pythonpath` when given); yields its base URL and the process."""
    port = _free_port()
    extra = {"PYTHONPATH": str(pythonpath)} if pythonpath is not None else {}
    env = {
        **os.environ,
        **extra,
        "RIDGELINE_DATABASE_URL": database_url,
        "RIDGELINE_API_KEYS": TEST_API_KEY,
        "RIDGELINE_LOG_LEVEL": "WARNING",
        # A plan answered at once (201) unless a test asks for less: a loaded machine may take
        # seconds to start the first heavy-work process.
        "RIDGELINE_PLAN_WAIT_S": "60",
        **{f"RIDGELINE_{name.upper()}": value for name, value in settings.items()},
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", str(workers)],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server on port {port} did not start")
            time.sleep(0.1)
        yield url, process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)

"""Start the service as `make run` does, load it with wrk, and print what it measured.

Used by the bench_*.py scripts; not a test. Needs `wrk` (Debian package `wrk`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Result:
    name: str
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    max_ms: float = 0.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_server(log_level: str = "INFO", **settings: str) -> Iterator[str]:
    """A fresh SQLite database, migrated and loaded, served by one uvicorn worker; `settings`
    are extra RIDGELINE_* variables (e.g. response_memo_entries="0")."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "RIDGELINE_DATABASE_URL": f"sqlite:///{tmp}/bench.db",
            "RIDGELINE_API_KEYS": "bench-key-0123456789",
            "RIDGELINE_LOG_LEVEL": log_level,
            **{f"RIDGELINE_{name.upper()}": value for name, value in settings.items()},
        }
        subprocess.run([BIN / "ridgeline", "migrate"], env=env, check=True, capture_output=True)
        subprocess.run(
            [BIN / "ridgeline", "load-catalog"], env=env, check=True, capture_output=True
        )
        port = _free_port()
        server = subprocess.Popen(
            [
                BIN / "uvicorn",
                "--factory",
                "--app-dir",
                str(ROOT / "scripts"),
                "bench_server:create_bench_app",
                "--port",
                str(port),
                "--no-access-log",
                "--timeout-graceful-shutdown",
                "5",
            ],
            env={**env, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # the JSON access log is still formatted, as in production
        )
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(100):
                try:
                    if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            else:
                raise RuntimeError("server did not become ready")
            yield base
        finally:
            server.terminate()
            server.wait(10)


_LATENCY = re.compile(r"^\s*(50|99)%\s+([\d.]+)(us|ms|s)\s*$", re.MULTILINE)
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk(
    name: str,
    url: str,
    *,
    body: dict[str, Any] | None = None,
    vary: tuple[str, int, int] | None = None,
    headers: dict[str, str] | None = None,
    connections: int = 32,
    seconds: int = 10,
    threads: int = 1,
) -> Result:
    """Load `url` with `connections` keep-alive clients for `seconds`; POST when `body` is given.

    `vary=(field, low, high)` gives every request its own body, with `field` drawn uniformly
    from [low, high]: no two requests are alike, so no cache along the way can answer them."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        if body is not None:
            script.write('wrk.method = "POST"\n')
            script.write(f"wrk.body = {json.dumps(json.dumps(body))}\n")
            script.write('wrk.headers["Content-Type"] = "application/json"\n')
        if body is not None and vary is not None:
            field, low, high = vary
            template = json.dumps({**body, field: 123456789}).replace("123456789", "%d")
            script.write(f"local template = {json.dumps(template)}\n")
            script.write(
                "request = function()\n"
                f"  local body = string.format(template, math.random({low}, {high}))\n"
                "  return wrk.format(nil, nil, nil, body)\n"
                "end\n"
            )
        for key, value in (headers or {}).items():
            script.write(f"wrk.headers[{json.dumps(key)}] = {json.dumps(value)}\n")
    try:
        out = subprocess.run(
            [
                "wrk",
                f"-t{threads}",
                f"-c{connections}",
                f"-d{seconds}s",
                "--latency",
                "-s",
                script.name,
                url,
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        os.unlink(script.name)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    latency = {p: float(v) * _UNITS[u] for p, v, u in _LATENCY.findall(out)}
    # "Latency   1.20ms  0.40ms  15.00ms   90.0%": mean, deviation, max, share within one.
    spread = re.search(r"^\s*Latency\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)", out, re.MULTILINE)
    max_ms = float(spread.group(1)) * _UNITS[spread.group(2)] if spread else 0.0
    errors_match = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    socket_errors = re.search(r"Socket errors:.*", out)
    errors = int(errors_match.group(1)) if errors_match else 0
    if socket_errors:
        errors += sum(int(n) for n in re.findall(r"\d+", socket_errors.group(0)))
    return Result(name, rate, latency["50"], latency["99"], errors, max_ms)


def print_table(results: list[Result], baseline: Result) -> None:
    print(f"{'endpoint':<62} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs bare':>8} {'errors':>6}")
    for r in results:
        ratio = r.requests_per_s / baseline.requests_per_s
        print(
            f"{r.name:<62} {r.requests_per_s:>9.0f} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} "
            f"{ratio:>8.2f} {r.errors:>6}"
        )

"""Start the service as `make run` does (and a plain FastAPI app beside it as the yardstick),
load them with wrk, and print what it measured.

Used by the bench_*.py scripts; not a test. Needs `wrk` (Debian package `wrk`).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
API_KEY = "bench-key-0123456789"


@dataclass(frozen=True)
class Result:
    name: str
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    max_ms: float = 0.0
    cpu_us_per_request: float | None = None
    """CPU time the server's processes spent per request (user + system), where known: unlike
    requests/s, hardly moved by what else the machine runs."""
    requests: int = 0
    """Requests completed in the run."""


_SERVERS: dict[str, int] = {}
"""Base URL -> pid of the server process serving it (its workers are its children)."""
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` and its descendants, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15
    return own + sum(_cpu_s(int(child)) for child in children)


def _server_of(url: str) -> int | None:
    return next((pid for base, pid in _SERVERS.items() if url.startswith(base)), None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(
    factory: str, env: dict[str, str], workers: int, wrapper: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            *wrapper,
            *((sys.executable,) if wrapper else ()),  # valgrind runs the interpreter itself
            BIN / "uvicorn",
            "--factory",
            "--app-dir",
            str(ROOT / "scripts"),
            f"bench_server:{factory}",
            "--port",
            env["BENCH_PORT"],
            "--workers",
            str(workers),
            "--no-access-log",
            "--timeout-graceful-shutdown",
            "5",
        ],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # the JSON access log is still formatted, as in production
    )


@contextmanager
def _served(
    factory: str,
    env: dict[str, str],
    ready_path: str,
    workers: int = 1,
    wrapper: tuple[str, ...] = (),
) -> Iterator[str]:
    port = _free_port()
    server = _serve(factory, {**env, "BENCH_PORT": str(port)}, workers, wrapper)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(3000 if wrapper else 300):
            try:
                if httpx.get(f"{base}{ready_path}", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None:
                raise RuntimeError(f"{factory} exited with {server.returncode}")
            time.sleep(0.1)
        else:
            raise RuntimeError("server did not become ready")
        _SERVERS[base] = server.pid
        yield base
    finally:
        _SERVERS.pop(base, None)
        server.terminate()
        server.wait(10)


@contextmanager
def running_plain(wrapper: tuple[str, ...] = ()) -> Iterator[str]:
    """The yardstick: a plain FastAPI app (no middleware, `GET /constant` returns a constant)
    under the same uvicorn as the service (run by `wrapper` when given, e.g. valgrind)."""
    with _served("create_plain_app", dict(os.environ), "/constant", wrapper=wrapper) as base:
        yield base


@contextmanager
def running_server(
    log_level: str = "INFO",
    *,
    factory: str = "create_bench_app",
    database_url: str | None = None,
    workers: int = 1,
    wrapper: tuple[str, ...] = (),
    **settings: str,
) -> Iterator[str]:
    """Ridgeline as `make run` serves it: a database migrated and loaded (a fresh SQLite file
    unless `database_url` names one), `workers` uvicorn processes (run by `wrapper` when given,
    e.g. valgrind); `settings` are extra RIDGELINE_* variables (e.g. response_memo_entries="0")."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "RIDGELINE_DATABASE_URL": database_url or f"sqlite:///{tmp}/bench.db",
            "RIDGELINE_API_KEYS": API_KEY,
            "RIDGELINE_LOG_LEVEL": log_level,
            **{f"RIDGELINE_{name.upper()}": value for name, value in settings.items()},
        }
        subprocess.run([BIN / "ridgeline", "migrate"], env=env, check=True, capture_output=True)
        subprocess.run(
            [BIN / "ridgeline", "load-catalog"], env=env, check=True, capture_output=True
        )
        with _served(factory, env, "/readyz", workers, wrapper) as base:
            yield base


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database made from `admin_url` (a server the caller may create
    databases on), dropped afterwards."""
    from sqlalchemy import create_engine, text  # noqa: PLC0415
    from sqlalchemy.engine import make_url  # noqa: PLC0415

    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"ridgeline_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


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
    server = _server_of(url)
    cpu_before = _cpu_s(server) if server is not None else 0.0
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
    cpu_s = _cpu_s(server) - cpu_before if server is not None else None
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
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
    cpu_us = cpu_s / total * 1e6 if cpu_s is not None and total else None
    return Result(name, rate, latency["50"], latency["99"], errors, max_ms, cpu_us, total)


@dataclass(frozen=True)
class Load:
    seconds: int = 5
    connections: int = 32


@dataclass(frozen=True)
class Compared:
    """An endpoint measured beside the plain app, run for run."""

    result: Result
    """The endpoint's median run (by requests/s)."""
    ratio: float
    """Median over runs of its requests/s over the plain app's in the run just before."""
    plain: Result
    """The plain app's median run."""
    ratios: tuple[float, ...] = ()
    """Every run's ratio, from the lowest."""


def compared(
    name: str,
    url: str,
    plain_url: str,
    load: Load,
    runs: int,
    *,
    body: dict[str, Any] | None = None,
    vary: tuple[str, int, int] | None = None,
    headers: dict[str, str] | None = None,
) -> Compared:
    """`runs` pairs of wrk runs, `plain_url` (the plain app's constant GET, or another
    yardstick) and `url`, in turn first: on a machine others share, a ratio of two runs seconds
    apart holds far better than either figure, and neither side always runs second."""
    plain_run = functools.partial(
        wrk, "plain", plain_url, seconds=load.seconds, connections=load.connections
    )
    my_run = functools.partial(
        wrk,
        name,
        url,
        body=body,
        vary=vary,
        headers=headers,
        seconds=load.seconds,
        connections=load.connections,
    )
    pairs = []
    for run in range(runs):
        if run % 2 == 0:
            plain = plain_run()
            mine = my_run()
        else:
            mine = my_run()
            plain = plain_run()
        pairs.append((mine.requests_per_s / plain.requests_per_s, mine, plain))
    pairs.sort(key=lambda pair: pair[0])
    _, mine, _ = pairs[len(pairs) // 2]
    plains = sorted((pair[2] for pair in pairs), key=lambda r: r.requests_per_s)
    ratios = tuple(pair[0] for pair in pairs)
    return Compared(mine, statistics.median(ratios), plains[len(plains) // 2], ratios)


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """An interval that holds the median of what `values` sample with at least `confidence`,
    assuming nothing of their distribution: the k-th lowest and k-th highest value, for the
    largest k with P(B < k) <= (1 - confidence) / 2, B ~ Binomial(n, 1/2) (21 values: the
    6th and the 16th). Too few values for any such k (under 6 at 95 %): the whole range."""
    ordered = sorted(values)
    n = len(ordered)
    tail = (1 - confidence) / 2
    k, below = 0, 0.0  # below: P(B < k)
    while k < n and below + math.comb(n, k) / 2**n <= tail:
        below += math.comb(n, k) / 2**n
        k += 1
    if k == 0:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


def print_compared(rows: list[Compared]) -> None:
    """One line per endpoint: its figures, its throughput as a ratio to the plain app's, and
    the same ratio from CPU time per request (what the throughput ratio would be on a machine
    with a core to spare for the server: noise from other work hardly moves it)."""
    print(
        f"{'endpoint':<46} {'req/s':>6} {'p50 ms':>6} {'p99 ms':>6} {'plain/s':>7} "
        f"{'vs plain':>8} {'cpu us':>6} {'by cpu':>6} {'errors':>6}"
    )
    for row in rows:
        r, plain = row.result, row.plain
        by_cpu = (
            plain.cpu_us_per_request / r.cpu_us_per_request
            if r.cpu_us_per_request and plain.cpu_us_per_request
            else float("nan")
        )
        cpu = r.cpu_us_per_request or float("nan")
        print(
            f"{r.name:<46} {r.requests_per_s:>6.0f} {r.p50_ms:>6.1f} {r.p99_ms:>6.1f} "
            f"{plain.requests_per_s:>7.0f} {row.ratio:>8.2f} {cpu:>6.0f} {by_cpu:>6.2f} "
            f"{r.errors:>6}"
        )


def print_table(results: list[Result], baseline: Result) -> None:
    """One line per result, its throughput as a ratio to `baseline`'s (the plain app's)."""
    print(
        f"{'endpoint':<58} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs plain':>8} {'errors':>6}"
    )
    for r in results:
        ratio = r.requests_per_s / baseline.requests_per_s
        print(
            f"{r.name:<58} {r.requests_per_s:>9.0f} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} "
            f"{ratio:>8.2f} {r.errors:>6}"
        )

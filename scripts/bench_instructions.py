"""CPU instructions per request of the server itself, counted by valgrind (callgrind) while wrk
loads it: the plain FastAPI app's constant GET, Ridgeline's `/healthz` with and without its
middleware, and the estimate endpoints with every answer computed (bodies as
bench_estimates.py draws them). Each figure is also given as a ratio, the plain GET's
instructions over the endpoint's: the throughput ratio a machine would show with a core to
spare for the server and the same instructions per cycle throughout.

Unlike requests/s, the counts hardly move with what else the machine runs (runs on 2026-12-03
agreed within 1.5 % for /healthz and within 6 % for the plain GET), so they show changes that
the wall-clock ratios of bench_api.py and bench_estimates.py, which swing by 10-20 % run to run
on a shared machine, cannot. They leave out what a count cannot see (cache misses, the kernel's
share of a request); every thread of the server is counted. Needs valgrind (Debian package
`valgrind`); takes two minutes or so per server.

    .venv/bin/python scripts/bench_instructions.py [--seconds 15] [--only healthz]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from bench_estimates import ENDPOINTS
from benchlib import _SERVERS, running_plain, running_server, wrk

CONNECTIONS = 4
"""Few: under valgrind the server runs some fifty times slower."""


_DUMPS = Path(tempfile.mkdtemp(prefix="ridgeline-callgrind-"))
"""Where the servers' counts are dumped (and read back, one dump at a time)."""


def _wrapper(name: str) -> tuple[str, ...]:
    return (
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={_DUMPS / name}.%p",
        "--dump-instr=no",
    )


def per_request(
    base: str,
    pid: int,
    path: str,
    *,
    seconds: int,
    body: dict[str, object] | None = None,
    vary: tuple[str, int, int] | None = None,
) -> float:
    """Instructions the server `pid` ran per request of `path` over `seconds` of wrk load,
    after a warm-up: counters zeroed, load, counters dumped."""
    url = base + path

    def load(duration: int) -> int:
        result = wrk(path, url, body=body, vary=vary, seconds=duration, connections=CONNECTIONS)
        if result.errors:
            raise RuntimeError(f"{path}: {result.errors} failed requests")
        return result.requests

    for _ in range(3):  # first requests (a catalog read, cost models built) run slowest
        httpx.request("POST" if body else "GET", url, json=body, timeout=600).raise_for_status()
    load(5)
    before = set(_DUMPS.iterdir())
    subprocess.run(["callgrind_control", "--zero", str(pid)], check=True, capture_output=True)
    requests = load(seconds)
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
    dumps: list[Path] = []
    for _ in range(600):  # the server writes its dump when it next runs: wait for it
        dumps = [p for p in _DUMPS.iterdir() if p not in before and f".{pid}" in p.name]
        if dumps and all(_complete(dump) for dump in dumps):
            break
        time.sleep(0.1)
    total = 0
    for dump in dumps:
        match = re.search(r"^totals:\s+(\d+)", dump.read_text(), re.MULTILINE)
        if match:
            total += int(match.group(1))
        dump.unlink()
    if not total or not requests:
        raise RuntimeError(f"no counts for {path}")
    return total / requests


def _complete(dump: Path) -> bool:
    return re.search(r"^totals:", dump.read_text(), re.MULTILINE) is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--only", default=None, help="only rows whose name contains this")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")

    def wanted(name: str) -> bool:
        return args.only is None or args.only in name

    rows: list[tuple[str, float]] = []
    with running_plain(_wrapper("plain")) as base:
        plain = per_request(base, _SERVERS[base], "/constant", seconds=args.seconds)
    rows.append(("plain FastAPI GET", plain))
    if wanted("healthz"):
        for name, factory in (
            ("GET /healthz", "create_bench_app"),
            ("GET /healthz, Ridgeline without middleware", "create_bare_ridgeline_app"),
        ):
            with running_server(factory=factory, wrapper=_wrapper(factory)) as base:
                rows.append(
                    (name, per_request(base, _SERVERS[base], "/healthz", seconds=args.seconds))
                )
    estimates = {path: spec for path, spec in ENDPOINTS.items() if wanted(path)}
    if estimates:
        with running_server(response_memo_entries="0", wrapper=_wrapper("estimates")) as base:
            for path, (body, vary) in estimates.items():
                count = per_request(
                    base,
                    _SERVERS[base],
                    path.split(" ")[0],
                    seconds=args.seconds,
                    body=body,
                    vary=vary,
                )
                rows.append((f"POST {path} (computed)", count))
    print(f"{'endpoint':<52} {'instructions':>12} {'plain / it':>10}")
    for name, count in rows:
        print(f"{name:<52} {count / 1e3:>11.1f}k {plain / count:>10.2f}")
    counts = dict(rows)
    with_mw = counts.get("GET /healthz")
    without = counts.get("GET /healthz, Ridgeline without middleware")
    if with_mw is not None and without is not None:
        print(
            f"middleware cost on /healthz by instructions: {1 - without / with_mw:.1%} "
            "(target <= 15 %)"
        )


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(_DUMPS, ignore_errors=True)

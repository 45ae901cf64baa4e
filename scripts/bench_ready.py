"""How the first seconds after `/readyz` answer 200 look to a scheduler: start `ridgeline serve`
on a migrated and loaded SQLite file, poll `/readyz` every 10 ms, and from the first 200 send
decode estimates from `--connections` connections at once for `--seconds` seconds (bodies drawn
from a fixed set over the bundled GPUs and models, so they are memoised after their first
answer, as a scheduler's repeated questions are). Prints the time to ready and the latency
percentiles of the requests sent in the first five seconds and after.

    .venv/bin/python scripts/bench_ready.py /tmp/r.db [--connections 32] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

GPUS = ("h100-sxm5-80gb", "h200-sxm-141gb", "a100-sxm4-80gb", "l40s-48gb", "b200-sxm-180gb")
MODELS = ("llama-3.1-8b", "qwen3-30b-a3b", "mistral-7b")
BODIES = [
    {"model": model, "gpu": gpu, "batch_size": batch, "context_tokens": 2048}
    for gpu, model, batch in itertools.product(GPUS, MODELS, (8, 64))
]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _load(
    base: str, connections: int, seconds: float, start: float
) -> list[tuple[float, float, int]]:
    samples: list[tuple[float, float, int]] = []  # (sent after ready s, latency ms, status)
    limits = httpx.Limits(max_connections=connections)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:

        async def one(offset: int) -> None:
            for i in itertools.count(offset):
                sent = time.monotonic()
                if sent - start >= seconds:
                    return
                answer = await client.post("/v1/estimates/decode", json=BODIES[i % len(BODIES)])
                samples.append((sent - start, (time.monotonic() - sent) * 1e3, answer.status_code))

        await asyncio.gather(*(one(k * 7) for k in range(connections)))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database", help="a migrated and loaded SQLite file (copied, not changed)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--again",
        action="store_true",
        help="then the same load once more on the now warm server (the load's own ramp-up)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        database = Path(scratch) / "ready.db"
        shutil.copy(args.database, database)
        env = os.environ | {
            "RIDGELINE_DATABASE_URL": f"sqlite:///{database}",
            "RIDGELINE_LOG_LEVEL": "WARNING",
            "OPENBLAS_NUM_THREADS": "1",
        }
        command = [sys.executable, "-m", "app.cli", "serve", "--port", str(args.port)]
        launched = time.monotonic()
        server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{args.port}"
        try:
            while True:
                try:
                    if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None:
                    raise SystemExit("the server exited before it was ready")
                time.sleep(0.01)
            ready = time.monotonic()
            samples = asyncio.run(_load(base, args.connections, args.seconds, ready))
            rounds = [("after ready", samples)]
            if args.again:
                again = time.monotonic()
                rounds.append(
                    ("warm again", asyncio.run(_load(base, args.connections, args.seconds, again)))
                )
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"ready {ready - launched:.2f} s after launch")
    for name, found in rounds:
        failed = sum(1 for _, _, status in found if status != 200)
        print(f"{name}: {len(found)} requests, {failed} not 200")
        for label, low, high in (("first 5 s", 0.0, 5.0), ("after", 5.0, float("inf"))):
            window = [ms for sent, ms, _ in found if low <= sent < high]
            if window:
                print(
                    f"  {label:>9}: n {len(window):6d}  p50 {statistics.median(window):7.1f} ms  "
                    f"p99 {_quantile(window, 0.99):7.1f} ms  max {max(window):7.1f} ms"
                )


if __name__ == "__main__":
    main()
